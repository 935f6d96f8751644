"""The ready queue: requests whose dependencies and think time are satisfied, by ready time.

A min-heap of ``(ready_at_ns, priority, seq, item)``. ``seq`` is a running counter, so entries
with equal time and priority leave in insertion order and items are never compared. Entries are
not removed when a session is cancelled; the dispatcher skips stale ones (lazy deletion).

Worked example::

    q = ReadyQueue()
    q.push(2_000, "b"); q.push(1_000, "a"); q.push(2_000, "c")
    q.pop_due(1_500)  ->  ["a"]          # only what is due by t = 1,500 ns
    q.next_time()     ->  2_000          # when the dispatcher should wake next
    q.pop_due(5_000)  ->  ["b", "c"]     # equal times keep insertion order
"""

from __future__ import annotations

import heapq
from itertools import count
from typing import Generic, TypeVar

__all__ = ["ReadyQueue"]

T = TypeVar("T")


class ReadyQueue(Generic[T]):
    """Min-heap of items by (ready time, priority, insertion order); pure, no clock."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, T]] = []
        self._seq = count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, ready_at_ns: int, item: T, priority: int = 0) -> None:
        heapq.heappush(self._heap, (ready_at_ns, priority, next(self._seq), item))

    def next_time(self) -> int | None:
        """Ready time of the head, or None when empty."""
        return self._heap[0][0] if self._heap else None

    def pop(self) -> tuple[int, T]:
        """Remove and return the head as (ready_at_ns, item)."""
        ready_at, _, _, item = heapq.heappop(self._heap)
        return ready_at, item

    def pop_due(self, now_ns: int, limit: int | None = None) -> list[T]:
        """Remove and return every item ready by ``now_ns`` (at most ``limit``), in order."""
        heap = self._heap
        out: list[T] = []
        while heap and heap[0][0] <= now_ns and (limit is None or len(out) < limit):
            out.append(heapq.heappop(heap)[3])
        return out

    def drain(self) -> list[T]:
        """Remove and return everything, in order."""
        out = [heapq.heappop(self._heap)[3] for _ in range(len(self._heap))]
        return out
