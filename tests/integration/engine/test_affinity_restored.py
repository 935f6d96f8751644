"""A run gives its process its CPUs back: the next run in the same process (a sweep's point, a
capacity probe, a microbenchmark point) plans its workers' CPUs from all of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from veeksha.dispatch.affinity import plan_affinity
from veeksha.engine.run import run_scenario
from veeksha.scenario.loader import load_scenario_text

_SCENARIO = """
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator: {type: synthetic, session_graph: {type: single_request}}
runtime: {max_sessions: 3, num_workers: 1}
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs")
def test_two_runs_in_one_process_plan_the_same_cpus(tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    plan = plan_affinity("auto", 1)
    assert plan.main_cpus  # (auto pins the main process on a machine of two CPUs or more)
    scenario = load_scenario_text(_SCENARIO, "s.yaml")
    for name in ("first", "second"):
        run_scenario(scenario, tmp_path / name, quiet=True, plots=False, dry_run=True)
        assert os.sched_getaffinity(0) == before
        assert plan_affinity("auto", 1) == plan
