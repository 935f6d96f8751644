"""``veeksha run --ray local``: the run starts a Ray cluster of its own, as its children.

(Apart from test_ray_runs.py, whose tests share one two-node cluster: a module runs on one
worker of the suite, and these two ~20 s tests need none of that cluster.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.integration.distributed.conftest import ray_env

VEEKSHA = Path(sys.executable).parent / "veeksha"

LOCAL = """
seed: 5
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.05}}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 40}}}
runtime: {max_sessions: -1, benchmark_timeout: 60, num_workers: 1, cpu_affinity: "off"}
simulator: {timing: fixed, ttft_ms: 20, itl_ms: 25}
health_checks: {max_dispatch_lag_p99_ms: 100, clock_sync_floor_ms: 10}
"""


@pytest.mark.parametrize("stop", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_stop_to_the_process_group_of_a_local_ray_run_keeps_its_results(
    stop: signal.Signals, tmp_path: Path
) -> None:
    # `--ray local` starts its cluster as children of the driver, in its process group. A
    # terminal that closes sends SIGHUP to the group, `timeout` or `kill -- -PGID` SIGTERM:
    # was, the driver died at once (no merged results); with the driver kept, the cluster
    # still died of it, and the driver waited 60 s for a GCS that was gone, then exited 1 with
    # no results (SIGTERM until the cluster started with it blocked too), leaving a Ray
    # worker behind.
    path = tmp_path / "s.yaml"
    path.write_text(LOCAL)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [str(VEEKSHA), "run", str(path), "--ray", "local", "--output-dir", str(out), "--no-plots"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ray_env(),
        start_new_session=True,  # (its own group, as a shell's job: the test's is not signalled)
    )
    started: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    started.setdefault(child.pid, child)
            found = list(out.glob("*/shards/shard-0/trace.jsonl"))
            if found and found[0].read_bytes().count(b"\n") >= 10:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate(timeout=5)
        os.killpg(proc.pid, stop)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 3, stderr[-3000:]
    assert "Traceback" not in stderr
    assert "interrupted: stopping 1 shard(s)" in stderr
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["run"]["interrupted"], summary["run"]["stop_reason"]) == (True, "interrupted")
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert (requests.status == "ok").sum() >= 10
    deadline = time.monotonic() + 15
    alive = list(started.values())
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, [" ".join(p.cmdline())[:100] for p in alive]
