"""The server watch's process hands its parts to veeksha when asked, and merges them itself
when veeksha went without asking (veeksha.server.watch_process's protocol)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from veeksha.isolated import isolated_module_command
from veeksha.record.server_metrics import SERVER_METRICS_FILE
from veeksha.server.watch_process import MERGE_REQUEST, WatchSettings


@pytest.mark.parametrize("merge_request", [True, False])
def test_the_watch_hands_over_its_parts_only_when_asked(
    tmp_path: Path, merge_request: bool
) -> None:
    settings = WatchSettings("http://127.0.0.1:1/metrics", None, 60.0, 0, str(tmp_path), {})
    proc = subprocess.Popen(
        isolated_module_command("veeksha.server.watch_process"),  # (this checkout's veeksha)
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    # the settings and the stop request in one write: the watch must read both
    data = json.dumps(dataclasses.asdict(settings)).encode() + b"\n"
    out, _ = proc.communicate(data + (MERGE_REQUEST if merge_request else b""), timeout=60)
    messages = [json.loads(line) for line in out.splitlines()]
    assert messages[0] == {"ready": True}
    (last,) = [m for m in messages if "status" in m]
    assert last["parts"] is merge_request
    assert last["status"]["status"] == "failed"  # (nothing listens there: scrapes fail)
    assert (tmp_path / SERVER_METRICS_FILE).exists() is not merge_request
    if not merge_request:  # merged by the watch itself, with its status in the metadata
        meta = pq.read_schema(tmp_path / SERVER_METRICS_FILE).metadata
        assert meta[b"server_metrics_status"] == b"failed"
