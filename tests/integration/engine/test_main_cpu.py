"""``run.main_cpu_s`` is the main process' CPU from t0 to the drain's end: the evaluation's
import, done after the traffic beside the workers' exit and the watch's last scrape, is not in
it (it would be ~25 ms of a short run's figure, read as the traffic's cost)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from veeksha.engine.run import _Run, run_scenario
from veeksha.scenario.loader import load_scenario_text

_SCENARIO = """
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator: {type: synthetic, session_graph: {type: single_request}}
runtime: {max_sessions: 3, num_workers: 1}
"""
_IMPORT_CPU_S = 0.4


def _heavy_import(self: _Run) -> float:
    """An evaluation whose import takes ``_IMPORT_CPU_S`` of CPU."""
    started = time.process_time()
    while time.process_time() - started < _IMPORT_CPU_S:
        pass
    return time.process_time() - started


@pytest.mark.parametrize("dry_run", [True, False])
def test_the_evaluation_s_import_is_not_the_traffic_s_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    monkeypatch.setattr(_Run, "_import_finish", _heavy_import)
    scenario = load_scenario_text(_SCENARIO, "s.yaml")
    outcome = run_scenario(scenario, tmp_path, quiet=True, plots=False, dry_run=dry_run)
    assert outcome.requests == 3
    run = json.loads((tmp_path / "summary.json").read_text())["run"]
    assert 0.0 < run["main_cpu_s"] < _IMPORT_CPU_S  # (3 requests: a few ms)
