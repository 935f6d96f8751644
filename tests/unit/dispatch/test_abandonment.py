"""A request its user abandons (``WorkItem.abandon_after_ns``), on both paths (plain http's
``Http1Pool``, https's aiohttp, here over http), against a loopback server in the test that
streams a chunk every 20 ms: the worker drops the connection no sooner than the delay after
``sent_at`` (the server sees it go before its answer ends), and the Result is ``abandoned`` with
the chunks that came; a request answered sooner is ``ok``; a delay of 0 still writes the whole
request first; a request without one is never abandoned; on plain http the connection closed
for it is replaced at once, so the next request does not open one."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from tests.unit.dispatch.test_retried_attempts import read_request
from veeksha.dispatch.http1 import Http1Pool
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker, _Route, _sent_slot

CHUNKS = 15
GAP_S = 0.02
PATHS = ["http1", "aiohttp"]


def _event(text: str) -> bytes:
    data = b'data: {"choices": [{"index": 0, "delta": {"content": "%b"}}]}\n\n' % text.encode()
    return b"%x\r\n%b\r\n" % (len(data), data)


class Server:
    """Streams ``CHUNKS`` events ``GAP_S`` apart to each POST; counts the connections, the
    requests it read whole, the answers it finished and those whose client went away first."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        self.finished = 0
        self.gone = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await read_request(reader)
        except asyncio.IncompleteReadError:  # (an idle connection closed: no request)
            writer.close()
            return
        try:
            self.requests += 1
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            for i in range(CHUNKS):
                await asyncio.sleep(GAP_S)
                if reader.at_eof():  # (the client closed its side)
                    raise ConnectionResetError
                writer.write(_event(f"t{i} "))
                await writer.drain()
            writer.write(_event("") + b"0\r\n\r\n")
            await writer.drain()
            self.finished += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            self.gone += 1
        finally:
            writer.close()


async def _send(
    path: str, items: list[WorkItem], one_by_one: bool = False
) -> tuple[list[Result], Server]:
    """``items`` sent by a worker on ``path``: at once, or (http1) ``one_by_one``, each after
    the one before it ended and 50 ms more; their Results, in id order, and the server."""
    server = Server()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    settings = WorkerSettings(
        endpoint=f"http://127.0.0.1:{port}/v1/chat/completions",
        stream=True,
        request_timeout_s=30,
    )
    sockets = socket.socketpair()
    worker = Worker(0, settings, sockets[0])
    results: list[Result] = []
    emitted = asyncio.Event()

    def emit(result: Result) -> None:
        results.append(result)
        emitted.set()

    worker._emit = emit  # type: ignore[method-assign]
    worker._loop = asyncio.get_running_loop()
    route: _Route = worker._routes[0]
    if path == "http1":
        route.bind(Http1Pool(settings.endpoint, {}))
        for item in items:
            emitted.clear()
            worker._start_http1(route, item, time.monotonic_ns())
            if one_by_one:
                await emitted.wait()
                await asyncio.sleep(0.05)  # (a connection closed for it is replaced meanwhile)
        while len(results) < len(items):
            emitted.clear()
            await emitted.wait()
    else:
        from veeksha.dispatch.aiohttp_client import make_session

        route.session = make_session(settings, _sent_slot)
        await asyncio.gather(*(worker._run_item(i, time.monotonic_ns(), route) for i in items))
    await asyncio.sleep(2 * GAP_S)  # (the server's next write finds the connection gone)
    await route.close()
    listener.close()
    for s in sockets:
        s.close()
    return sorted(results, key=lambda r: r.request_id), server


def _item(request_id: int, abandon_after_s: float | None) -> WorkItem:
    item = WorkItem(request_id, [("user", "hi")], CHUNKS, 0)
    if abandon_after_s is not None:
        item.abandon_after_ns = round(abandon_after_s * 1e9)
    return item


@pytest.mark.parametrize("path", PATHS)
def test_a_request_is_abandoned_after_its_delay_and_the_server_sees_it_go(path: str) -> None:
    after_s = 0.1  # (the answer takes 0.3 s)
    results, server = asyncio.run(
        asyncio.wait_for(_send(path, [_item(0, after_s), _item(1, None), _item(2, 5.0)]), 30)
    )
    abandoned, plain, late = results
    assert abandoned.status == "abandoned"
    assert abandoned.error_kind == "abandoned"
    assert abandoned.error_message == "abandoned by its user 0.1 s after it was sent"
    assert abandoned.completed_at_ns - abandoned.sent_at_ns >= after_s * 1e9  # never early
    assert 0 < len(abandoned.chunk_times_ns) < CHUNKS  # the chunks before it, not the rest
    assert abandoned.first_chunk_at_ns is not None
    assert abandoned.output_text.startswith("t0 ")
    assert all(t <= abandoned.completed_at_ns for t in abandoned.chunk_times_ns)
    # without a delay, or with one longer than the answer: answered in full
    for result in (plain, late):
        assert result.status == "ok"
        assert len(result.chunk_times_ns) == CHUNKS
    assert server.requests == 3
    assert server.finished == 2
    assert server.gone == 1


@pytest.mark.parametrize("path", PATHS)
def test_a_delay_of_zero_writes_the_whole_request_then_goes(path: str) -> None:
    results, server = asyncio.run(asyncio.wait_for(_send(path, [_item(0, 0.0)]), 30))
    (result,) = results
    assert result.status == "abandoned"
    assert result.chunk_times_ns == []
    assert result.completed_at_ns >= result.sent_at_ns
    assert server.requests == 1  # (the server read it whole)
    assert server.finished == 0


def test_the_connection_it_closed_is_replaced_for_the_next_request() -> None:
    items = [_item(0, 0.05), _item(1, None)]
    sent = _send("http1", items, one_by_one=True)
    (abandoned, after), server = asyncio.run(asyncio.wait_for(sent, 30))
    assert abandoned.status == "abandoned"
    assert abandoned.connect_ns > 0  # (no connection was idle: it opened one)
    assert after.status == "ok"
    assert after.connect_ns == 0  # sent on the replacement, opened before it came
    assert server.connections == 2
