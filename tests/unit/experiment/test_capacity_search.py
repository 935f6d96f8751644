"""The capacity search algorithm with a fake probe: geometric phase, bisection, budget, and
values that cannot be judged (undecided, unhealthy) never taken as capacity."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from veeksha.experiment.capacity.search import (
    FAIL,
    PASS,
    UNDECIDED,
    UNHEALTHY,
    SearchSettings,
    SearchStep,
    Verdict,
    search_capacity,
)


def below(capacity: float) -> Callable[[float], Verdict]:
    """A server whose SLOs hold up to ``capacity`` included."""
    return lambda value: PASS if value <= capacity + 1e-12 else FAIL


def test_geometric_then_bisection_finds_an_integer_capacity() -> None:
    outcome = search_capacity(SearchSettings(1, 64, 2, 20, 0, integer=True), below(3))
    assert [(s.value, s.phase, s.verdict) for s in outcome.steps] == [
        (1, "probe", PASS),
        (2, "probe", PASS),
        (4, "probe", FAIL),
        (3, "bisect", PASS),
    ]
    assert (outcome.best, outcome.ceiling, outcome.ceiling_verdict) == (3, 4, FAIL)
    assert outcome.converged
    assert not outcome.reached_max


@pytest.mark.parametrize("truth", [0.37, 7.34, 7.3, 12.99, 63.05])
def test_a_rate_lands_within_the_precision(truth: float) -> None:
    settings = SearchSettings(1, 100, 2, 30, 1)
    outcome = search_capacity(settings, below(truth))
    if truth < 1:
        assert outcome.best is None  # start_value already fails
        return
    assert outcome.converged
    assert outcome.best is not None
    assert outcome.ceiling is not None
    assert outcome.best <= truth < outcome.best + settings.step
    assert outcome.ceiling == pytest.approx(outcome.best + settings.step)
    probed = [s.value for s in outcome.steps]
    assert all(round(v, 1) == v for v in probed)  # every value on the 0.1 grid
    assert len(set(probed)) == len(probed)  # no value probed twice


def test_the_public_example_converges_as_documented() -> None:
    settings = SearchSettings(5, 100, 2, 20, 2)
    outcome = search_capacity(settings, below(36.3))
    assert [s.value for s in outcome.steps][:4] == [5, 10, 20, 40]
    assert outcome.steps[4].value == 30
    assert outcome.best == pytest.approx(36.3)


def test_max_iterations_bounds_the_probes() -> None:
    outcome = search_capacity(SearchSettings(1, 1000, 2, 5, 2), below(300))
    assert outcome.iterations == 5
    assert [s.value for s in outcome.steps] == [1, 2, 4, 8, 16]
    assert outcome.best == 16
    assert not outcome.converged
    assert outcome.ceiling is None

    bisecting = search_capacity(SearchSettings(1, 1000, 2, 7, 2), below(300))
    assert bisecting.iterations == 7
    assert not bisecting.converged
    assert bisecting.best is not None
    assert bisecting.best <= 300


def test_a_passing_max_value_ends_the_search() -> None:
    outcome = search_capacity(SearchSettings(3, 10, 2, 20, 0, integer=True), below(50))
    assert [s.value for s in outcome.steps] == [3, 6, 10]
    assert outcome.reached_max
    assert outcome.best == 10
    assert not outcome.converged


def test_a_failing_start_value_finds_nothing() -> None:
    outcome = search_capacity(SearchSettings(4, 10, 2, 20, 0, integer=True), below(2))
    assert outcome.best is None
    assert (outcome.ceiling, outcome.iterations) == (4, 1)


def test_a_small_expansion_factor_still_moves_one_step() -> None:
    outcome = search_capacity(SearchSettings(1, 4, 1.1, 20, 0, integer=True), below(3))
    assert [s.value for s in outcome.steps] == [1, 2, 3, 4]
    assert outcome.best == 3


@pytest.mark.parametrize("verdict", [UNDECIDED, UNHEALTHY])
def test_values_that_could_not_be_judged_are_never_capacity(verdict: Verdict) -> None:
    def probe(value: float) -> Verdict:
        if value >= 6:
            return FAIL
        return verdict if value == 4 else PASS

    outcome = search_capacity(SearchSettings(1, 64, 2, 20, 0, integer=True), probe)
    assert [s.value for s in outcome.steps] == [1, 2, 4, 3]
    assert outcome.best == 3
    assert (outcome.ceiling, outcome.ceiling_verdict) == (4, verdict)
    assert outcome.converged  # converged below what could be judged; capacity.json says so

    in_bisection = search_capacity(
        SearchSettings(1, 64, 2, 20, 0, integer=True),
        lambda v: PASS if v <= 5 else verdict if v == 6 else FAIL,
    )
    assert [s.value for s in in_bisection.steps] == [1, 2, 4, 8, 6, 5]
    assert (in_bisection.best, in_bisection.ceiling, in_bisection.ceiling_verdict) == (
        5,
        6,
        verdict,
    )


def test_observe_sees_every_step_in_order() -> None:
    seen: list[SearchStep] = []
    outcome = search_capacity(SearchSettings(1, 64, 2, 20, 0, True), below(5), seen.append)
    assert seen == outcome.steps
