"""A closed loop of 300 streams on one worker under a low open-file limit (a real ``veeksha
run``, its limits set as the shell's ``ulimit`` would, against a simulator outside them).

With Linux's usual soft limit below the streams and a hard limit above them, the worker raises
its own and every request is answered (before, ~80 % failed with ``[Errno 24] Too many open
files``, filed as the server's ``connection_refused``). With the hard limit itself below them,
the requests the machine refused are ``client_limit`` rows, never sent, and the load generator
says so: a warning before t0 and a ``generator_saturation`` failure naming them."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.conftest import StartSimulator

SCENARIO = """
seed: 3
traffic_scheduler: {{type: concurrent, target_concurrent_sessions: 300, rampup_seconds: 0}}
session_generator:
  type: synthetic
  session_graph: {{type: single_request}}
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 16}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 4}}}}}}
client: {{api_base: "{api_base}", model: veeksha-sim}}
runtime: {{max_sessions: 600, benchmark_timeout: 30, num_workers: 1, cpu_affinity: "off"}}
server_metrics: {{enabled: false}}
"""

LIMIT = 200  # (a worker holds ~20 other files: 300 streams need ~320)


def _run(tmp_path: Path, api_base: str, soft: int, hard: int) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(api_base=api_base))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "veeksha.cli", "run", str(path), "--output-dir", str(out)]
    proc = subprocess.run(
        [*command, "-q", "--no-plots"],
        check=False,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = out.iterdir()
    return run_dir


@pytest.fixture
def api_base(start_simulator: StartSimulator) -> str:
    # 150 ms before the first token: the 300 sessions' requests are all in flight at once
    return start_simulator(preset="fast", ttft_ms=150).base_url


def test_a_low_soft_limit_is_raised_and_every_stream_is_answered(
    tmp_path: Path, api_base: str
) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"this machine's hard open-file limit ({hard}) is below the test's needs")
    run_dir = _run(tmp_path, api_base, LIMIT, hard)
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert len(requests) == 600
    assert (requests.status == "ok").all(), requests.error_message.dropna().head(3).tolist()
    assert "open-file limit" not in (run_dir / "run.log").read_text()


def test_requests_a_low_hard_limit_refuses_are_the_load_generators_failure(
    tmp_path: Path, api_base: str
) -> None:
    run_dir = _run(tmp_path, api_base, LIMIT, LIMIT)
    log = (run_dir / "run.log").read_text()
    assert f"open-file limit ({LIMIT}, ulimit -Hn) is below the ~300 connections" in log
    requests = pd.read_parquet(run_dir / "requests.parquet")
    refused = requests[requests.error_kind == "client_limit"]
    assert len(refused) > 0
    assert (refused.status == "error").all()
    assert refused.error_message.str.contains("Too many open files").all()
    assert not (requests.error_kind == "connection_refused").any()  # (not the server's)
    assert (requests.status == "ok").sum() > 0  # the streams the limit allowed were answered
    checks = {c["name"]: c for c in json.loads((run_dir / "health.json").read_text())["checks"]}
    saturation = checks["generator_saturation"]
    assert saturation["status"] == "FAIL"
    assert saturation["statistics"]["client_limit"] == len(refused)
    assert saturation["detail"].startswith(f"{len(refused)} requests never sent")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["errors"]["by_kind"]["client_limit"]["count"] == len(refused)
