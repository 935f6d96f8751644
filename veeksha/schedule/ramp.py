"""A ramped open-loop rate: λ(t) moves from r0 to r1 over D seconds from t0, then holds r1.
Pure: seconds in, seconds out.

Vocabulary (t: seconds since t0; u: *operational time*, the expected number of arrivals by t):

- ``rate(t)`` = λ(t): linear, r0 + (r1 − r0)·t/D; exponential, r0·(r1/r0)^(t/D); r1 from D on;
- ``cumulative(t)`` = Λ(t) = ∫₀ᵗ λ, the expected arrivals by t;
- ``inverse(u)`` = Λ⁻¹(u), the time by which u arrivals are expected.

Time rescaling: if u₁ < u₂ < … are the arrival times of a process of rate 1 (any renewal law:
the interval generator's gaps, drawn at rate r0 and multiplied by r0), then tₖ = Λ⁻¹(uₖ) is
the process with rate λ(t), the same law locally. Conversely Λ(tₖ) − Λ(tₖ₋₁) are unit-rate gaps
of that law: the health checks test those (``veeksha.evaluate.arrival_checks``).

Closed forms (a = (r1 − r0)/D, k = ln(r1/r0)/D, Λ_D = Λ(D)):

- linear: Λ(t) = r0·t + a·t²/2; Λ⁻¹(u) = 2u / (r0 + √(r0² + 2a·u)) (no cancellation, a < 0 too);
- exponential: Λ(t) = r0·(e^{kt} − 1)/k; Λ⁻¹(u) = ln(1 + k·u/r0)/k;
- hold: Λ(t) = Λ_D + r1·(t − D); Λ⁻¹(u) = D + (u − Λ_D)/r1.

Worked example (fixed gaps of 0.5 s, so r0 = 2/s; linear to 6/s over 2 s): Λ(2) = 8, the k-th
arrival is at Λ⁻¹(k): 0, 0.414, 0.732, 1.0, 1.236, 1.449, 1.646, 1.828, 2.0, then every 1/6 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from veeksha.generate.distributions import mean_interval
from veeksha.scenario.models import RateScheduler

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

__all__ = ["RateRamp", "ramp_of"]


@dataclass(frozen=True, slots=True)
class RateRamp:
    """λ from ``start_rate`` to ``end_rate`` over ``duration_s``, then ``end_rate`` (see the
    module docstring)."""

    start_rate: float
    end_rate: float
    duration_s: float
    shape: str = "linear"

    def __post_init__(self) -> None:
        if self.start_rate <= 0 or self.end_rate <= 0 or self.duration_s <= 0:
            raise ValueError("a ramp needs positive rates and a positive duration")
        if self.shape not in ("linear", "exponential"):
            raise ValueError(f"unknown ramp shape {self.shape!r}")

    @property
    def _flat(self) -> bool:
        return self.start_rate == self.end_rate

    @property
    def ramp_arrivals(self) -> float:
        """Λ(D): the expected arrivals during the ramp."""
        return float(self.cumulative(np.array([self.duration_s]))[0])

    def rate(self, t: ArrayLike) -> NDArray[np.float64]:
        """λ(t) (t < 0 counts as 0)."""
        t = np.clip(np.asarray(t, dtype=np.float64), 0.0, self.duration_s)
        r0, r1, d = self.start_rate, self.end_rate, self.duration_s
        if self.shape == "linear":
            return r0 + (r1 - r0) * t / d
        return r0 * (r1 / r0) ** (t / d)

    def cumulative(self, t: ArrayLike) -> NDArray[np.float64]:
        """Λ(t) = ∫₀ᵗ λ (0 for t ≤ 0)."""
        t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
        r0, r1, d = self.start_rate, self.end_rate, self.duration_s
        inside = np.minimum(t, d)
        if self._flat:
            ramp = r0 * inside
            at_d = r0 * d
        elif self.shape == "linear":
            a = (r1 - r0) / d
            ramp = r0 * inside + a * inside * inside / 2
            at_d = d * (r0 + r1) / 2
        else:
            k = math.log(r1 / r0) / d
            ramp = r0 * np.expm1(k * inside) / k
            at_d = (r1 - r0) / k
        return np.where(t <= d, ramp, at_d + r1 * (t - d))

    def inverse(self, u: ArrayLike) -> NDArray[np.float64]:
        """Λ⁻¹(u): the time at which Λ reaches u (0 for u ≤ 0)."""
        u = np.maximum(np.asarray(u, dtype=np.float64), 0.0)
        r0, r1, d = self.start_rate, self.end_rate, self.duration_s
        if self._flat:
            return u / r0
        if self.shape == "linear":
            at_d = d * (r0 + r1) / 2
            inside = np.minimum(u, at_d)
            a = (r1 - r0) / d
            # (the discriminant is ≥ r1² > 0 for u ≤ Λ(D), even when the rate falls)
            ramp = 2 * inside / (r0 + np.sqrt(r0 * r0 + 2 * a * inside))
        else:
            k = math.log(r1 / r0) / d
            at_d = (r1 - r0) / k
            inside = np.minimum(u, at_d)
            ramp = np.log1p(k * inside / r0) / k
        return np.where(u <= at_d, ramp, d + (u - at_d) / r1)

    def warp(self, offsets_s: NDArray[np.float64]) -> NDArray[np.float64]:
        """Offsets of the unramped process (gaps at rate r0, summed) to the ramped ones:
        Λ⁻¹(r0 · offset)."""
        return self.inverse(self.start_rate * offsets_s)


def ramp_of(scheduler: RateScheduler) -> RateRamp | None:
    """The ramp of a rate scheduler (None: its rate is constant). Its start rate is the
    interval generator's (``arrival_rate``, or 1/interval for fixed gaps)."""
    config = scheduler.ramp
    if config is None:
        return None
    start = 1.0 / mean_interval(scheduler.interval_generator)
    return RateRamp(start, config.end_rate, config.duration, config.shape)
