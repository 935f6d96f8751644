"""The arrival checks of a ramped rate: a run that followed the ramp PASSes, one that held its
start rate (ignored the ramp) FAILs; both checks judge against Λ, not the start rate."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.unit.evaluate.builders import request, requests_table, scenario, session, sessions_table
from veeksha.evaluate.health import CheckResult
from veeksha.evaluate.run import compute_evaluation
from veeksha.schedule.ramp import RateRamp

RAMP = {"end_rate": 40, "duration": 10}


def _checks(law: dict[str, Any], starts: np.ndarray, shape: str) -> dict[str, CheckResult]:
    requests = [request(k, ready=t, chunks=(t + 0.01, t + 0.02)) for k, t in enumerate(starts)]
    sessions = [session(k, t, t + 0.02) for k, t in enumerate(starts)]
    cfg = scenario(
        traffic_scheduler={
            "type": "rate",
            "interval_generator": law,
            "ramp": RAMP | {"shape": shape},
        },
        runtime={"max_sessions": len(starts)},
    )
    evaluation = compute_evaluation(cfg, requests_table(requests), sessions_table(sessions), {})
    return {r.name: r for r in evaluation.health.results}


def _poisson_times(ramp: RateRamp | None, rate: float, n: int) -> np.ndarray:
    unit = np.concatenate([[0.0], np.cumsum(np.random.default_rng(2).exponential(1.0, n - 1))])
    return ramp.inverse(unit) if ramp is not None else unit / rate


@pytest.mark.parametrize("shape", ["linear", "exponential"])
def test_a_poisson_run_that_follows_the_ramp_passes(shape: str) -> None:
    ramp = RateRamp(4.0, 40.0, 10.0, shape)
    checks = _checks({"type": "poisson", "arrival_rate": 4}, _poisson_times(ramp, 4, 300), shape)
    assert checks["dispatch_rate"].status == "PASS", checks["dispatch_rate"].detail
    assert checks["arrival_distribution"].status == "PASS", checks["arrival_distribution"].detail
    assert checks["arrival_distribution"].statistics["mean_gap"] == pytest.approx(1.0, rel=0.15)


@pytest.mark.parametrize("shape", ["linear", "exponential"])
def test_a_poisson_run_that_ignored_the_ramp_fails(shape: str) -> None:
    # the same number of sessions at the start rate, 4/s, for 75 s
    checks = _checks({"type": "poisson", "arrival_rate": 4}, _poisson_times(None, 4, 300), shape)
    assert checks["dispatch_rate"].status == "FAIL", checks["dispatch_rate"].detail
    assert checks["arrival_distribution"].status == "FAIL", checks["arrival_distribution"].detail


def test_a_fixed_ramp_is_judged_on_where_each_start_was_due() -> None:
    ramp = RateRamp(4.0, 40.0, 10.0)
    planned = ramp.inverse(np.arange(300.0))
    law = {"type": "fixed", "interval": 0.25}
    checks = _checks(law, planned + 0.0005, "linear")  # 0.5 ms late each: within 5 ms
    assert checks["dispatch_rate"].status == "PASS", checks["dispatch_rate"].detail
    assert checks["arrival_distribution"].status == "PASS", checks["arrival_distribution"].detail
    held = _checks(law, np.arange(300) * 0.25, "linear")  # the start rate throughout
    assert held["dispatch_rate"].status == "FAIL", held["dispatch_rate"].detail
    assert held["arrival_distribution"].status == "FAIL", held["arrival_distribution"].detail
    assert "offered" in held["dispatch_rate"].detail
