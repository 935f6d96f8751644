"""The evaluation's own quantile, median and distinct-value functions (``veeksha.evaluate.stats``,
written so the evaluation never imports ``numpy.ma``) give numpy's values bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from veeksha.evaluate.stats import PERCENTILES, distinct, median, percentile, percentiles, quantiles

_RNG = np.random.default_rng(11)


def _arrays() -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for n in (1, 2, 3, 4, 7, 100, 101, 1_001):
        with_nan = _RNG.random(n)
        with_nan[_RNG.integers(0, n)] = np.nan
        with_inf = _RNG.random(n)
        with_inf[0] = np.inf
        out += [
            _RNG.exponential(0.02, n),
            np.round(_RNG.random(n), 1),  # ties
            _RNG.integers(-(10**6), 10**6, n),
            np.zeros(n),
            with_nan,
            with_inf,
        ]
    return out


ARRAYS = _arrays()
QS = [list(PERCENTILES), [0], [100], [50, 90, 99], [0.1, 33.3, 99.9], list(np.linspace(0, 100, 41))]


@pytest.mark.parametrize("qs", QS, ids=str)
def test_percentiles_and_quantiles_are_numpy_s(qs: list[float]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (inf - inf, as numpy's own)
        for values in ARRAYS:
            expected = np.percentile(values, qs)
            got = percentiles(values, qs)
            assert got.dtype == expected.dtype
            assert got.tobytes() == expected.tobytes(), (values[:5], qs)
            one = percentile(values, qs[-1])
            assert np.array_equal(one, float(np.percentile(values, qs[-1])), equal_nan=True)
            fractions = np.asarray(qs) / 100
            expected_q = np.quantile(values, fractions)
            assert quantiles(values, fractions).tobytes() == expected_q.tobytes()


def test_median_is_numpy_s() -> None:
    for values in ARRAYS:
        assert np.array_equal(median(values), float(np.median(values)), equal_nan=True)
    assert np.isnan(median(np.empty(0)))


def test_distinct_is_numpy_unique() -> None:
    for values in [*ARRAYS, np.array([np.nan, 1.0, np.nan, 1.0]), np.empty(0, dtype=np.int64)]:
        expected = np.unique(values)
        got = distinct(values)
        assert got.dtype == expected.dtype
        assert np.array_equal(got, expected, equal_nan=True)


def test_an_empty_array_has_no_quantile() -> None:
    with pytest.raises(ValueError, match="empty"):
        quantiles(np.empty(0), [0.5])
