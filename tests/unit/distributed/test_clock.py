"""The min-RTT clock offset estimate, on synthetic round trips."""

from __future__ import annotations

import pytest

from veeksha.distributed.clock import (
    OffsetEstimate,
    drift_ns,
    estimate_offset,
    to_driver_ns,
    to_shard_ns,
)

US = 1_000


def trip(send: int, true_offset: int, up: int, down: int) -> tuple[int, int, int]:
    """A round trip leaving at ``send`` (driver clock), ``up`` ns to the shard, ``down`` back."""
    return send, send + up + true_offset, send + up + down


def test_docstring_example() -> None:
    est = estimate_offset([(1000, 1600, 1100), (2000, 2900, 2400)])
    assert est == OffsetEstimate(550, 50, 100, 2)
    assert to_driver_ns(10_000, est) == 9_450
    assert to_shard_ns(9_450, est) == 10_000


def test_symmetric_trips_give_the_offset_exactly() -> None:
    est = estimate_offset([trip(t * 1000 * US, -7_654_321, 80 * US, 80 * US) for t in range(5)])
    assert est.offset_ns == -7_654_321
    assert est.uncertainty_ns == 80 * US


def test_the_true_offset_lies_within_the_uncertainty_whatever_the_asymmetry() -> None:
    true = 123_456_789
    for up, down in [(10 * US, 300 * US), (300 * US, 10 * US), (1, 999 * US), (0, 0)]:
        est = estimate_offset([trip(0, true, up, down)])
        assert abs(est.offset_ns - true) <= est.uncertainty_ns
        assert est.rtt_ns == up + down


def test_outliers_lose_to_the_quickest_trip() -> None:
    true = 5 * US
    samples = [trip(i * 10_000 * US, true, 40 * US + i * 7 * US, 45 * US) for i in range(8)]
    samples.insert(3, trip(99_000 * US, true, 50_000 * US, 10 * US))  # a GC pause on the way
    samples.insert(5, trip(99_500 * US, true, 35 * US, 36 * US))  # the quickest
    est = estimate_offset(samples)
    assert est.rtt_ns == 71 * US
    assert abs(est.offset_ns - true) <= est.uncertainty_ns == 35_500
    assert est.samples == 10


def test_a_sample_received_before_it_was_sent_is_ignored() -> None:
    est = estimate_offset([(1000, 5000, 900), (2000, 2100, 2100)])
    assert est.rtt_ns == 100
    with pytest.raises(ValueError, match="no usable clock sample"):
        estimate_offset([(1000, 5000, 900)])
    with pytest.raises(ValueError, match="no usable clock sample"):
        estimate_offset([])


def test_drift_and_round_trip_through_dicts() -> None:
    before, after = OffsetEstimate(100, 5, 10, 8), OffsetEstimate(160, 7, 14, 8)
    assert drift_ns(before, after) == 60
    assert OffsetEstimate.from_dict(after.to_dict()) == after
