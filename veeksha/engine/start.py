"""The run's t0 on both clocks: CLOCK_MONOTONIC (every timestamp) and the wall clock.

A reading of one clock cannot be taken at the same instant as the other's; ``clock_pair``
reads monotonic, wall, monotonic back to back several times and keeps the tightest bracket:
the wall reading then lies within ``(m2 − m1) / 2`` of their midpoint (typically < 1 µs).
So ``t0_wall_ns`` (summary.json ``run.t0_wall_ns``) is t0's wall time to that precision, and a
shard given a wall instant to start at (``start_at_wall_ns``, on its own clock, the driver's
offset already applied by the caller) maps it onto its monotonic clock the same way.
"""

from __future__ import annotations

import time

__all__ = ["ClockPair", "clock_pair", "monotonic_at_wall", "wall_at_monotonic"]

ClockPair = tuple[int, int, int]  # (monotonic midpoint, wall, half the bracket) in ns


def clock_pair(tries: int = 7) -> ClockPair:
    """The tightest (monotonic, wall) pair of ``tries`` back-to-back readings."""
    best: ClockPair | None = None
    mono, wall = time.monotonic_ns, time.time_ns
    for _ in range(tries):
        m1 = mono()
        w = wall()
        m2 = mono()
        half = (m2 - m1 + 1) // 2
        if best is None or half < best[2]:
            best = ((m1 + m2) // 2, w, half)
    assert best is not None
    return best


def monotonic_at_wall(wall_ns: int, pair: ClockPair | None = None) -> int:
    """The CLOCK_MONOTONIC reading at wall-clock instant ``wall_ns``."""
    mid, wall, _ = pair or clock_pair()
    return mid + (wall_ns - wall)


def wall_at_monotonic(monotonic_ns: int, pair: ClockPair | None = None) -> int:
    """The wall-clock instant of CLOCK_MONOTONIC reading ``monotonic_ns``."""
    mid, wall, _ = pair or clock_pair()
    return wall + (monotonic_ns - mid)
