"""The driver's pulls during a run: every shard's at once, taken as they come.

No Ray here: the driver (``driver.py``) gives :class:`PullRounds` how to issue a pull (an actor
call, returning a reference) and how to wait for the first of several references to be ready
(``ray.wait``), so a fake can stand in for both.

Vocabulary. A *round* lasts one pull interval. At its start a pull is issued to every live
shard that has none *in flight*; during the round the answers are taken in the order they
arrive, until every pull has answered or the round ends. A shard whose pull is still in flight
at the end *missed* that round: no second pull is queued behind the first (an actor answers
its calls in turn), and the driver declares a shard that misses ``MISSED_PULLS`` rounds in a
row lost. So one slow or hung shard delays nobody: the others' answers are taken as they
arrive, and every round ends on time.

Worked example (interval 1 s), shards 0 and 1, shard 1 hung. Round 1 (t = 0 s): pulls to 0
and 1; 0 answers at 0.01 s and is applied at once; at 1 s shard 1 has missed 1. Round 2: a
pull to 0 only (1's is still in flight); 0 answers at 1.01 s; shard 1 has missed 2; ... after
round 30 shard 1 is lost. Had shard 1 answered at 2.5 s, its answer would have been taken then
(round 3), its misses back to 0, and round 4 would have pulled it again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["MISSED_PULLS", "PullRounds"]

#: rounds in a row a shard's pull may stay unanswered before the driver declares it lost
MISSED_PULLS = 30

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class PullRounds(Generic[K, R]):
    """At most one pull in flight per shard (``K``: its key); answers taken as they come.

    ``issue(key)`` sends a pull and returns its reference (``R``); ``wait(refs, timeout_s)``
    returns the first of ``refs`` that is ready, or None after ``timeout_s``; ``clock``: seconds,
    monotonic (the ``until`` of :meth:`round` is on it).
    """

    def __init__(
        self,
        issue: Callable[[K], R],
        wait: Callable[[list[R], float], R | None],
        clock: Callable[[], float],
    ) -> None:
        self._issue = issue
        self._wait = wait
        self._clock = clock
        self._in_flight: dict[K, R] = {}

    def round(self, keys: Iterable[K], until: float) -> Iterator[tuple[K, R]]:
        """Pull each of ``keys`` that has no pull in flight, then yield ``(key, reference)``
        for each answer as it arrives, until none is in flight or the clock reaches ``until``
        (answers already there are still taken)."""
        for key in keys:
            if key not in self._in_flight:
                self._in_flight[key] = self._issue(key)
        while self._in_flight:
            ready = self._wait(list(self._in_flight.values()), max(0.0, until - self._clock()))
            if ready is None:
                return
            key = next(key for key, ref in self._in_flight.items() if ref == ready)
            del self._in_flight[key]
            yield key, ready

    def in_flight(self) -> list[K]:
        """The keys whose pull is not answered yet (after a round: those that missed it)."""
        return list(self._in_flight)

    def forget(self, key: K) -> None:
        """Stop waiting for ``key``'s pull (its shard is lost or done)."""
        self._in_flight.pop(key, None)
