"""A request retried after HTTP 429/503 (``client.max_retries``) is recorded as its last attempt:
on both paths (plain http's ``_Exchange``, https's aiohttp ``_run_item``), against a loopback
server that answers the first POST 429 (``Retry-After: 0``) and never answers the second, the
row's ``http_status`` and ``last_byte_at`` are none (the last attempt got nothing), not the
first attempt's 429 and its bytes.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker, _Route, _sent_slot

_429 = (
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
    b'Retry-After: 0\r\nContent-Length: 13\r\n\r\n{"error": {}}'
)


async def read_request(reader: asyncio.StreamReader) -> None:
    """Read one HTTP request (its head and its Content-Length body) off ``reader``."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)


class Server:
    """Answers its first POST 429 and holds every later one unanswered (connection open)."""

    def __init__(self) -> None:
        self.posts = 0
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                await read_request(reader)
                self.posts += 1
                if self.posts == 1:
                    writer.write(_429)
                    await writer.drain()
        except (asyncio.CancelledError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()  # (the client left, or the test ended)


async def serve() -> tuple[Server, asyncio.Server, int]:
    srv = Server()
    listener = await asyncio.start_server(srv.handle, "127.0.0.1", 0)
    return srv, listener, listener.sockets[0].getsockname()[1]


def worker(port: int) -> tuple[Worker, list[Result]]:
    left, right = socket.socketpair()
    settings = WorkerSettings(
        endpoint=f"http://127.0.0.1:{port}/v1/chat/completions",
        max_retries=2,
        request_timeout_s=0.5,
    )
    w = Worker(0, settings, left)
    results: list[Result] = []
    emitted = asyncio.Event()

    def emit(result: Result) -> None:
        results.append(result)
        emitted.set()

    w._emit = emit  # type: ignore[method-assign]
    w._emitted = emitted  # type: ignore[attr-defined]
    w._loop = asyncio.get_running_loop()
    w._sockets = (left, right)  # type: ignore[attr-defined]
    return w, results


async def run(path: str) -> tuple[Server, list[Result]]:
    """One request on ``path`` (http1 or aiohttp) against the server: the server, its Result."""
    srv, listener, port = await serve()
    w, results = worker(port)
    route: _Route = w._routes[0]
    item = WorkItem(1, [("user", "hi")], 3, 0)
    try:
        if path == "http1":
            await route.open()
            w._start_http1(route, item, 0)
            await asyncio.wait_for(w._emitted.wait(), 5)  # type: ignore[attr-defined]
        else:
            from veeksha.dispatch.aiohttp_client import make_session

            route.session = make_session(w.settings, _sent_slot)  # (https's path, over http)
            await w._run_item(item, 0, route)
    finally:
        await route.close()
        for writer in srv.writers:
            writer.close()
        listener.close()
        for s in w._sockets:  # type: ignore[attr-defined]
            s.close()
    return srv, results


@pytest.mark.parametrize("path", ["http1", "aiohttp"])
def test_a_retry_that_times_out_keeps_nothing_of_the_earlier_attempt(path: str) -> None:
    srv, results = asyncio.run(run(path))
    assert_timed_out_unanswered(results, srv)


def assert_timed_out_unanswered(results: list[Result], srv: Server) -> None:
    assert srv.posts == 2  # the 429, then the retry the server holds
    (res,) = results
    assert (res.status, res.error_kind, res.retries) == ("timeout", "timeout", 1)
    assert res.http_status == 0  # (the row's null): not the first attempt's 429
    assert res.last_byte_at_ns == 0  # no byte of the last attempt came
    assert res.first_chunk_at_ns is None
    assert res.chunk_times_ns == []


def test_a_retry_wait_never_ends_before_its_deadline() -> None:
    """The loop's timers (uvloop's, on a millisecond clock) may fire up to a millisecond early;
    a server's Retry-After is a minimum, so the wait is held to the monotonic clock (CI saw a
    retry 78 µs before its 100 ms)."""
    import asyncio
    import time

    import uvloop

    from veeksha.dispatch.worker import _sleep_until

    async def waits() -> list[int]:
        lateness = []
        for _ in range(40):
            due = time.monotonic_ns() + 3_000_000
            await _sleep_until(due)
            lateness.append(time.monotonic_ns() - due)
        return lateness

    assert min(uvloop.run(waits())) >= 0
    assert min(asyncio.run(waits())) >= 0
