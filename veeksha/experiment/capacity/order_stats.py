"""A distribution-free confidence interval of a percentile, from order statistics.

Vocabulary: a sample of ``n`` values sorted as x(1) ≤ … ≤ x(n); the true ``p`` quantile q_p of
the distribution they came from. Whatever that distribution is (continuous), the number B of
sample values below q_p is Binomial(n, p), so

    P(x(l) ≤ q_p < x(u)) = P(l ≤ B ≤ u − 1) = F(u − 1) − F(l − 1)      (F: the Binomial(n, p) CDF)

With equal tails at confidence 1 − α: l is the smallest rank with F(l) ≥ α/2 (so F(l − 1) <
α/2) and u = 1 + the smallest rank with F(u − 1) ≥ 1 − α/2; the interval [x(l), x(u)] then
covers q_p with probability at least 1 − α. When l < 1 the sample cannot bound q_p from below
(the lower end is −∞); when u > n it cannot bound it from above (+∞).

Worked example: p = 0.99 at 95 %: the upper end exists only from n = 368 values on (0.99^n must
fall under 2.5 %), so 200 requests can never prove a p99 SLO met, only (perhaps) broken. For
p = 0.9 and n = 50: l = 41, u = 50, the interval is [x(41), x(50)].

F is computed with numpy from the pmf's recurrence in log space, exactly up to
``EXACT_LIMIT`` values (scipy.stats would cost seconds to import); beyond, the ranks come from
the binomial's normal approximation, n·p ± z·√(n·p·(1 − p)), off there by a rank or two
in hundreds of thousands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = [
    "EXACT_LIMIT",
    "QuantileInterval",
    "binomial_cdf",
    "order_statistic_ranks",
    "quantile_interval",
]

#: Sample sizes up to which the ranks come from the exact binomial CDF.
EXACT_LIMIT = 200_000


@dataclass(frozen=True, slots=True)
class QuantileInterval:
    """A percentile's point estimate (numpy's linear interpolation, as the SLO evaluation) and
    its confidence interval; ``low`` is −inf and ``high`` +inf where the sample cannot bound it.
    """

    percentile: float
    confidence: float
    samples: int
    estimate: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: unbounded ends, and an estimate that is no number (no data) or infinite
        (failed requests), as None."""
        return {
            "percentile": self.percentile,
            "confidence": self.confidence,
            "samples": self.samples,
            "estimate": self.estimate if math.isfinite(self.estimate) else None,
            "ci_low": self.low if math.isfinite(self.low) else None,
            "ci_high": self.high if math.isfinite(self.high) else None,
        }


def binomial_cdf(n: int, p: float) -> NDArray[np.float64]:
    """F(k) = P(B ≤ k) for k = 0..n, B ~ Binomial(n, p)."""
    k = np.arange(n + 1, dtype=np.float64)
    if p <= 0 or p >= 1:
        return np.ones(n + 1) if p <= 0 else (k >= n).astype(np.float64)
    steps = np.log(n - k[:-1]) - np.log(k[:-1] + 1) + math.log(p / (1 - p))
    log_pmf = n * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    return np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)


def order_statistic_ranks(n: int, percentile: float, confidence: float) -> tuple[int, int]:
    """The 1-based ranks (l, u) of the interval's ends in a sorted sample of ``n``; l may be 0
    (no lower bound) and u may be n + 1 (no upper bound)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n <= 0:
        return 0, 1
    alpha = 1.0 - confidence
    if n > EXACT_LIMIT:
        z = NormalDist().inv_cdf(1 - alpha / 2)
        spread = z * math.sqrt(n * percentile * (1 - percentile))
        low = math.floor(n * percentile - spread)
        high = math.ceil(n * percentile + spread) + 1
        return max(low, 0), min(high, n + 1)
    cdf = binomial_cdf(n, percentile)
    low = int(np.searchsorted(cdf, alpha / 2, side="left"))
    high = int(np.searchsorted(cdf, 1 - alpha / 2, side="left")) + 1
    return low, min(high, n + 1)


def quantile_interval(values: ArrayLike, percentile: float, confidence: float) -> QuantileInterval:
    """The ``percentile`` quantile of ``values`` (NaN dropped; +inf allowed: a failed request)
    with its order-statistic interval at ``confidence``; an empty sample gives NaN and
    (−inf, +inf)."""
    sample = np.sort(np.asarray(values, dtype=np.float64))
    sample = sample[~np.isnan(sample)]
    n = int(sample.size)
    if n == 0:
        return QuantileInterval(percentile, confidence, 0, math.nan, -math.inf, math.inf)
    low_rank, high_rank = order_statistic_ranks(n, percentile, confidence)
    low = float(sample[low_rank - 1]) if low_rank >= 1 else -math.inf
    high = float(sample[high_rank - 1]) if high_rank <= n else math.inf
    with np.errstate(invalid="ignore"):  # between two infinite values: inf − inf
        estimate = float(np.quantile(sample, percentile))
    if math.isnan(estimate):
        estimate = math.inf
    return QuantileInterval(percentile, confidence, n, estimate, low, high)
