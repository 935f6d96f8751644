"""The framed link between main and a worker, over a real Unix socket pair."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import uvloop

from veeksha.dispatch.channel import (
    Link,
    encode_frame,
    from_worker_decoder,
    socket_pair,
    to_worker_decoder,
)
from veeksha.dispatch.messages import FromWorker, Result, Stop, ToWorker, WorkItem


def run(coro):  # type: ignore[no-untyped-def]
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def items(n: int, text: str = "hello") -> list[WorkItem]:
    return [WorkItem(i, [("user", text)], 8, 1_000 + i, not_before_ns=i) for i in range(n)]


def result(i: int) -> Result:
    return Result(i, 0, "ok", 1, 2, 3, chunk_times_ns=[4, 5], output_text="w0 w1")


def test_frames_cut_anywhere_arrive_whole_and_in_order() -> None:
    ours, theirs = socket_pair()
    got: list[list[ToWorker]] = []
    link: Link[ToWorker] = Link(theirs, to_worker_decoder(), got.append)
    first, second = items(3), [*items(2, "again"), Stop(1.5)]
    data = bytes(encode_frame(first)) + bytes(encode_frame(second))
    received: list[ToWorker] = []
    for k in range(len(data)):  # one byte at a time: every cut point of both frames
        ours.send(data[k : k + 1])
        received.extend(link.drain())
    assert received == [*first, *second]
    assert got == []  # drain returns; only the reader callback calls on_batch
    ours.close()
    link.close()


def test_results_sent_from_one_end_reach_on_batch_at_the_other() -> None:
    async def scenario() -> list[FromWorker]:
        loop = asyncio.get_running_loop()
        a, b = socket_pair()
        got: list[FromWorker] = []
        done = loop.create_future()

        def on_batch(batch: list[FromWorker]) -> None:
            got.extend(batch)
            if len(got) == 5 and not done.done():
                done.set_result(None)

        sender: Link[ToWorker] = Link(a, to_worker_decoder(), lambda _: None)
        receiver: Link[FromWorker] = Link(b, from_worker_decoder(), on_batch)
        sender.start(loop)
        receiver.start(loop)
        sender.send([result(0), result(1)])
        sender.send([result(2)])
        sender.send([result(3), result(4)])
        await asyncio.wait_for(done, 5)
        sender.close()
        receiver.close()
        return got

    got = run(scenario())
    assert [r.request_id for r in got if isinstance(r, Result)] == [0, 1, 2, 3, 4]


def test_a_frame_larger_than_the_socket_buffer_is_queued_not_blocked_nor_lost() -> None:
    async def scenario() -> tuple[int, list[ToWorker]]:
        loop = asyncio.get_running_loop()
        a, b = socket_pair()
        got: list[ToWorker] = []
        done = loop.create_future()
        big = items(1, "x" * (8 << 20))  # 8 MiB: far beyond the kernel's buffer

        def on_batch(batch: list[ToWorker]) -> None:
            got.extend(batch)
            if len(got) == 2 and not done.done():
                done.set_result(None)

        sender: Link[ToWorker] = Link(a, to_worker_decoder(), lambda _: None)
        sender.start(loop)
        sender.send(big)  # returns at once with most of the frame queued
        queued = sender.pending_bytes
        sender.send([Stop(0.0)])  # queued behind it: order is kept
        receiver: Link[ToWorker] = Link(b, to_worker_decoder(), on_batch)
        receiver.start(loop)
        await asyncio.wait_for(done, 10)
        assert sender.pending_bytes == 0
        sender.close()
        receiver.close()
        return queued, got

    queued, got = run(scenario())
    assert queued > 0
    assert isinstance(got[0], WorkItem)
    assert len(got[0].messages[0][1]) == 8 << 20
    assert got[1] == Stop(0.0)


def test_end_of_stream_is_reported_once_after_what_was_buffered() -> None:
    ours, theirs = socket_pair()
    closed: list[bool] = []
    link: Link[ToWorker] = Link(
        theirs, to_worker_decoder(), lambda _: None, lambda: closed.append(True)
    )
    ours.sendall(encode_frame(items(2)))
    ours.close()
    assert [m.request_id for m in link.drain() if isinstance(m, WorkItem)] == [0, 1]
    assert closed == [True]
    assert link.closed
    assert link.drain() == []
    link.send(items(1))  # to a closed link: dropped, no error
    assert closed == [True]
    link.close()


def test_send_to_a_peer_that_is_gone_does_not_raise() -> None:
    ours, theirs = socket_pair()
    theirs.close()
    link: Link[ToWorker] = Link(ours, to_worker_decoder(), lambda _: None)
    link.send(items(3))
    link.send(items(3))
    link.close()


def test_a_corrupt_frame_raises_a_decode_error() -> None:
    ours, theirs = socket_pair()
    link: Link[ToWorker] = Link(theirs, to_worker_decoder(), lambda _: None)
    ours.sendall(len(b"\xc1junk").to_bytes(4, "little") + b"\xc1junk")
    with pytest.raises(msgspec.DecodeError):
        link.drain()
    ours.close()
    link.close()
