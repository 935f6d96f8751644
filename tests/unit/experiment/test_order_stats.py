"""The order-statistic confidence interval of a percentile."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from veeksha.experiment.capacity.order_stats import (
    EXACT_LIMIT,
    binomial_cdf,
    order_statistic_ranks,
    quantile_interval,
)


def coverage(n: int, p: float, low: int, high: int) -> float:
    """P(x(low) <= q_p < x(high)) = P(low <= B <= high - 1), B ~ Binomial(n, p)."""
    upper = 1.0 if high > n else binom.cdf(high - 1, n, p)
    lower = 0.0 if low < 1 else binom.cdf(low - 1, n, p)
    return upper - lower


def test_worked_examples_of_the_docstring() -> None:
    assert order_statistic_ranks(50, 0.9, 0.95) == (41, 50)
    assert order_statistic_ranks(367, 0.99, 0.95)[1] == 368  # no upper bound yet
    assert order_statistic_ranks(368, 0.99, 0.95)[1] == 368  # the largest value bounds it
    assert order_statistic_ranks(200, 0.99, 0.95)[1] == 201


@pytest.mark.parametrize(("p", "first"), [(0.9, 36), (0.95, 72), (0.99, 368)])
def test_the_smallest_sample_that_bounds_a_percentile_from_above(p: float, first: int) -> None:
    assert order_statistic_ranks(first - 1, p, 0.95)[1] == first  # past the sample: unbounded
    assert order_statistic_ranks(first, p, 0.95)[1] == first  # its largest value bounds it


@pytest.mark.parametrize("p", [0.5, 0.9, 0.95, 0.99])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_the_interval_covers_at_least_its_confidence_with_equal_tails(
    p: float, confidence: float
) -> None:
    alpha = 1 - confidence
    for n in (1, 2, 5, 10, 37, 100, 368, 1000, 5000):
        low, high = order_statistic_ranks(n, p, confidence)
        assert 0 <= low <= high <= n + 1
        assert coverage(n, p, low, high) >= confidence - 1e-12
        below = 0.0 if low < 1 else binom.cdf(low - 1, n, p)
        above = 0.0 if high > n else 1 - binom.cdf(high - 1, n, p)
        assert below <= alpha / 2 + 1e-12
        assert above <= alpha / 2 + 1e-12
        # the ends are the tightest ranks with those tails
        if low + 1 <= n:
            assert binom.cdf(low, n, p) >= alpha / 2 - 1e-12
        if high - 1 >= 1:
            assert binom.cdf(high - 2, n, p) < 1 - alpha / 2 + 1e-12


def test_intervals_cover_the_true_percentile_of_a_known_distribution() -> None:
    rng = np.random.default_rng(11)
    truth = -math.log(1 - 0.9)  # p90 of Exp(1)
    trials, n = 4000, 120
    low, high = order_statistic_ranks(n, 0.9, 0.95)
    samples = np.sort(rng.exponential(size=(trials, n)), axis=1)
    hits = (samples[:, low - 1] <= truth) & (truth <= samples[:, high - 1])
    assert hits.mean() >= 0.94  # nominal ≥ 95 %; 4,000 trials: ±0.7 % of noise
    one = quantile_interval(samples[0], 0.9, 0.95)
    assert (one.low, one.high) == (samples[0, low - 1], samples[0, high - 1])


def test_the_estimate_is_the_slo_evaluation_quantile() -> None:
    values = np.array([5.0, 1.0, np.nan, 3.0, 2.0, 4.0])
    interval = quantile_interval(values, 0.5, 0.9)
    assert interval.samples == 5
    assert interval.estimate == np.quantile([1, 2, 3, 4, 5], 0.5)
    assert interval.low <= interval.estimate <= interval.high


def test_samples_too_small_to_bound_are_unbounded() -> None:
    interval = quantile_interval(np.arange(200, dtype=float), 0.99, 0.95)
    assert interval.high == math.inf
    assert math.isfinite(interval.low)
    assert interval.to_dict()["ci_high"] is None
    empty = quantile_interval([], 0.9, 0.95)
    assert (empty.samples, empty.low, empty.high) == (0, -math.inf, math.inf)
    assert empty.to_dict()["estimate"] is None


@pytest.mark.parametrize("n", [1, 7, 368, 5000])
@pytest.mark.parametrize("p", [0.0, 0.5, 0.99, 1.0])
def test_the_binomial_cdf_is_scipys(n: int, p: float) -> None:
    expected = binom.cdf(np.arange(n + 1), n, p)
    assert np.allclose(binomial_cdf(n, p), expected, rtol=0, atol=1e-9)


def test_large_samples_use_the_normal_approximation_within_a_few_ranks() -> None:
    n = EXACT_LIMIT * 3
    low, high = order_statistic_ranks(n, 0.99, 0.95)
    exact_low = int(binom.ppf(0.025, n, 0.99))
    exact_high = int(binom.ppf(0.975, n, 0.99)) + 1
    assert abs(low - exact_low) <= 3
    assert abs(high - exact_high) <= 3
