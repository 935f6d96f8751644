"""Test doubles for time: a fake clock and fake timers driven by ``advance``."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, now_ns: int = 0) -> None:
        self.now = now_ns

    def now_ns(self) -> int:
        return self.now


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """Timers on a FakeClock: ``advance(t)`` fires every due timer in time order."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, _Handle, Callable[[], None]]] = []
        self._seq = count()

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> _Handle:
        handle = _Handle()
        heapq.heappush(
            self._heap, (max(when_ns, self.clock.now), next(self._seq), handle, callback)
        )
        return handle

    def next_time(self) -> int | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def step(self) -> bool:
        """Fire the earliest timer only (moving the clock to it); False when there is none."""
        if self.next_time() is None:
            return False
        when, _, _handle, callback = heapq.heappop(self._heap)
        self.clock.now = max(self.clock.now, when)
        callback()
        return True

    def advance(self, to_ns: int) -> None:
        while (when := self.next_time()) is not None and when <= to_ns:
            _, _, _handle, callback = heapq.heappop(self._heap)
            self.clock.now = max(self.clock.now, when)
            callback()
        self.clock.now = max(self.clock.now, to_ns)
