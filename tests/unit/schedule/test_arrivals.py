import numpy as np
import pytest

from veeksha.scenario.base import MAX_SECONDS
from veeksha.schedule.arrivals import ConcurrencyRamp, RateArrivals


def test_rate_arrivals_are_absolute_cumulative_offsets() -> None:
    arrivals = RateArrivals(lambda n: np.full(n, 0.25), t0_ns=1_000, batch=3)
    times = [arrivals.pop_ns() for _ in range(8)]
    assert times == [1_000 + k * 250_000_000 for k in range(8)]


def test_rate_arrivals_do_not_drift_over_many_batches() -> None:
    # 0.1 is not exact in binary; summing offsets once (not rounding per gap) keeps the
    # 100,000th arrival within a nanosecond of k × 0.1 s.
    arrivals = RateArrivals(lambda n: np.full(n, 0.1), t0_ns=0, batch=7)
    last = 0
    for _ in range(100_001):
        last = arrivals.pop_ns()
    assert abs(last - 10_000 * 1_000_000_000) <= 1


def test_peek_does_not_consume() -> None:
    arrivals = RateArrivals(lambda n: np.arange(1, n + 1, dtype=float), t0_ns=0, batch=2)
    assert arrivals.peek_ns() == arrivals.pop_ns() == 0
    assert arrivals.pop_ns() == 1_000_000_000
    assert arrivals.peek_ns() == 3_000_000_000


def test_arrivals_beyond_the_clock_wait_at_its_end_instead_of_wrapping_into_the_past() -> None:
    """Gaps of 1e9 s (a tiny rate's): their sum's nanoseconds overflowed int64 into negative
    times, i.e. sessions released at once; they now all wait at MAX_SECONDS."""
    arrivals = RateArrivals(lambda n: np.full(n, MAX_SECONDS), t0_ns=5, batch=16)
    times = [arrivals.pop_ns() for _ in range(16)]
    assert times[1] == 5 + 1_000_000_000 * 1_000_000_000
    assert times == sorted(times)
    assert times[-1] == 5 + round(MAX_SECONDS * 1_000_000_000)


def test_ramp_is_floor_of_linear_target() -> None:
    ramp = ConcurrencyRamp(target=4, rampup_s=10)
    s = 1_000_000_000
    assert ramp.allowed(0) == 0
    assert ramp.allowed(round(2.5 * s) - 1) == 0
    assert ramp.allowed(round(2.5 * s)) == 1
    assert ramp.allowed(7 * s) == 2
    assert ramp.allowed(10 * s) == 4
    assert ramp.allowed(100 * s) == 4
    assert [ramp.slot_open_ns(k) for k in range(1, 5)] == [
        round(2.5 * s),
        5 * s,
        round(7.5 * s),
        10 * s,
    ]


def test_ramp_next_increase_walks_the_slots() -> None:
    ramp = ConcurrencyRamp(target=3, rampup_s=3)
    s = 1_000_000_000
    assert ramp.next_increase_ns(0) == s
    assert ramp.next_increase_ns(s) == 2 * s
    assert ramp.next_increase_ns(3 * s) is None


def test_zero_rampup_allows_everything_at_once() -> None:
    ramp = ConcurrencyRamp(target=5, rampup_s=0)
    assert ramp.allowed(0) == 5
    assert ramp.next_increase_ns(0) is None


def test_ramp_rejects_zero_target() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConcurrencyRamp(target=0, rampup_s=1)
