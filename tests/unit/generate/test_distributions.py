"""Samplers: checked statistically with scipy.stats at fixed seeds."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from scipy import stats

from veeksha.generate.distributions import (
    FixedStairSampler,
    make_interval_sampler,
    make_length_sampler,
    mean_interval,
)
from veeksha.scenario.base import MAX_SECONDS
from veeksha.scenario.generators import MAX_DRAW
from veeksha.scenario.models import (
    ChoiceLength,
    FixedInterval,
    FixedLength,
    FixedStairLength,
    GammaInterval,
    InverseGaussianLength,
    NormalLength,
    PoissonInterval,
    UniformLength,
    ZipfLength,
)

N = 20_000
ALPHA = 0.001


def rng(seed: int = 1) -> np.random.Generator:
    return np.random.default_rng(seed)


def scipy_law(cfg: PoissonInterval | GammaInterval) -> Any:
    """scipy's frozen law of the gaps ``cfg`` generates."""
    if isinstance(cfg, PoissonInterval):
        return stats.expon(scale=1.0 / cfg.arrival_rate)
    k = cfg.effective_shape
    return stats.gamma(a=k, scale=1.0 / (cfg.arrival_rate * k))


# ------------------------------------------------------------------------------------ intervals


def test_poisson_gaps_are_exponential_with_mean_one_over_rate() -> None:
    cfg = PoissonInterval(arrival_rate=4.0)
    gaps = make_interval_sampler(cfg, rng()).sample(N)
    assert stats.kstest(gaps, scipy_law(cfg).cdf).pvalue > ALPHA
    assert stats.ttest_1samp(gaps, 0.25).pvalue > ALPHA
    # not truncated: gaps beyond 3/rate occur at their exponential frequency e^-3 ≈ 5%
    tail = float(np.mean(gaps > 0.75))
    assert stats.binomtest(int(tail * N), N, np.exp(-3)).pvalue > ALPHA


@pytest.mark.parametrize(("cv", "shape"), [(0.5, None), (None, 9.0), (2.0, None)])
def test_gamma_gaps_match_shape_mean_and_cv(cv: float | None, shape: float | None) -> None:
    cfg = GammaInterval(arrival_rate=2.0, cv=cv, shape=shape)
    gaps = make_interval_sampler(cfg, rng(2)).sample(N)
    assert stats.kstest(gaps, scipy_law(cfg).cdf).pvalue > ALPHA
    expected_cv = 1.0 / np.sqrt(cfg.effective_shape)
    assert gaps.std() / gaps.mean() == pytest.approx(expected_cv, rel=0.05)
    assert gaps.mean() == pytest.approx(mean_interval(cfg), rel=0.05)


@pytest.mark.parametrize(
    "config",
    [PoissonInterval(arrival_rate=1e-300), GammaInterval(arrival_rate=1e-300, cv=2)],
    ids=["poisson", "gamma"],
)
def test_gaps_of_a_tiny_rate_are_clipped_at_max_seconds(config: Any) -> None:
    """A rate of 1e-300/s: gaps of ~1e300 s, whose nanoseconds overflowed (a session's think
    time crashed its release: OverflowError)."""
    sampler = make_interval_sampler(config, rng())
    gaps = sampler.sample(100)
    assert gaps.max() == MAX_SECONDS
    assert sampler.sample_one() <= MAX_SECONDS


def test_fixed_interval() -> None:
    cfg = FixedInterval(interval=0.0)
    sampler = make_interval_sampler(cfg, rng())
    assert sampler.sample(3).tolist() == [0.0, 0.0, 0.0]
    assert sampler.sample_one() == 0.0
    assert mean_interval(FixedInterval(interval=2.5)) == 2.5


def test_single_draws_continue_the_batch_stream() -> None:
    cfg = PoissonInterval(arrival_rate=1.0)
    a = make_interval_sampler(cfg, rng(9))
    singles = [a.sample_one() for _ in range(300)]
    b = make_interval_sampler(cfg, rng(9))
    assert singles == b.sample(300).tolist()
    # mixed use keeps the sequence: 10 singles then a batch equals one long batch
    c, d = make_interval_sampler(cfg, rng(9)), make_interval_sampler(cfg, rng(9))
    mixed = [c.sample_one() for _ in range(10)] + c.sample(500).tolist()
    assert mixed == d.sample(510).tolist()


# -------------------------------------------------------------------------------------- lengths


def test_fixed_length() -> None:
    sampler = make_length_sampler(FixedLength(value=5), rng())
    assert sampler.sample(4).tolist() == [5, 5, 5, 5]
    assert sampler.sample_one() == 5


def test_uniform_is_inclusive_and_flat() -> None:
    values = make_length_sampler(UniformLength(min=3, max=7), rng()).sample(N)
    counts = np.bincount(values, minlength=8)[3:]
    assert values.min() == 3
    assert values.max() == 7
    assert stats.chisquare(counts).pvalue > ALPHA
    assert make_length_sampler(UniformLength(min=4, max=4), rng()).sample(5).tolist() == [4] * 5


def test_zipf_bounds_and_monotone_frequencies() -> None:
    cfg = ZipfLength(min=10, max=19, theta=1.1)
    values = make_length_sampler(cfg, rng()).sample(N)
    assert values.min() >= 10
    assert values.max() <= 19
    counts = np.bincount(values - 10, minlength=10)
    assert all(a > b for a, b in itertools.pairwise(counts))
    pmf = np.arange(1, 11, dtype=float) ** -1.1
    pmf /= pmf.sum()
    assert stats.chisquare(counts, pmf * N).pvalue > ALPHA


