"""The pre-departure pool: ready requests waiting for an in-flight slot of their client.

A client with ``max_in_flight`` (the server's ``max_num_seqs``, say) has that many slots. A
ready request of a capped client takes a free slot at once, or waits in its client's heap;
another client's requests never wait behind it (one heap per client, and only clients with a
free slot are served). Which waiting request gets a freed slot is the ``runtime.priority``
policy's key (smallest first, ``seq`` breaking ties in arrival order):

- ``fifo``: ``(ready_at,)``;
- ``progress``: ``(0 if re-prompt else 1, −completed rounds of its session, session start,
  its round, ready_at)``: re-prompts first, then sessions further along, then older sessions,
  then lower rounds (a node's round: its agent round, else its depth in the graph);
- ``node``: ``(−priority, ready_at)``: the node's ``priority`` field, higher first.

Pure: no clock, no I/O. Worked example (one client, cap 1, fifo)::

    pool = SlotPool([1])
    pool.offer(0, (5,), "a")   -> True      # a slot was free: "a" goes now
    pool.offer(0, (3,), "b")   -> False     # waits
    pool.offer(0, (4,), "c")   -> False
    pool.release(0); pool.take() -> [(0, "b")]   # the freed slot goes to the smallest key
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count
from typing import Any, Generic, TypeVar

from veeksha.generate.spec import NodeSpec

__all__ = ["PRIORITIES", "SlotPool", "node_rounds", "progress_key"]

T = TypeVar("T")

PRIORITIES = ("fifo", "progress", "node")


class SlotPool(Generic[T]):
    """Per-client slot counts and heaps of waiting items; ``caps[c]`` None: no cap."""

    __slots__ = ("_heaps", "_seq", "caps", "in_flight", "peak")

    def __init__(self, caps: list[int | None]) -> None:
        self.caps = caps
        self.in_flight = [0] * len(caps)  # slots taken, per capped client
        self.peak = [0] * len(caps)
        self._heaps: list[list[tuple[Any, int, T]]] = [[] for _ in caps]
        self._seq = count()

    def capped(self, client: int) -> bool:
        return self.caps[client] is not None

    def offer(self, client: int, key: tuple[Any, ...], item: T) -> bool:
        """A ready item of a capped client: True if it took a free slot (send it now, and
        ``release`` when it is done), else it waits for ``take``."""
        if self.try_take(client):
            return True
        self.wait(client, key, item)
        return False

    def try_take(self, client: int) -> bool:
        """Take a free slot of ``client`` if one is free and nothing waits for it."""
        cap = self.caps[client]
        assert cap is not None
        if not self._heaps[client] and self.in_flight[client] < cap:
            self._taken(client)
            return True
        return False

    def wait(self, client: int, key: tuple[Any, ...], item: T) -> None:
        """``item`` waits in its client's heap (``try_take`` found no slot)."""
        heapq.heappush(self._heaps[client], (key, next(self._seq), item))

    def release(self, client: int) -> None:
        """A request of a capped client ended (or never went): its slot is free."""
        if self.in_flight[client] > 0:
            self.in_flight[client] -= 1

    def take(self, alive: Callable[[T], bool] | None = None) -> list[tuple[int, T]]:
        """Waiting items that now have a slot, by client and key; each took its slot. Items
        for which ``alive`` says False (cancelled while waiting) are dropped, taking none."""
        out: list[tuple[int, T]] = []
        for client, heap in enumerate(self._heaps):
            if not heap:
                continue
            cap = self.caps[client]
            assert cap is not None
            while heap and self.in_flight[client] < cap:
                item = heapq.heappop(heap)[2]
                if alive is not None and not alive(item):
                    continue
                self._taken(client)
                out.append((client, item))
        return out

    def waiting(self, client: int) -> int:
        """Items of ``client`` waiting for a slot (stale ones included until taken)."""
        return len(self._heaps[client])

    def drain(self) -> list[T]:
        """Forget every waiting item (the run stops); returns them."""
        out = [entry[2] for heap in self._heaps for entry in heap]
        for heap in self._heaps:
            heap.clear()
        return out

    def _taken(self, client: int) -> None:
        taken = self.in_flight[client] = self.in_flight[client] + 1
        self.peak[client] = max(self.peak[client], taken)


def node_rounds(nodes: list[NodeSpec]) -> list[int]:
    """Each node's round: its ``round`` when the graph sets one, else its depth (roots 0)."""
    rounds: list[int] = []
    for node in nodes:
        if node.round >= 0:
            rounds.append(node.round)
        else:
            rounds.append(max((rounds[p] for p in node.parents), default=-1) + 1)
    return rounds


def progress_key(
    rounds: list[int], done: list[bool], node_id: int, started_at_ns: int, reprompt: bool
) -> tuple[int, int, int, int]:
    """The ``progress`` key's leading part for ``node_id`` of a session whose nodes have
    ``rounds`` and are ``done`` or not: (re-prompt first, more completed rounds first, older
    session first, lower round first). A session's completed rounds are the rounds below its
    lowest round with an unfinished node."""
    lowest_open = min(
        (r for r, finished in zip(rounds, done, strict=True) if not finished), default=0
    )
    return (0 if reprompt else 1, -lowest_open, started_at_ns, rounds[node_id])
