"""The bulk link (deferrable Results) and the pool's reading of it, on a fake loop clock."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from veeksha.dispatch.channel import (
    Link,
    encode_frame,
    from_worker_decoder,
    packet_pair,
    send_packet,
    socket_pair,
)
from veeksha.dispatch.messages import FromWorker, Result, WorkItem
from veeksha.dispatch.pool import BULK_READ_INTERVAL_S, WorkerPool, _Handle
from veeksha.dispatch.settings import WorkerSettings

H = BULK_READ_INTERVAL_S


class _Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """What the pool asks of its loop for the bulk cadence: ``time`` and ``call_at``."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback)
        self.timers.append(timer)
        return timer

    def is_closed(self) -> bool:
        return False

    def fire(self, at: float) -> None:
        """Advance to ``at``, firing each timer due by then."""
        self.now = at
        while due := [t for t in self.timers if not t.cancelled and t.when <= at]:
            self.timers.remove(due[0])
            due[0].callback()

    def pending(self) -> list[float]:
        return [t.when for t in self.timers if not t.cancelled]


def _ok(request_id: int) -> Result:
    return Result(request_id, 0, "ok", 1, 2, 3, output_text="a")


def _item(request_id: int, deferrable: bool) -> WorkItem:
    return WorkItem(request_id, [("user", "x")], 4, 1, deferrable=deferrable)


class Bench:
    """A pool with one fake worker: its two links are real socket pairs; no process."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.pool = WorkerPool(WorkerSettings(endpoint="http://127.0.0.1:9/v1"), 1, [], self._got)
        self.loop = FakeLoop()
        self.pool._loop = self.loop  # type: ignore[assignment]
        ours, self.theirs = socket_pair()
        bulk, self.theirs_bulk = packet_pair()
        self.theirs_bulk.setblocking(False)
        link: Link[FromWorker] = Link(ours, from_worker_decoder(), self.pool._on_batch)
        bulk_link: Link[FromWorker] = Link(bulk, from_worker_decoder(), self.pool._on_batch)
        self.handle = h = _Handle(0, 0, [], link, bulk_link)
        h.sender = link
        self.pool._handles[0] = h
        self.pool._live.append(h)
        self.pool._ready.append(h)

    def _got(self, results: list[Result]) -> None:
        self.batches.append([r.request_id for r in results])

    def submit(self, request_id: int, deferrable: bool = True) -> None:
        self.pool.submit(_item(request_id, deferrable), flush=False)

    def answer_on_bulk(self, *ids: int) -> None:
        assert send_packet(self.theirs_bulk, [_ok(i) for i in ids])

    def close(self) -> None:
        self.pool._close()
        self.theirs.close()
        self.theirs_bulk.close()


def _on_bench(test: Callable[[Bench], None]) -> Callable[[], None]:
    """``test`` as a test run on a fresh Bench inside a running loop (a _Handle makes its
    futures there)."""

    def run() -> None:
        async def body() -> None:
            b = Bench()
            try:
                test(b)
            finally:
                b.close()

        asyncio.run(body())

    run.__name__ = run.__qualname__ = test.__name__  # (not wraps: pytest would ask for ``b``)
    run.__doc__ = test.__doc__
    return run


@_on_bench
def test_the_bulk_link_is_read_when_awake_and_at_most_an_interval_after_the_last_read(
    b: Bench,
) -> None:
    b.submit(1)
    assert b.loop.pending() == [H]  # a deferrable request in flight: the timer
    b.answer_on_bulk(1)
    b.loop.now = 0.004
    b.pool.collect()  # awake anyway (an arrival), but read 4 ms ago: left for later
    assert b.batches == []
    b.loop.now = 0.016
    b.pool.collect()  # 16 ms: taken now, at no wake-up of its own
    assert b.batches == [[1]]
    assert b.loop.pending() == [0.016 + H]  # pushed back: H after the last read
    b.submit(2)
    b.answer_on_bulk(2)
    b.loop.now = 0.017
    b.pool.collect()
    assert b.batches == [[1]]
    assert b.loop.pending() == [0.016 + H]  # (just moved: left alone)
    b.loop.fire(0.016 + H)  # no read in between: the timer reads
    assert b.batches == [[1], [2]]
    assert b.loop.pending() == []  # nothing deferrable in flight: no timer
    b.loop.now = 1.0
    b.pool.collect()  # (no read at all then)
    assert b.batches == [[1], [2]]
    b.submit(4, deferrable=False)
    assert b.loop.pending() == []
    assert b.pool.in_flight == 1


@_on_bench
def test_the_timer_comes_back_while_a_deferrable_request_is_in_flight(b: Bench) -> None:
    b.submit(1)
    b.submit(2)
    b.answer_on_bulk(1)
    b.loop.fire(H)
    assert b.batches == [[1]]
    assert b.loop.pending() == [2 * H]
    b.answer_on_bulk(2)
    b.loop.fire(2 * H)
    assert b.batches == [[1], [2]]
    assert b.loop.pending() == []


@_on_bench
def test_a_normal_batch_brings_what_waits_in_the_bulk_link_first_in_one_batch(b: Bench) -> None:
    b.submit(1)
    b.submit(2, deferrable=False)
    b.submit(3)
    b.answer_on_bulk(3)
    b.answer_on_bulk(1)
    b.theirs.sendall(encode_frame([Result(2, 0, "error", 1, 2, 3, error_kind="x")]))
    b.loop.now = 0.001
    b.handle.link._on_readable()
    assert b.batches == [[3, 1, 2]]
    assert b.pool.in_flight == 0
    assert not b.handle.deferred


@_on_bench
def test_a_late_or_repeated_bulk_result_is_delivered_once(b: Bench) -> None:
    b.submit(1)
    b.answer_on_bulk(1, 1, 99)  # (99: never submitted)
    b.loop.now = 1.0
    b.pool.collect()
    assert b.batches == [[1]]


def test_send_packet_is_whole_or_nothing() -> None:
    ours, theirs = packet_pair()
    theirs.setblocking(False)
    try:
        sent = 0
        while send_packet(theirs, [_ok(i) for i in range(50)]):
            sent += 1
        assert sent > 10  # a large buffer: many frames wait unread
        link: Link[Any] = Link(ours, from_worker_decoder(), lambda batch: None)
        got = link.drain()
        assert len(got) == 50 * sent  # every frame whole; the refused one left nothing
        big = [Result(0, 0, "ok", 1, 2, 3, output_text="x" * (1 << 18))]
        assert not send_packet(theirs, big)  # larger than a read: the normal link takes it
    finally:
        ours.close()
        theirs.close()


def test_what_a_dead_peer_sent_stays_readable() -> None:
    ours, theirs = packet_pair()
    theirs.setblocking(False)
    assert send_packet(theirs, [_ok(7)])
    theirs.close()
    assert ours.type == socket.SOCK_SEQPACKET
    link: Link[Any] = Link(ours, from_worker_decoder(), lambda batch: None)
    try:
        assert [r.request_id for r in link.drain()] == [7]
        assert link.closed
    finally:
        link.close()
