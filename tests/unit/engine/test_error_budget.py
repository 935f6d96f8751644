"""``ErrorBudget``: the run stops at its ``max_errors``-th failure, or once more than
``max_error_rate`` of the last ``window`` requests that ended failed (judged only over a full
window); it says so once, and answered requests never stop it."""

from __future__ import annotations

from tests.unit.scenario.helpers import load, only_issue
from veeksha.engine.error_budget import ErrorBudget
from veeksha.scenario.loader import scenario_hash


def _first_stop(budget: ErrorBudget, outcomes: str) -> tuple[int, str] | None:
    """The index and reason of the first stop over ``outcomes`` (``x`` failed, ``.`` ok)."""
    for i, outcome in enumerate(outcomes):
        reason = budget.ended(outcome == "x")
        if reason is not None:
            return i, reason
    return None


def test_max_errors_stops_at_the_nth_failure_only() -> None:
    budget = ErrorBudget(3, None, 100)
    assert _first_stop(budget, "x..x....x") == (8, "3 requests failed (runtime.max_errors: 3)")
    assert budget.ended(True) is None  # (said once)
    assert _first_stop(ErrorBudget(3, None, 100), "x..x.......") is None


def test_the_rate_is_judged_over_a_full_window_of_the_latest() -> None:
    # 3 of 4 failed before the window of 5 filled: nothing yet; then 3 of the last 5 > 0.5
    budget = ErrorBudget(None, 0.5, 5)
    assert _first_stop(budget, "xx.x") is None
    assert _first_stop(budget, "x") == (
        0,
        "4 of the last 5 requests failed (runtime.max_error_rate: 0.5)",
    )
    # the window slides: old failures leave it, so a steady 40 % never passes 0.5
    assert _first_stop(ErrorBudget(None, 0.5, 5), "xx..." * 40) is None
    # exactly at the limit is not over it
    assert _first_stop(ErrorBudget(None, 0.4, 5), "xx..." * 3) is None
    assert _first_stop(ErrorBudget(None, 0.4, 5), "xx..x") == (
        4,
        "3 of the last 5 requests failed (runtime.max_error_rate: 0.4)",
    )


def test_either_limit_stops_first() -> None:
    budget = ErrorBudget(10, 0.9, 4)
    assert _first_stop(budget, "xxxx") == (
        3,
        "4 of the last 4 requests failed (runtime.max_error_rate: 0.9)",
    )


def test_the_keys_are_checked_and_their_absence_keeps_the_hash() -> None:
    assert only_issue("runtime: {max_error_rate: 0}").path == "runtime.max_error_rate"
    assert only_issue("runtime: {max_errors: 0}").path == "runtime.max_errors"
    assert only_issue("runtime: {error_rate_window: 0}").path == "runtime.error_rate_window"
    default = scenario_hash(load("seed: 42"))
    assert default == "41a55509ee"  # (the default scenario's, from before the keys)
    assert scenario_hash(load("runtime: {error_rate_window: 100}")) == default
    assert scenario_hash(load("runtime: {max_errors: 5}")) != default
    assert scenario_hash(load("runtime: {max_error_rate: 0.5}")) != default
