"""A capacity probe whose run stopped for its failures (``runtime.max_errors`` or
``max_error_rate``: ``stop_reason: errors``) is that value's result, judged on what it had; a
probe interrupted any other way (Ctrl-C) stops the search."""

from __future__ import annotations

from pathlib import Path

import pytest

from veeksha.errors import RunAbortedError
from veeksha.experiment.capacity import probe
from veeksha.experiment.capacity.knob import knob_of
from veeksha.experiment.capacity.measure import RunRequest
from veeksha.experiment.capacity.probe import ProbeRunner, ProbeSample
from veeksha.experiment.point import PointResult
from veeksha.scenario.models import Scenario


def _runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stop_reason: str) -> ProbeRunner:
    summary = {"run": {"stop_reason": stop_reason}, "health": {"verdict": "PASS", "checks": {}}}

    def run_point(scenario: Scenario, runs_dir: Path, **_: object) -> PointResult:
        return PointResult(tmp_path / "run", 3, True, summary)

    def read_probe_sample(run_dir: Path, slos: object) -> ProbeSample:
        return ProbeSample((), 40, 30)

    monkeypatch.setattr(probe, "run_point", run_point)
    monkeypatch.setattr(probe, "read_probe_sample", read_probe_sample)
    scenario = Scenario.model_validate({"runtime": {"max_errors": 30}})
    knob = knob_of(scenario)
    assert knob is not None
    return ProbeRunner(scenario, knob, [], tmp_path, 0.0)


def test_a_probe_stopped_for_its_failures_is_its_values_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _runner(monkeypatch, tmp_path, "errors")(RunRequest(8.0))
    assert (run.healthy, run.requests, run.failed) == (True, 40, 30)


def test_a_probe_interrupted_otherwise_stops_the_search(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(RunAbortedError, match="interrupted during the probe at 8"):
        _runner(monkeypatch, tmp_path, "interrupted")(RunRequest(8.0))
