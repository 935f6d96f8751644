"""A real process writing rows, SIGKILLed mid-way, leaves readable parts with all older rows."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd

from veeksha.record.reader import load_requests, read_metadata

ROOT = Path(__file__).resolve().parents[3]

# The child adds 50 rows at a time and reports how many it has added, then keeps going.
CHILD = textwrap.dedent(
    """
    import sys, time
    from tests.unit.record.builders import T0, make_metadata, make_record, make_result
    from veeksha.record.parquet import ResultWriter
    from veeksha.record.rows import request_row

    writer = ResultWriter(sys.argv[1], make_metadata(), flush_interval_s=0.2)
    added = 0
    while True:
        for _ in range(50):
            record = make_record(make_result(request_id=added), request_id=added)
            writer.add_request(request_row(record, T0))
            added += 1
        print(added, flush=True)
        time.sleep(0.01)
    """
)

SAFE_AGE_S = 1.0  # rows added this long before the kill must be on disk (flush every 0.2 s)
RUN_FOR_S = 2.0


def test_sigkill_keeps_all_but_the_last_second(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert child.stdout is not None
    reports: list[tuple[float, int]] = []  # (when the parent read it, rows added by then)
    try:
        for line in child.stdout:
            reports.append((time.monotonic(), int(line)))
            if reports[-1][0] - reports[0][0] >= RUN_FOR_S:
                break
    finally:
        killed_at = time.monotonic()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    old_enough = [added for seen, added in reports if seen <= killed_at - SAFE_AGE_S]
    assert old_enough, "the child did not run long enough"
    table = load_requests(tmp_path)
    ids = table.column("request_id").to_pylist()
    assert ids == list(range(len(ids)))  # whole parts only: no gap, no duplicate
    assert len(ids) >= max(old_enough)
    assert read_metadata(tmp_path)["partial"] == "true"
    assert len(pd.read_parquet(tmp_path / "parts" / "requests")) == len(ids)
