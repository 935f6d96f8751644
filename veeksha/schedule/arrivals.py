"""Arrival policies: when sessions start. Pure: times in, decisions out.

Open loop (``RateArrivals``): session k starts at ``t0 + gap_1 + ... + gap_k`` on an absolute
timeline, so a late timer never shifts later arrivals (no drift) and the server's speed never
changes the schedule (no coordinated omission). The first session starts at t0 (gap 0), the k-th
after k − 1 sampled gaps.

Closed loop (``ConcurrencyRamp``): at most ``target(t)`` sessions are active, where
``target(t) = floor(target × t / rampup)`` until ``t ≥ rampup``. The k-th slot opens at exactly
``t_k = ceil(k × rampup / target)``, computed in closed form (integer nanoseconds).

Worked example: target 4, rampup 10 s → slots open at 2.5 s, 5 s, 7.5 s and 10 s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

from veeksha.scenario.base import MAX_SECONDS

__all__ = ["ConcurrencyRamp", "RateArrivals"]

_NS = 1_000_000_000


class RateArrivals:
    """Absolute arrival times (ns) of an open-loop schedule, drawn lazily in batches.

    ``sample_gaps(n)`` returns n gaps in seconds (the interval generator). Offsets are summed in
    float64 seconds from t0 and converted once, so rounding never accumulates. ``warp`` (a
    ramped rate, ``veeksha.schedule.ramp``) maps the summed offsets to the ramped ones before
    that conversion; without it the offsets are used as summed.
    """

    __slots__ = ("_batch", "_buffer", "_index", "_offset_s", "_sample_gaps", "_warp", "t0_ns")

    def __init__(
        self,
        sample_gaps: Callable[[int], NDArray[np.float64]],
        t0_ns: int,
        batch: int = 1024,
        warp: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None = None,
    ) -> None:
        self._sample_gaps = sample_gaps
        self._warp = warp
        self.t0_ns = t0_ns
        self._batch = batch
        self._offset_s = 0.0
        self._buffer: list[int] = [t0_ns]
        self._index = 0

    def _refill(self) -> None:
        gaps = np.asarray(self._sample_gaps(self._batch), dtype=np.float64)
        offsets = self._offset_s + np.cumsum(gaps)
        self._offset_s = float(offsets[-1])
        if self._warp is not None:
            offsets = self._warp(offsets)
        # (arrivals past MAX_SECONDS, 31.7 years, all wait there: never reached, and their
        # nanoseconds would overflow int64 into the past, released at once)
        np.minimum(offsets, MAX_SECONDS, out=offsets)
        self._buffer = (self.t0_ns + np.rint(offsets * _NS).astype(np.int64)).tolist()
        self._index = 0

    def peek_ns(self) -> int:
        """The next planned arrival time, without consuming it."""
        if self._index >= len(self._buffer):
            self._refill()
        return self._buffer[self._index]

    def pop_ns(self) -> int:
        """Consume and return the next planned arrival time."""
        value = self.peek_ns()
        self._index += 1
        return value


class ConcurrencyRamp:
    """Closed-loop target: how many sessions may be active ``elapsed_ns`` after t0.

    A ramp starts at ``start_ns`` (elapsed) from ``from_target`` sessions (0 at the run's
    start; the previous phase's target at a phase boundary) and grows linearly to ``target``
    over ``rampup_s``; a lower target than ``from_target`` holds at once (no session is
    cancelled: ended ones are not replaced until fewer than the target are active).
    """

    __slots__ = ("from_target", "rampup_ns", "start_ns", "target")

    def __init__(
        self, target: int, rampup_s: float, start_ns: int = 0, from_target: int = 0
    ) -> None:
        if target < 1:
            raise ValueError("target must be at least 1")
        self.target = target
        self.rampup_ns = round(rampup_s * _NS)
        self.start_ns = start_ns
        self.from_target = min(from_target, target)

    def allowed(self, elapsed_ns: int) -> int:
        """from + floor((target − from) × t / rampup) during the ramp, then the target."""
        t = elapsed_ns - self.start_ns
        if self.rampup_ns <= 0 or t >= self.rampup_ns:
            return self.target
        if t <= 0:
            return self.from_target
        return self.from_target + ((self.target - self.from_target) * t) // self.rampup_ns

    def slot_open_ns(self, k: int) -> int:
        """Elapsed time at which the k-th slot (1-based) opens:
        start + ceil((k − from) × rampup / (target − from))."""
        if self.rampup_ns <= 0 or k <= self.from_target:
            return self.start_ns
        steps = k - self.from_target
        return self.start_ns - ((-steps * self.rampup_ns) // (self.target - self.from_target))

    def next_increase_ns(self, elapsed_ns: int) -> int | None:
        """Elapsed time of the next increase of ``allowed``, or None when the ramp is over."""
        current = self.allowed(elapsed_ns)
        if current >= self.target:
            return None
        return self.slot_open_ns(current + 1)
