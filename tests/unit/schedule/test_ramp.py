"""A ramped open-loop rate: Λ and Λ⁻¹ in closed form, and the schedule planned from them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from veeksha.engine.run_setup import RunSetup
from veeksha.scenario.models import Scenario
from veeksha.schedule.arrivals import RateArrivals
from veeksha.schedule.ramp import RateRamp, ramp_of

S = 1_000_000_000

SHAPES = ("linear", "exponential")


def _integral(ramp: RateRamp, t: float) -> float:
    """Λ(t) by the trapezoid rule on λ (a check independent of the closed forms)."""
    grid = np.linspace(0.0, t, 200_001)
    values = ramp.rate(grid)
    return float(np.sum((values[1:] + values[:-1]) / 2 * np.diff(grid)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("r0", "r1"), [(2.0, 32.0), (32.0, 2.0), (5.0, 5.0)])
def test_cumulative_is_the_integral_of_the_rate_and_inverse_inverts_it(
    shape: str, r0: float, r1: float
) -> None:
    ramp = RateRamp(r0, r1, 10.0, shape)
    for t in (0.0, 0.3, 4.0, 10.0, 13.5):  # (13.5: the hold after the ramp)
        assert ramp.cumulative(t) == pytest.approx(_integral(ramp, t), rel=1e-8, abs=1e-9)
    u = np.linspace(0.0, 3 * float(ramp.cumulative(10.0)), 1_001)
    assert np.allclose(ramp.cumulative(ramp.inverse(u)), u, rtol=1e-12, atol=1e-9)
    assert ramp.inverse(0.0) == 0.0


@pytest.mark.parametrize("shape", SHAPES)
def test_the_rate_holds_end_rate_after_the_ramp(shape: str) -> None:
    ramp = RateRamp(4.0, 16.0, 2.0, shape)
    at_end = float(ramp.cumulative(2.0))
    assert ramp.rate([0.0, 2.0, 7.0]).tolist() == pytest.approx([4.0, 16.0, 16.0])
    assert ramp.cumulative(7.0) == pytest.approx(at_end + 16.0 * 5.0)
    assert ramp.inverse(at_end + 32.0) == pytest.approx(4.0)


def test_closed_forms_of_both_shapes() -> None:
    linear = RateRamp(2.0, 6.0, 2.0, "linear")
    assert linear.cumulative(2.0) == pytest.approx(8.0)  # D·(r0 + r1)/2
    assert linear.inverse(3.0) == pytest.approx(1.0)  # 2·1 + 1²·2/2 = 3
    exponential = RateRamp(1.0, math.e**2, 2.0, "exponential")  # λ = e^t
    assert exponential.cumulative(1.0) == pytest.approx(math.e - 1)
    assert exponential.inverse(math.e - 1) == pytest.approx(1.0)


def test_a_ramp_down_reaches_a_lower_rate() -> None:
    down = RateRamp(40.0, 5.0, 4.0, "linear")
    assert down.cumulative(4.0) == pytest.approx(90.0)
    assert down.rate(4.0) == pytest.approx(5.0)
    gaps = np.diff(down.inverse(np.arange(0, 120)))
    assert gaps[0] < gaps[80]
    assert gaps[-1] == pytest.approx(0.2)


def test_a_ramp_refuses_a_zero_rate() -> None:
    with pytest.raises(ValueError, match="positive"):
        RateRamp(0.0, 5.0, 4.0)


def test_fixed_gaps_under_a_ramp_arrive_exactly_at_inverse_of_k() -> None:
    # the docstring's worked example: 0.5 s gaps (2/s), linearly to 6/s over 2 s
    ramp = RateRamp(2.0, 6.0, 2.0, "linear")
    arrivals = RateArrivals(lambda n: np.full(n, 0.5), t0_ns=7, batch=5, warp=ramp.warp)
    times = [arrivals.pop_ns() for _ in range(12)]
    expected = [7 + round(float(ramp.inverse(k)) * S) for k in range(12)]
    assert times == expected
    assert times[8] - 7 == 2 * S  # Λ(2) = 8: the 9th arrival ends the ramp
    assert times[9] - times[8] == pytest.approx(S / 6, abs=1)


def _scenario(traffic: dict[str, object], seed: int = 5) -> Scenario:
    return Scenario.model_validate(
        {"seed": seed, "traffic_scheduler": traffic, "runtime": {"max_sessions": 100}}
    )


def _planned(scenario: Scenario, n: int) -> list[int]:
    """The first ``n`` arrivals (ns since t0) the run's loop settings plan for ``scenario``."""
    setup = RunSetup.__new__(RunSetup)
    setup.scenario, setup.dry_run, setup.trace = scenario, True, None
    settings = setup._loop_settings()
    assert settings.rate_gaps is not None
    arrivals = RateArrivals(settings.rate_gaps, 0, warp=settings.rate_warp)
    return [arrivals.pop_ns() for _ in range(n)]


