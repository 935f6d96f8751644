"""Timers at absolute monotonic times, so the traffic loop can run on a real or a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from veeksha.clock import Clock

__all__ = ["Cancellable", "LoopTimers", "Timers"]

_NS = 1_000_000_000


class Cancellable(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None: ...


class Timers(Protocol):
    """Calls ``callback`` once the clock reaches ``when_ns`` (at once if it already has)."""

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> Cancellable: ...


class LoopTimers:
    """Timers on an asyncio event loop, converted from the clock's ns to the loop's own time."""

    __slots__ = ("_clock", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self._loop = loop
        self._clock = clock

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> Cancellable:
        delay = (when_ns - self._clock.now_ns()) / _NS
        return self._loop.call_later(max(0.0, delay), callback)
