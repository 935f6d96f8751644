"""Clocks: every timestamp in veeksha is integer nanoseconds of CLOCK_MONOTONIC.

On Linux CLOCK_MONOTONIC is one clock for all processes, so timestamps taken in worker processes
compare directly with the main process'. Output converts to float seconds since the run's t0.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["NS_PER_S", "Clock", "MonotonicClock", "ns_to_s", "s_to_ns"]

NS_PER_S = 1_000_000_000


class Clock(Protocol):
    """Source of monotonic time in integer nanoseconds; injected so tests can use a fake."""

    def now_ns(self) -> int: ...


class MonotonicClock:
    """The real clock: ``time.monotonic_ns``."""

    __slots__ = ()

    def now_ns(self) -> int:
        return time.monotonic_ns()


def s_to_ns(seconds: float) -> int:
    """Seconds (float) to integer nanoseconds, rounded to the nearest nanosecond."""
    return round(seconds * NS_PER_S)


def ns_to_s(ns: int) -> float:
    """Integer nanoseconds to float seconds."""
    return ns / NS_PER_S
