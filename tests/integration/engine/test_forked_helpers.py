"""``veeksha run`` forks its built-in simulator, workers and server watch from the main process
(``veeksha.forked``): the run is the same as with fresh interpreters (``VEEKSHA_FORK=0``), every
helper is one of those forks, and none outlives the run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq

_SCENARIO = """
seed: 11
traffic_scheduler:
  type: rate
  interval_generator: {type: poisson, arrival_rate: 20}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 2}
    # (think times of 0.1 s on average: the default's 1 s kept the run ~3 s past its arrivals)
    request_wait_generator: {type: poisson, arrival_rate: 10}
runtime: {max_sessions: 12, benchmark_timeout: 30, num_workers: 2}
server_metrics: {interval: 0.2}
"""

_HELPERS = {"veeksha-sim", "veeksha-worker", "veeksha-watch"}
_SAME_COLUMNS = [
    "session_id",
    "node_id",
    "status",
    "target_prompt_tokens",
    "prompt_tokens_total",
    "requested_output_tokens",
    "output_tokens",
]


def _run(folder: Path, fork: str) -> tuple[Path, dict[int, str]]:
    """One run; the run folder and the names of the helper processes seen while it ran."""
    scenario = folder / "s.yaml"
    scenario.parent.mkdir(parents=True, exist_ok=True)
    scenario.write_text(_SCENARIO)
    env = {**os.environ, "VEEKSHA_FORK": fork}
    command = [sys.executable, "-m", "veeksha.cli", "run", str(scenario), "-q", "--no-plots"]
    proc = subprocess.Popen(
        [*command, "--output-dir", str(folder / "out")],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    seen: dict[int, str] = {}
    root = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            for child in root.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    seen[child.pid] = child.name()
        time.sleep(0.01)
    _, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    assert proc.returncode == 0, err.decode()[-3000:]
    (run_dir,) = (folder / "out").iterdir()
    return run_dir, seen


def _rows(run_dir: Path) -> list[dict[str, object]]:
    table = pq.read_table(run_dir / "requests.parquet", columns=_SAME_COLUMNS)
    # (request ids follow the order requests were released in, which timing decides)
    return sorted(table.to_pylist(), key=lambda row: (row["session_id"], row["node_id"]))


def test_forked_helpers_run_the_same_benchmark_as_fresh_interpreters(tmp_path: Path) -> None:
    forked_dir, forked_seen = _run(tmp_path / "forked", "1")
    fresh_dir, fresh_seen = _run(tmp_path / "fresh", "0")

    log = (forked_dir / "run.log").read_text()
    assert "(forked from this process)" in log
    assert "(forked from this process)" not in (fresh_dir / "run.log").read_text()
    # every helper of the forked run named itself: the simulator, both workers, the watch
    names = sorted(name for name in forked_seen.values() if name.startswith("veeksha-"))
    assert set(names) == _HELPERS, forked_seen
    assert names.count("veeksha-worker") == 2
    assert not _HELPERS & set(fresh_seen.values())
    # none outlives the run (the simulator and the watch run in sessions of their own)
    for pid in forked_seen:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie", pid

    assert _rows(forked_dir) == _rows(fresh_dir)
    assert len(_rows(forked_dir)) == 24
    for run_dir in (forked_dir, fresh_dir):
        assert {row["status"] for row in _rows(run_dir)} == {"ok"}
        scrapes = pq.read_table(run_dir / "server_metrics.parquet")
        assert scrapes.num_rows > 0  # (the watch scraped the simulator's /metrics)


def test_a_trace_replay_forks_its_helpers_too(tmp_path: Path) -> None:
    # (the trace's reader imports Arrow, which starts a thread: the helpers are forked first)
    trace = Path(__file__).parents[3] / "scenarios" / "traces" / "request_log.csv"
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"""
traffic_scheduler: {{type: trace, speedup: 50}}
session_generator:
  type: trace
  trace_file: {trace}
  flavor: {{type: request_log}}
runtime: {{max_sessions: 5, benchmark_timeout: 30}}
"""
    )
    command = [sys.executable, "-m", "veeksha.cli", "run", str(scenario), "-q", "--no-plots"]
    done = subprocess.run(
        [*command, "--output-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "out").iterdir()
    assert "(forked from this process)" in (run_dir / "run.log").read_text()
    assert pq.read_table(run_dir / "requests.parquet").num_rows > 0