def test_zipf_alias_alpha_and_scramble_keep_the_profile() -> None:
    cfg = ZipfLength.model_validate({"type": "zipf", "min": 0, "max": 9, "alpha": 1.1})
    assert cfg.theta == 1.1
    plain = np.bincount(make_length_sampler(cfg, rng()).sample(N), minlength=10)
    cfg_s = cfg.model_copy(update={"scramble": True})
    scrambled = np.bincount(make_length_sampler(cfg_s, rng()).sample(N), minlength=10)
    assert sorted(plain.tolist()) == sorted(scrambled.tolist())  # same ranks, same draws
    assert scrambled.argmax() != 0


def test_zipf_wide_range_uses_the_continuous_approximation_within_bounds() -> None:
    values = make_length_sampler(ZipfLength(min=1, max=MAX_DRAW, theta=0.9), rng()).sample(N)
    assert values.min() >= 1
    assert values.max() <= MAX_DRAW
    assert np.median(values) < MAX_DRAW / 2  # skewed to small values


def test_fixed_stair_order_and_wrap() -> None:
    cfg = FixedStairLength(values=[1, 2, 3], repeat_each=2, wrap=True)
    sampler = make_length_sampler(cfg, rng())
    assert sampler.sample(8).tolist() == [1, 1, 2, 2, 3, 3, 1, 1]
    assert [sampler.sample_one() for _ in range(3)] == [2, 2, 3]
    no_wrap = make_length_sampler(cfg.model_copy(update={"wrap": False}), rng())
    assert no_wrap.sample(9).tolist() == [1, 1, 2, 2, 3, 3, 3, 3, 3]


def test_fixed_stair_position_is_settable() -> None:
    sampler = FixedStairSampler([5, 6, 7], repeat_each=1)
    sampler.position = 4
    assert sampler.sample(2).tolist() == [6, 7]
    assert sampler.position == 6


def test_inverse_gaussian_mean_rounding_and_floor() -> None:
    values = make_length_sampler(InverseGaussianLength(mean=500, shape=300), rng()).sample(N)
    assert values.dtype == np.int64
    assert stats.ttest_1samp(values, 500).pvalue > ALPHA
    small = make_length_sampler(InverseGaussianLength(mean=0.3, shape=0.2), rng()).sample(N)
    assert small.min() >= 1


def test_inverse_gaussian_heavy_tail_is_clipped_at_the_largest_draw() -> None:
    """A mean at the cap with a tiny shape: rare draws far above it, which overflowed the int64
    cast (to negative lengths) before they were clipped."""
    sampler = make_length_sampler(InverseGaussianLength(mean=MAX_DRAW, shape=1e6), rng())
    values = sampler.sample(N)
    assert values.max() == MAX_DRAW
    assert values.min() >= 1
    assert sampler.bounds == (1, MAX_DRAW)


def test_normal_mean_spread_rounding_and_clipping() -> None:
    sampler = make_length_sampler(NormalLength(mean=500, std=100), rng())
    values = sampler.sample(N)
    assert values.dtype == np.int64
    assert stats.ttest_1samp(values, 500).pvalue > ALPHA
    assert abs(values.std() - 100) < 3
    # a normal law of the rounded draws (a binned test of the shape, within ±2.5 σ)
    edges = np.arange(250, 751, 50)
    counts, _ = np.histogram(values, edges)
    cdf = stats.norm(500, 100).cdf(edges - 0.5)
    expected = np.diff(cdf) / np.diff(cdf).sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > ALPHA
    assert sampler.bounds == (1, MAX_DRAW)
    clipped = make_length_sampler(NormalLength(mean=10, std=50, min=4, max=30), rng()).sample(N)
    assert (clipped.min(), clipped.max()) == (4, 30)
    share_low = (clipped == 4).mean()  # every draw below 4.5 is 4
    assert abs(share_low - stats.norm(10, 50).cdf(4.5)) < 0.02
    exact = make_length_sampler(NormalLength(mean=7.4, stddev=0), rng()).sample(5)
    assert exact.tolist() == [7] * 5


def test_choice_draws_each_value_by_its_weight() -> None:
    cfg = ChoiceLength(values=[128, 2048, 512], weights=[70, 20, 10])
    sampler = make_length_sampler(cfg, rng())
    values = sampler.sample(N)
    counts = [int((values == v).sum()) for v in (128, 2048, 512)]
    assert sum(counts) == N
    assert stats.chisquare(counts, [0.7 * N, 0.2 * N, 0.1 * N]).pvalue > ALPHA
    assert sampler.bounds == (128, 2048)
    even = make_length_sampler(ChoiceLength(values=[1, 2, 3, 4]), rng()).sample(N)
    assert stats.chisquare(np.bincount(even)[1:]).pvalue > ALPHA
    never = make_length_sampler(ChoiceLength(values=[0, 9], weights=[0, 1]), rng())
    assert set(never.sample(1000).tolist()) == {9}
    assert never.bounds == (9, 9)
    # the same seed, the same draws; one at a time as in one batch
    again = make_length_sampler(cfg, rng())
    assert [again.sample_one() for _ in range(50)] == values[:50].tolist()
