"""The one-sample Kolmogorov–Smirnov test of ``arrival_distribution``, with numpy alone.

``scipy.stats`` costs 1.2–2 CPU-s to import, paid at the end of every run with a random arrival
law (the quickstart's poisson included) for one test of one column. This module computes what
``scipy.stats.kstest(gaps, cdf)`` computes for the two laws veeksha generates:

- the statistic D = max(D+, D−) of the sorted sample against the law's CDF, as scipy does;
- the CDFs: exponential (``-expm1(-x / scale)``) and gamma (the regularized lower incomplete
  gamma function: its power series below ``shape + 1``, its continued fraction above);
- the p-value P(D_n ≥ d), by the regimes of Simard & L'Ecuyer (2011), which scipy follows:
  exact closed forms at the extremes (Ruben–Gambino), twice the one-sided tail (Birnbaum–Tingey's
  exact sum) where the two tails cannot both be crossed, the exact matrix method of Marsaglia,
  Tsang & Wang (2003) while its matrix is at most ``MAX_MATRIX`` wide, and beyond that (over
  ~5,000 gaps, mid-range p) the limiting Kolmogorov law at Stephens' (1970) corrected argument.

Agreement with scipy (``tests/unit/evaluate/test_ks.py``): D and the CDFs to ~1e-12; the
p-value to 1e-6 where this module is exact and scipy's Pelz–Good approximation is, and to 2e-3
in the limiting-law regime: well inside what a test at alpha = 0.01 can tell apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["MAX_MATRIX", "exponential_cdf", "gamma_cdf", "kolmogorov_sf", "ks_test"]

Floats: TypeAlias = "NDArray[np.float64]"

#: The widest Marsaglia–Tsang–Wang matrix computed (2k − 1 for k = ⌊n·d⌋ + 1): 301 takes
#: ~0.1 CPU-s at most; wider ones fall to the limiting law.
MAX_MATRIX = 301

_SERIES_TERMS = 500
_EPS = 1e-16
_TINY = 1e-300


def exponential_cdf(scale: float) -> Callable[[Floats], Floats]:
    """The CDF of the exponential law of mean ``scale``."""

    def cdf(x: Floats) -> Floats:
        return np.where(x > 0, -np.expm1(-np.maximum(x, 0.0) / scale), 0.0)

    return cdf


def gamma_cdf(shape: float, scale: float) -> Callable[[Floats], Floats]:
    """The CDF of the gamma law of ``shape`` k and ``scale`` θ: P(k, x / θ)."""

    def cdf(x: Floats) -> Floats:
        return _lower_regularized_gamma(shape, np.maximum(np.asarray(x, float), 0.0) / scale)

    return cdf


def _lower_regularized_gamma(a: float, x: Floats) -> Floats:
    """P(a, x) = γ(a, x) / Γ(a), elementwise over ``x`` ≥ 0."""
    out = np.zeros_like(x)
    positive = x > 0
    series = positive & (x < a + 1.0)
    fraction = positive & ~series
    log_norm = -math.lgamma(a)
    if series.any():
        xs = x[series]
        # Σ x^n / (a (a+1) ... (a+n)), then times x^a e^−x / Γ(a)
        term = np.full_like(xs, 1.0 / a)
        total = term.copy()
        for n in range(1, _SERIES_TERMS):
            term = term * xs / (a + n)
            total += term
            if np.all(term < total * _EPS):
                break
        out[series] = total * np.exp(a * np.log(xs) - xs + log_norm)
    if fraction.any():
        xf = x[fraction]
        # Q(a, x) by the modified Lentz evaluation of its continued fraction; P = 1 − Q
        b = xf + 1.0 - a
        c = np.full_like(xf, 1.0 / _TINY)
        d = 1.0 / b
        h = d.copy()
        for i in range(1, _SERIES_TERMS):
            an = -i * (i - a)
            b = b + 2.0
            d = an * d + b
            d = np.where(np.abs(d) < _TINY, _TINY, d)
            c = b + an / c
            c = np.where(np.abs(c) < _TINY, _TINY, c)
            d = 1.0 / d
            delta = d * c
            h = h * delta
            if np.all(np.abs(delta - 1.0) < _EPS):
                break
        out[fraction] = -np.expm1(a * np.log(xf) - xf + log_norm + np.log(h))
    return out


def ks_test(sample: Floats, cdf: Callable[[Floats], Floats]) -> tuple[float, float]:
    """The two-sided one-sample KS statistic of ``sample`` against ``cdf``, and its p-value."""
    x = np.sort(np.asarray(sample, dtype=np.float64))
    n = int(x.size)
    if n == 0:
        return math.nan, math.nan
    values = cdf(x)
    d_plus = float(np.max(np.arange(1.0, n + 1) / n - values))
    d_minus = float(np.max(values - np.arange(0.0, n) / n))
    d = max(d_plus, d_minus)
    return d, kolmogorov_sf(n, d)


def kolmogorov_sf(n: int, d: float) -> float:
    """P(D_n ≥ d) for the two-sided statistic of ``n`` observations (see the module doc)."""
    if math.isnan(d):
        return math.nan
    if d >= 1.0:
        return 0.0
    if d <= 0.0:
        return 1.0
    t = n * d
    if t <= 0.5:
        return 1.0
    if t <= 1.0:  # Ruben–Gambino: P(D_n < d) = n!/nⁿ (2t − 1)ⁿ
        return _clip(1.0 - math.exp(_log_factorial_over_power(n) + n * math.log(2.0 * t - 1.0)))
    if t >= n - 1:  # Ruben–Gambino
        return _clip(2.0 * (1.0 - d) ** n)
    n_d_squared = t * d
    small = n <= 140
    if d >= 0.5 or n_d_squared >= (4.0 if small else 2.2):
        return _clip(2.0 * _smirnov_sf(n, d))  # the two tails cannot both be crossed
    if 2 * int(t) + 1 <= MAX_MATRIX:
        return _clip(1.0 - _mtw_cdf(n, d))
    z = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d  # Stephens (1970)
    return _clip(_limiting_sf(z))


def _clip(p: float) -> float:
    return min(1.0, max(0.0, p))


def _log_factorial_over_power(n: int) -> float:
    return math.lgamma(n + 1.0) - n * math.log(n)


def _smirnov_sf(n: int, d: float) -> float:
    """P(D_n⁺ ≥ d), Birnbaum–Tingey's exact sum of positive terms, added in log space:
    d Σ_{j=0}^{⌊n(1−d)⌋} C(n, j) (1 − d − j/n)^(n−j) (d + j/n)^(j−1)."""
    last = math.floor(n * (1.0 - d))
    j = np.arange(0, last + 1, dtype=np.float64)
    log_choose = np.concatenate(([0.0], np.cumsum(np.log((n - j[1:] + 1.0) / j[1:]))))
    below = 1.0 - d - j / n
    keep = (below > 0) | (j == n)
    j, log_choose, below = j[keep], log_choose[keep], below[keep]
    with np.errstate(divide="ignore"):
        log_terms = log_choose + (n - j) * np.log(below) + (j - 1.0) * np.log(d + j / n)
    top = float(np.max(log_terms))
    return d * math.exp(top) * float(np.sum(np.exp(log_terms - top)))


def _mtw_cdf(n: int, d: float) -> float:
    """P(D_n < d) by Marsaglia, Tsang & Wang's matrix: n!/nⁿ · (Hⁿ)[k−1, k−1]."""
    k = int(n * d) + 1
    m = 2 * k - 1
    h = k - n * d
    i = np.arange(m)
    steps = i[:, None] - i[None, :] + 1  # H[i, j] = 1/(i − j + 1)! where i − j + 1 ≥ 0
    inverse_factorials = np.concatenate(([1.0], np.cumprod(1.0 / np.arange(1.0, m + 1))))
    matrix = np.where(steps >= 0, inverse_factorials[np.clip(steps, 0, m)], 0.0)
    powers = h ** np.arange(1, m + 1) * inverse_factorials[1 : m + 1]  # h^r / r!, r = 1..m
    matrix[:, 0] -= powers
    matrix[m - 1, :] -= powers[::-1]
    if 2.0 * h - 1.0 > 0:
        matrix[m - 1, 0] += (2.0 * h - 1.0) ** m * inverse_factorials[m]
    power, exponent = _scaled_power(matrix, n)
    log_value = math.log(max(power[k - 1, k - 1], _TINY)) + exponent * math.log(2.0)
    return _clip(math.exp(log_value + _log_factorial_over_power(n)))