def test_without_a_ramp_the_schedule_is_the_summed_gaps_of_the_seeded_stream() -> None:
    from veeksha.generate.distributions import make_interval_sampler
    from veeksha.generate.rng import RandomStreams

    scenario = _scenario({"type": "rate", "interval_generator": {"arrival_rate": 3}})
    assert ramp_of(scenario.traffic_scheduler) is None  # type: ignore[arg-type]
    rng = RandomStreams(5).stream("arrivals")
    gaps = make_interval_sampler(scenario.traffic_scheduler.interval_generator, rng).sample(2047)  # type: ignore[union-attr]
    offsets = np.concatenate([[0], np.rint(np.cumsum(gaps) * S).astype(np.int64)])
    assert _planned(scenario, 2048) == offsets.tolist()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_poisson_ramp_puts_lambda_arrivals_in_each_window_and_is_seeded(shape: str) -> None:
    traffic = {
        "type": "rate",
        "interval_generator": {"type": "poisson", "arrival_rate": 20},
        "ramp": {"end_rate": 200, "duration": 30, "shape": shape},
    }
    scenario = _scenario(traffic)
    times = np.array(_planned(scenario, 6000)) / S
    assert _planned(scenario, 6000) == _planned(_scenario(traffic), 6000)
    assert _planned(_scenario(traffic, seed=6), 50) != _planned(scenario, 50)
    ramp = ramp_of(scenario.traffic_scheduler)  # type: ignore[arg-type]
    assert ramp is not None
    edges = np.linspace(0.0, 30.0, 11)
    counts = np.histogram(times, edges)[0]
    expected = np.diff(ramp.cumulative(edges))
    # Poisson counts: within 4 standard deviations (√expected) of Λ's difference
    assert np.all(np.abs(counts - expected) <= 4 * np.sqrt(expected))
    assert counts[-1] > 3 * counts[0]


def test_a_fixed_ramp_puts_exactly_lambda_arrivals_in_each_window() -> None:
    traffic = {
        "type": "rate",
        "interval_generator": {"type": "fixed", "interval": 0.2},
        "ramp": {"end_rate": 40, "duration": 4},
    }
    scenario = _scenario(traffic)
    times = np.array(_planned(scenario, 200)) / S
    edges = np.linspace(0.0, 4.0, 5)
    counts = np.diff(np.searchsorted(times, edges - 1e-9))  # [a, b) windows
    # Λ(1) = 5 + 35/8 = 9.375, so windows hold ⌈Λ(b)⌉ − ⌈Λ(a)⌉ arrivals (k at Λ⁻¹(k))
    ramp = RateRamp(5.0, 40.0, 4.0)
    lam = ramp.cumulative(edges)
    assert counts.tolist() == np.diff(np.ceil(lam - 1e-9)).astype(int).tolist()
    assert np.allclose(times[:91], ramp.inverse(np.arange(91)), atol=1e-9)
