"""veeksha.evaluate.ks: the arrival check's KS test without scipy, checked against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from veeksha.evaluate.ks import MAX_MATRIX, exponential_cdf, gamma_cdf, kolmogorov_sf, ks_test

_SIZES = [1, 2, 3, 5, 10, 20, 50, 100, 140, 141, 200, 500, 1000, 3000, 5000, 6000]


def _exact_here(n: int, d: float) -> bool:
    """Whether this module computes P(D_n ≥ d) exactly (not by the limiting law)."""
    return n * d * d >= 2.2 or d >= 0.5 or 2 * int(n * d) + 1 <= MAX_MATRIX or n * d <= 1


@pytest.mark.parametrize("n", _SIZES)
def test_the_p_value_is_scipys(n: int) -> None:
    for c in np.linspace(0.05, 3.0, 15):
        d = min(float(c) / math.sqrt(n), 0.999)
        ours, theirs = kolmogorov_sf(n, d), float(stats.kstwo.sf(d, n))
        # exact here, and exact or Pelz-Good (accurate to ~1e-5) in scipy
        assert ours == pytest.approx(theirs, abs=1e-5 if _exact_here(n, d) else 2e-3), (n, d)


@pytest.mark.parametrize("n", [50_000, 120_000])
def test_beyond_the_matrix_the_limiting_law_is_within_2e_3(n: int) -> None:
    for c in np.linspace(0.3, 2.5, 6):
        d = float(c) / math.sqrt(n)
        assert kolmogorov_sf(n, d) == pytest.approx(float(stats.kstwo.sf(d, n)), abs=2e-3)


def test_the_edges() -> None:
    assert kolmogorov_sf(10, 0.0) == 1.0
    assert kolmogorov_sf(10, 1.0) == 0.0
    assert kolmogorov_sf(10, 0.04) == 1.0  # n·d ≤ 0.5: D_n ≥ 1/(2n) always
    assert math.isnan(kolmogorov_sf(10, math.nan))
    assert math.isnan(ks_test(np.array([]), exponential_cdf(1.0))[1])


def test_the_cdfs_are_scipys() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate(([0.0, -1.0, 1e-12, 50.0], rng.exponential(0.5, 2000)))
    assert np.allclose(exponential_cdf(0.5)(x), stats.expon(scale=0.5).cdf(x), rtol=0, atol=1e-14)
    for shape in (0.05, 0.25, 1.0, 4.0, 25.0, 100.0):
        scale = 2.0 / shape
        y = np.concatenate(([0.0, -1.0, 1e-9], rng.gamma(shape, scale, 2000)))
        ours, theirs = gamma_cdf(shape, scale)(y), stats.gamma(a=shape, scale=scale).cdf(y)
        assert np.allclose(ours, theirs, rtol=0, atol=1e-12), shape


@pytest.mark.parametrize("n", [6, 40, 400, 4000])
def test_the_test_is_scipys_kstest(n: int) -> None:
    rng = np.random.default_rng(n)
    gaps = rng.gamma(4.0, 0.05, n)  # (gamma gaps against a wrong exponential too: small p)
    for cdf, law in (
        (exponential_cdf(0.2), stats.expon(scale=0.2)),
        (gamma_cdf(4.0, 0.05), stats.gamma(a=4.0, scale=0.05)),
    ):
        d, p = ks_test(gaps, cdf)
        theirs = stats.kstest(gaps, law.cdf)
        assert d == pytest.approx(float(theirs.statistic), rel=1e-12)
        assert p == pytest.approx(float(theirs.pvalue), abs=1e-5)