def _scaled_power(matrix: Floats, n: int) -> tuple[Floats, int]:
    """``matrix``ⁿ as (M, e) with the power = M · 2ᵉ, rescaled as it grows (no overflow)."""
    result: Floats | None = None
    result_exp = 0
    base, base_exp = matrix, 0
    while n:
        if n & 1:
            if result is None:
                result, result_exp = base.copy(), base_exp
            else:
                result = result @ base
                result_exp += base_exp
                result, result_exp = _rescale(result, result_exp)
        n >>= 1
        if n:
            base = base @ base
            base_exp *= 2
            base, base_exp = _rescale(base, base_exp)
    assert result is not None
    return result, result_exp


def _rescale(matrix: Floats, exponent: int) -> tuple[Floats, int]:
    top = float(np.max(np.abs(matrix)))
    if top > 1e100 or 0 < top < 1e-100:
        shift = math.frexp(top)[1]
        return np.ldexp(matrix, -shift), exponent + shift
    return matrix, exponent


def _limiting_sf(z: float) -> float:
    """Kolmogorov's limiting law: P(K > z) = 2 Σ_{j≥1} (−1)^(j−1) e^(−2 j² z²)."""
    if z < 0.2:
        return 1.0
    if z < 1.0:  # the other series (Jacobi's form) converges fast for small z
        terms = np.exp(-((2.0 * np.arange(1, 20) - 1.0) ** 2) * math.pi**2 / (8.0 * z * z))
        return 1.0 - math.sqrt(2.0 * math.pi) / z * float(np.sum(terms))
    j = np.arange(1, 101, dtype=np.float64)
    return float(2.0 * np.sum((-1.0) ** (j - 1) * np.exp(-2.0 * j * j * z * z)))
