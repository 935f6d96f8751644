"""Samplers for the scenario's interval and length generators.

Interval samplers draw gaps in seconds (session arrivals, think times); length samplers draw
non-negative integers (token counts, turns, graph sizes). Every sampler draws from the numpy
``Generator`` it is bound to (``rng``, re-bindable), offers a vectorised ``sample(n)`` (one numpy
call for ``n`` values: use it on hot paths) and a single ``sample_one()``.

Single draws are served from an internal batch (refilled ``_BATCH`` at a time), and ``sample(n)``
consumes that batch first, so a sequence of calls yields the same values as one long sequential
stream from the same generator state. Re-binding ``rng`` drops the batch.

Semantics (see the scenario reference):

* ``poisson``: exponential gaps with mean 1/arrival_rate, not truncated.
* ``gamma``: shape k = ``effective_shape``, scale 1/(rate·k), so the mean gap is 1/rate and the
  coefficient of variation is 1/√k.
* ``fixed``: a constant gap.
* ``fixed`` / ``uniform`` (both bounds inclusive) / ``zipf`` (bounded, P(rank r) ∝ r^-θ over
  [min, max], rank 1 = min unless ``scramble``) / ``fixed_stair`` / ``inverse_gaussian``
  (Wald, rounded, at least 1) / ``normal`` (rounded, clipped to [min, max]) / ``choice`` (one
  of ``values``, by ``weights``: the first value whose cumulative share exceeds a uniform
  draw).

``fixed_stair`` is stateful: its k-th draw is ``values[k // repeat_each]`` (cycling with
``wrap``, else staying on the last value); ``position`` is k and may be set.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import numpy as np

from veeksha.scenario.base import MAX_SECONDS
from veeksha.scenario.generators import MAX_DRAW, AnyLength
from veeksha.scenario.models import (
    ChoiceLength,
    FixedInterval,
    FixedLength,
    FixedStairLength,
    GammaInterval,
    NormalLength,
    PoissonInterval,
    UniformLength,
    ZipfLength,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "ChoiceLengthSampler",
    "FixedIntervalSampler",
    "FixedLengthSampler",
    "FixedStairSampler",
    "GammaIntervalSampler",
    "IntervalConfig",
    "IntervalSampler",
    "InverseGaussianSampler",
    "LengthConfig",
    "LengthSampler",
    "NormalLengthSampler",
    "PoissonIntervalSampler",
    "UniformLengthSampler",
    "ZipfLengthSampler",
    "make_interval_sampler",
    "make_length_sampler",
    "mean_interval",
]

IntervalConfig = PoissonInterval | GammaInterval | FixedInterval
LengthConfig = AnyLength

_BATCH = 256
#: Above this many values a bounded zipf uses a continuous inverse-CDF approximation.
_ZIPF_TABLE_LIMIT = 1 << 22


class _Sampler(ABC):
    """Common machinery: a bound generator, a batch for single draws."""

    __slots__ = ("_buffer", "_pos", "_rng")

    _dtype: Any = np.float64

    def __init__(self, rng: np.random.Generator | None = None) -> None:
        self._rng = rng if rng is not None else np.random.default_rng(0)
        self._buffer: NDArray[Any] = np.empty(0, dtype=self._dtype)
        self._pos = 0

    @property
    def rng(self) -> np.random.Generator:
        """The generator this sampler draws from."""
        return self._rng

    @rng.setter
    def rng(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self._buffer = np.empty(0, dtype=self._dtype)
        self._pos = 0

    @abstractmethod
    def _draw(self, n: int) -> NDArray[Any]:
        """``n`` fresh values from the generator."""

    def _sample(self, n: int) -> NDArray[Any]:
        left = len(self._buffer) - self._pos
        if left <= 0:
            return self._draw(n)
        take = min(left, n)
        head = self._buffer[self._pos : self._pos + take]
        self._pos += take
        if take == n:
            return head.copy()
        return np.concatenate((head, self._draw(n - take)))

    def _one(self) -> Any:
        if self._pos >= len(self._buffer):
            self._buffer = self._draw(_BATCH)
            self._pos = 0
        value = self._buffer[self._pos]
        self._pos += 1
        return value


# ------------------------------------------------------------------------------------ intervals


class IntervalSampler(_Sampler):
    """Gaps in seconds (floats)."""

    __slots__ = ()

    def sample(self, n: int) -> NDArray[np.float64]:
        """``n`` gaps as a float64 array."""
        return self._sample(n)

    def sample_one(self) -> float:
        """One gap."""
        return float(self._one())

    @property
    @abstractmethod
    def mean(self) -> float:
        """Mean gap in seconds."""


def _clipped(gaps: NDArray[np.float64]) -> NDArray[np.float64]:
    """Gaps of at most ``MAX_SECONDS``: a tiny rate's mean (1e300 s, or an infinite one) or a
    heavy tail's rare draw would overflow the run's int64 nanoseconds; a gap that long is never
    reached either way."""
    return np.minimum(gaps, MAX_SECONDS, out=gaps)


class PoissonIntervalSampler(IntervalSampler):
    """Exponential gaps with mean 1/arrival_rate (a Poisson process), not truncated."""

    __slots__ = ("_scale",)

    def __init__(self, arrival_rate: float, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        self._scale = 1.0 / arrival_rate

    @property
    def mean(self) -> float:
        return self._scale

    def _draw(self, n: int) -> NDArray[np.float64]:
        return _clipped(self._rng.exponential(self._scale, n))


class GammaIntervalSampler(IntervalSampler):
    """Gamma gaps with shape k and mean 1/arrival_rate (CV = 1/√k)."""

    __slots__ = ("_scale", "_shape")

    def __init__(
        self, arrival_rate: float, shape: float, rng: np.random.Generator | None = None
    ) -> None:
        super().__init__(rng)
        self._shape = shape
        self._scale = 1.0 / (arrival_rate * shape)

    @property
    def mean(self) -> float:
        return self._shape * self._scale

    def _draw(self, n: int) -> NDArray[np.float64]:
        return _clipped(self._rng.gamma(self._shape, self._scale, n))


class FixedIntervalSampler(IntervalSampler):
    """A constant gap (0 = everything at once)."""

    __slots__ = ("_interval",)

    def __init__(self, interval: float, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        self._interval = float(interval)

    @property
    def mean(self) -> float:
        return self._interval

    def _draw(self, n: int) -> NDArray[np.float64]:
        return np.full(n, self._interval)

    def sample(self, n: int) -> NDArray[np.float64]:
        return np.full(n, self._interval)

    def sample_one(self) -> float:
        return self._interval


def make_interval_sampler(
    cfg: IntervalConfig, rng: np.random.Generator | None = None
) -> IntervalSampler:
    """The sampler of an interval generator config, bound to ``rng``."""
    if isinstance(cfg, PoissonInterval):
        return PoissonIntervalSampler(cfg.arrival_rate, rng)
    if isinstance(cfg, GammaInterval):
        return GammaIntervalSampler(cfg.arrival_rate, cfg.effective_shape, rng)
    return FixedIntervalSampler(cfg.interval, rng)


def mean_interval(cfg: IntervalConfig) -> float:
    """Mean gap in seconds of an interval generator config."""
    if isinstance(cfg, PoissonInterval | GammaInterval):
        return 1.0 / cfg.arrival_rate
    return cfg.interval


# -------------------------------------------------------------------------------------- lengths


class LengthSampler(_Sampler):
    """Non-negative integers (token counts, turns, widths)."""

    __slots__ = ()

    _dtype = np.int64

    def sample(self, n: int) -> NDArray[np.int64]:
        """``n`` values as an int64 array."""
        return self._sample(n)

    def sample_one(self) -> int:
        """One value."""
        return int(self._one())

    @property
    @abstractmethod
    def bounds(self) -> tuple[int, int | None]:
        """Smallest and largest possible value (None: unbounded)."""


class FixedLengthSampler(LengthSampler):
    """Always ``value``."""

    __slots__ = ("_value",)

    def __init__(self, value: int, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        self._value = int(value)

    @property
    def bounds(self) -> tuple[int, int | None]:
        return self._value, self._value

    def _draw(self, n: int) -> NDArray[np.int64]:
        return np.full(n, self._value, dtype=np.int64)

    def sample(self, n: int) -> NDArray[np.int64]:
        return np.full(n, self._value, dtype=np.int64)

    def sample_one(self) -> int:
        return self._value


class UniformLengthSampler(LengthSampler):
    """Integer uniform on [low, high], both bounds inclusive."""

    __slots__ = ("_high", "_low")

    def __init__(self, low: int, high: int, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        if low > high:
            raise ValueError(f"low must be <= high (got {low} > {high})")
        self._low, self._high = int(low), int(high)

    @property
    def bounds(self) -> tuple[int, int | None]:
        return self._low, self._high

    def _draw(self, n: int) -> NDArray[np.int64]:
        return self._rng.integers(self._low, self._high, n, endpoint=True, dtype=np.int64)


class ZipfLengthSampler(LengthSampler):
    """Bounded Zipfian over [low, high]: P(rank r) ∝ r^-theta, r = 1 … high-low+1.

    Without ``scramble`` rank r is the value ``low + r - 1`` (small values most likely). With it,
    ranks are spread over the range by a fixed affine bijection (the popular values are scattered,
    the frequency profile unchanged). Up to 4 Mi values the inverse CDF is an exact table; past
    that a continuous approximation of it.
    """

    __slots__ = ("_cdf", "_high", "_low", "_mult", "_scramble", "_theta")

    def __init__(
        self,
        low: int,
        high: int,
        theta: float,
        scramble: bool = False,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(rng)
        if low > high:
            raise ValueError(f"low must be <= high (got {low} > {high})")
        self._low, self._high, self._theta, self._scramble = int(low), int(high), theta, scramble
        size = self._high - self._low + 1
        self._cdf: NDArray[np.float64] | None = None
        if size <= _ZIPF_TABLE_LIMIT:
            weights = np.arange(1, size + 1, dtype=np.float64) ** -theta
            cdf = np.cumsum(weights)
            self._cdf = cdf / cdf[-1]
        self._mult = _coprime_multiplier(size)

    @property
    def bounds(self) -> tuple[int, int | None]:
        return self._low, self._high

    def _ranks(self, u: NDArray[np.float64]) -> NDArray[np.int64]:
        size = self._high - self._low + 1
        if self._cdf is not None:
            ranks = np.searchsorted(self._cdf, u, side="right")
        else:  # continuous density ∝ x^-θ on [1, size + 1), inverted, floored
            t = self._theta
            if abs(t - 1.0) < 1e-12:
                x = np.exp(u * math.log(size + 1.0))
            else:
                top = (size + 1.0) ** (1.0 - t)
                x = (1.0 + u * (top - 1.0)) ** (1.0 / (1.0 - t))
            ranks = np.floor(x).astype(np.int64) - 1
        return np.minimum(ranks, size - 1).astype(np.int64)

    def _draw(self, n: int) -> NDArray[np.int64]:
        ranks = self._ranks(self._rng.random(n))
        if self._scramble:
            size = self._high - self._low + 1
            ranks = (ranks * self._mult + size // 3) % size
        return ranks + self._low


def _coprime_multiplier(size: int) -> int:
    """A multiplier near size·φ that is coprime with size (so r ↦ r·m mod size is a bijection)."""
    if size <= 2:
        return 1
    m = max(1, int(size * 0.6180339887498949)) | 1
    while math.gcd(m, size) != 1:
        m += 1
    return m


class FixedStairSampler(LengthSampler):
    """Each value ``repeat_each`` times in order, then cycle (``wrap``) or stay on the last.

    Stateful: ``position`` counts the draws made so far (settable, to resume or replay).

    >>> s = FixedStairSampler([1, 2], repeat_each=2, wrap=True)
    >>> s.sample(5).tolist()
    [1, 1, 2, 2, 1]
    """

    __slots__ = ("_period", "_position", "_repeat", "_values", "_wrap")

    def __init__(
        self,
        values: list[int],
        repeat_each: int = 1,
        wrap: bool = True,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(rng)
        if not values or repeat_each < 1:
            raise ValueError("fixed_stair needs values and repeat_each >= 1")
        self._values = np.asarray(values, dtype=np.int64)
        self._repeat = repeat_each
        self._wrap = wrap
        self._period = len(values) * repeat_each
        self._position = 0

    @property
    def position(self) -> int:
        """How many values have been drawn (the next draw is step position // repeat_each)."""
        return self._position

    @position.setter
    def position(self, value: int) -> None:
        self._position = int(value)

    @property
    def bounds(self) -> tuple[int, int | None]:
        return int(self._values.min()), int(self._values.max())

    def _draw(self, n: int) -> NDArray[np.int64]:
        k = np.arange(self._position, self._position + n, dtype=np.int64)
        self._position += n
        step = k // self._repeat
        if self._wrap:
            step %= len(self._values)
        else:
            np.minimum(step, len(self._values) - 1, out=step)
        return self._values[step]

    def sample(self, n: int) -> NDArray[np.int64]:
        return self._draw(n)

    def sample_one(self) -> int:
        return int(self._draw(1)[0])


class InverseGaussianSampler(LengthSampler):
    """Wald (inverse Gaussian) with the given mean and shape λ, rounded, at least 1 and at most
    ``MAX_DRAW`` (a heavy tail's rare draw is clipped, before it can overflow an int64)."""

    __slots__ = ("_mean", "_shape")

    def __init__(self, mean: float, shape: float, rng: np.random.Generator | None = None) -> None:
        super().__init__(rng)
        self._mean, self._shape = mean, shape

    @property
    def bounds(self) -> tuple[int, int | None]:
        return 1, MAX_DRAW

    def _draw(self, n: int) -> NDArray[np.int64]:
        drawn = np.clip(np.rint(self._rng.wald(self._mean, self._shape, n)), 1, MAX_DRAW)
        return drawn.astype(np.int64)


class NormalLengthSampler(LengthSampler):
    """Normal with the given mean and standard deviation, rounded, clipped to [low, high]."""

    __slots__ = ("_high", "_low", "_mean", "_std")

    def __init__(
        self,
        mean: float,
        std: float,
        low: int,
        high: int | None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(rng)
        self._mean, self._std = mean, std
        self._low, self._high = int(low), MAX_DRAW if high is None else int(high)

    @property
    def bounds(self) -> tuple[int, int | None]:
        return self._low, self._high

    def _draw(self, n: int) -> NDArray[np.int64]:
        drawn = np.rint(self._rng.normal(self._mean, self._std, n))
        return np.clip(drawn, self._low, self._high).astype(np.int64)


class ChoiceLengthSampler(LengthSampler):
    """One of ``values`` a draw, each with its weight's share (equal without weights)."""

    __slots__ = ("_cumulative", "_values")

    def __init__(
        self,
        values: list[int],
        weights: list[float] | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(rng)
        self._values = np.array(values, dtype=np.int64)
        shares = np.ones(len(values)) if weights is None else np.array(weights, dtype=np.float64)
        self._cumulative = np.cumsum(shares / shares.sum())
        self._cumulative[-1] = 1.0  # (a uniform draw below 1 always finds its value)

    @property
    def bounds(self) -> tuple[int, int | None]:
        drawn = self._values[np.diff(self._cumulative, prepend=0.0) > 0]
        return int(drawn.min()), int(drawn.max())

    def _draw(self, n: int) -> NDArray[np.int64]:
        picks = np.searchsorted(self._cumulative, self._rng.random(n), side="right")
        return self._values[picks]


def make_length_sampler(cfg: LengthConfig, rng: np.random.Generator | None = None) -> LengthSampler:
    """The sampler of a length generator config, bound to ``rng``."""
    if isinstance(cfg, FixedLength):
        return FixedLengthSampler(cfg.value, rng)
    if isinstance(cfg, UniformLength):
        return UniformLengthSampler(cfg.min, cfg.max, rng)
    if isinstance(cfg, ZipfLength):
        return ZipfLengthSampler(cfg.min, cfg.max, cfg.theta, cfg.scramble, rng)
    if isinstance(cfg, FixedStairLength):
        return FixedStairSampler(cfg.values, cfg.repeat_each, cfg.wrap, rng)
    if isinstance(cfg, NormalLength):
        return NormalLengthSampler(cfg.mean, cfg.std, cfg.min, cfg.max, rng)
    if isinstance(cfg, ChoiceLength):
        return ChoiceLengthSampler(cfg.values, cfg.weights, rng)
    return InverseGaussianSampler(cfg.mean, cfg.shape, rng)
