"""A ramped open-loop rate through ``veeksha run``'s code against the built-in simulator: the
sessions start where Λ⁻¹ puts them, the arrival checks pass against the ramp, and summary.json's
``ramp`` section offers a rising rate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from tests.integration.robustness.helpers import run_in_process
from veeksha.schedule.ramp import RateRamp

# fixed gaps of 0.2 s (5/s), linearly to 40/s over 4 s: Λ(4) = 90, so 91 sessions span the ramp;
# each session's second turn 50 ms after its first is answered (the default think time, Poisson
# with a mean of 1 s, kept the run going ~6 s after the ramp for its last sessions' turns)
_SCENARIO = """
seed: 4
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: 0.2}
  ramp: {end_rate: 40, duration: 4, shape: linear}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 2}
    request_wait_generator: {type: fixed, interval: 0.05}
runtime: {max_sessions: 91, benchmark_timeout: 30, num_workers: 1}
"""


def test_a_linear_ramp_runs_as_planned_and_is_reported(tmp_path: Path) -> None:
    scenario = tmp_path / "ramp.yaml"
    scenario.write_text(_SCENARIO)
    # (the command's own code, in this process: its process is not what this test is about)
    done = run_in_process(scenario, tmp_path / "out", "-q")
    assert done.code == 0, done.output[-3000:]
    (run_dir,) = (tmp_path / "out").iterdir()
    rows = pq.read_table(run_dir / "requests.parquet").to_pylist()
    roots = sorted((r["session_id"], r["ready_at"]) for r in rows if not r["parents"])
    assert [sid for sid, _ in roots] == list(range(91))
    planned = RateRamp(5.0, 40.0, 4.0).inverse(np.arange(91.0))
    assert np.allclose([t for _, t in roots], planned, atol=1e-6)
    summary = json.loads((run_dir / "summary.json").read_text())
    checks = summary["health"]["checks"]
    assert checks["dispatch_rate"] == "PASS"
    assert checks["arrival_distribution"] == "PASS"
    windows = summary["ramp"]["windows"]
    assert len(windows) == 10
    offered = [w["offered_rate"] for w in windows]
    assert offered == sorted(offered)
    assert offered[0] < 8
    assert offered[-1] > 36
    assert all(w["ttfc_p50"] is not None for w in windows)
