"""The run's t0 on both clocks: CLOCK_MONOTONIC (every timestamp) and the wall clock.

A reading of one clock cannot be taken at the same instant as the other's; ``clock_pair``
reads monotonic, wall, monotonic back to back several times and keeps the tightest bracket:
the wall reading then lies within ``(m2 − m1) / 2`` of their midpoint (typically < 1 µs).
So ``t0_wall_ns`` (summary.json ``run.t0_wall_ns``) is t0's wall time to that precision, and a
shard given a wall instant to start at (``start_at_wall_ns``, on its own clock, the driver's
offset already applied by the caller) maps it onto its monotonic clock the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "MAX_T0_LEAD_NS",
    "SET_UP_AFTER_T0_NS",
    "ClockPair",
    "StartAt",
    "agreed_t0",
    "clock_pair",
    "monotonic_at_wall",
    "t0_lead_ns",
    "wall_at_monotonic",
]

ClockPair = tuple[int, int, int]  # (monotonic midpoint, wall, half the bracket) in ns
#: ``start_at_wall_ns``: a wall instant (ns), or a callable returning it once the set-up is done.
StartAt = int | Callable[[], int]
_NS = 1e9

#: What the lead leaves the set-up that follows t0's choice (the writer, the recorder, the
#: loop, the signal handlers: ~3 ms) before the first hand-over.
SET_UP_AFTER_T0_NS = 10_000_000
#: The longest lead: a long ``dispatch_ahead_ms`` hands its first arrivals over later than
#: that ahead of their time (still ahead of it), not a longer wait before t0.
MAX_T0_LEAD_NS = 50_000_000


def t0_lead_ns(dispatch_ahead_ns: int) -> int:
    """How far ahead of the end of the set-up t0 is set: the set-up that follows
    (:data:`SET_UP_AFTER_T0_NS`), then the first arrival handed over ``dispatch_ahead_ns``
    ahead of its time, as every later one is (at most :data:`MAX_T0_LEAD_NS` in all). With the
    default 20 ms ahead: 30 ms, of which the set-up after t0 takes ~3."""
    return min(max(dispatch_ahead_ns, 0) + SET_UP_AFTER_T0_NS, MAX_T0_LEAD_NS)


class _Log(Protocol):
    def info(self, message: str) -> None: ...
    def warning(self, message: str) -> None: ...


async def agreed_t0(start_at: StartAt | None, lead_ns: int, log: _Log) -> tuple[int, int]:
    """t0 on CLOCK_MONOTONIC and its wall time (ns): ``lead_ns`` ahead of now (so the set-up
    that follows never makes the first arrival late), or at ``start_at`` (a callable is
    called in a thread: it may block on the driver's barrier), slept until ``lead_ns`` before
    it. A t0 already past is kept (the schedule stays the agreed one; its first arrivals are
    late, and say so in their dispatch lag)."""
    if callable(start_at):
        start_at = await asyncio.to_thread(start_at)
    pair = clock_pair()
    now = time.monotonic_ns()
    if start_at is None:
        t0_ns = now + lead_ns
        return t0_ns, wall_at_monotonic(t0_ns, pair)
    t0_ns = monotonic_at_wall(start_at, pair)
    lead = t0_ns - lead_ns - now
    if lead > 0:
        log.info(f"waiting {lead / _NS:.3f} s for the agreed t0")
        await asyncio.sleep(lead / _NS)
    elif t0_ns < now:
        log.warning(
            f"the agreed t0 passed {(now - t0_ns) / _NS:.3f} s ago: the first arrivals are late"
        )
    return t0_ns, start_at


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
