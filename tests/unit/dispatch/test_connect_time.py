"""A request's connection set-up (``Result.connect_ns``) on both paths (plain http's
``Http1Pool``, https's aiohttp connector, here over http), against loopback servers in the test:
measured exactly for the requests that opened a connection, 0 for those sent on a kept-alive one,
and a slow connect (a SYN the kernel dropped on a full accept queue, sent again ~1 s later) is
the set-up's, not a delay of the worker's own between taking the request up and writing it.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

from tests.unit.dispatch.test_retried_attempts import read_request
from veeksha.dispatch.http1 import Exchange, Http1Pool, _Conn
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker, _Exchange, _Route, _sent_slot

ANSWER = (
    b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},'
    b' "finish_reason": "stop"}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}'
)
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (
    len(ANSWER),
    ANSWER,
)
PATHS = ["http1", "aiohttp"]


class Server:
    """Answers every POST with ``RESPONSE`` after ``delay_s``, keeping connections alive;
    counts the connections it accepted."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.accepted = 0
        self.delay_s = delay_s
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.writers.append(writer)
        try:
            while True:
                await read_request(reader)
                await asyncio.sleep(self.delay_s)
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.CancelledError, asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class Client:
    """A ``Worker`` in this loop, its Results collected; requests go on ``path`` to ``port``
    (no pre-warmed connection: each connection is opened by a request)."""

    def __init__(self, path: str, port: int) -> None:
        self.path = path
        self.sockets = socket.socketpair()
        settings = WorkerSettings(
            endpoint=f"http://127.0.0.1:{port}/v1/chat/completions",
            stream=False,
            request_timeout_s=30,
        )
        self.worker = w = Worker(0, settings, self.sockets[0])
        self.results: list[Result] = []
        self.emitted = asyncio.Event()

        def emit(result: Result) -> None:
            self.results.append(result)
            self.emitted.set()

        w._emit = emit  # type: ignore[method-assign]
        w._loop = asyncio.get_running_loop()
        self.route: _Route = w._routes[0]
        if path == "http1":
            self.route.bind(Http1Pool(settings.endpoint, {}))
        else:
            from veeksha.dispatch.aiohttp_client import make_session

            self.route.session = make_session(settings, _sent_slot)
        self.next_id = 0

    async def send(self, count: int) -> list[Result]:
        """``count`` requests at once; their Results, in the order they were sent."""
        ids = list(range(self.next_id, self.next_id + count))
        self.next_id += count
        items = [WorkItem(i, [("user", "hi")], 1, 0) for i in ids]
        if self.path == "http1":
            for item in items:
                self.worker._start_http1(self.route, item, time.monotonic_ns())
            while not set(ids) <= {r.request_id for r in self.results}:
                self.emitted.clear()
                await self.emitted.wait()
        else:
            await asyncio.gather(
                *(self.worker._run_item(item, time.monotonic_ns(), self.route) for item in items)
            )
        done = {r.request_id: r for r in self.results}
        return [done[i] for i in ids]

    async def close(self) -> None:
        await self.route.close()
        for s in self.sockets:
            s.close()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 60))


@pytest.mark.parametrize("path", PATHS)
def test_connect_time_is_set_exactly_on_the_requests_that_opened_a_connection(path: str) -> None:
    """One request (opens one), one after it (reuses it), then two at once (one reuses, one
    opens another): the requests with a set-up are as many as the server's connections, and
    each set-up lies between the request's take-up and its write."""

    async def test() -> None:
        server = Server(delay_s=0.05)  # (the two at once are in flight together)
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        client = Client(path, listener.sockets[0].getsockname()[1])
        try:
            (first,) = await client.send(1)
            (second,) = await client.send(1)
            pair = await client.send(2)
        finally:
            await client.close()
            server.close()
            listener.close()
        results = [first, second, *pair]
        assert [r.status for r in results] == ["ok"] * 4, [r.error_message for r in results]
        assert first.connect_ns > 0
        assert second.connect_ns == 0  # the kept-alive connection: nothing measured
        assert sorted(r.connect_ns > 0 for r in pair) == [False, True]
        assert server.accepted == 2 == sum(r.connect_ns > 0 for r in results)
        for r in results:
            assert r.received_at_ns + r.connect_ns <= r.sent_at_ns

    run(test)


@pytest.mark.parametrize("path", PATHS)
def test_a_slow_connect_is_the_set_up_not_the_workers_delay(path: str) -> None:
    """A listener whose accept queue (backlog 0: one connection) is full drops the worker's
    SYN; the kernel sends it again after its initial retransmission timeout (1 s), by when
    the server accepts. The ~1 s is the request's ``connect_ns``, and its take-up to write
    less the set-up is the worker's own few milliseconds (the old ``generator_delay`` held
    the whole second)."""

    async def test() -> None:
        server = Server()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(0)
        port = sock.getsockname()[1]
        filler = socket.create_connection(("127.0.0.1", port))  # fills the accept queue
        client = Client(path, port)
        listener: asyncio.Server | None = None

        async def accept_late() -> asyncio.Server:
            await asyncio.sleep(0.3)  # (after the worker's first SYN, before its second)
            # (listening again with asyncio's backlog: its accept loop takes up to that many)
            return await asyncio.start_server(server.handle, sock=sock)

        try:
            late = asyncio.ensure_future(accept_late())
            (result,) = await client.send(1)
            listener = await late
        finally:
            await client.close()
            server.close()
            filler.close()
            if listener is not None:
                listener.close()
            sock.close()
        assert result.status == "ok", result.error_message
        assert 0.9e9 <= result.connect_ns <= 10e9  # the retransmitted SYN's second
        worker_own = result.sent_at_ns - result.received_at_ns - result.connect_ns
        assert 0 <= worker_own < 0.3e9  # (generous: the set-up took the second, not the worker)

    run(test)


class ConnectRecorder(Exchange):
    __slots__ = ("calls",)

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def on_connected(self, connect_ns: int) -> None:
        self.calls.append(("connected", connect_ns))

    def on_sent(self, t_ns: int) -> None:
        self.calls.append(("sent", t_ns))


class _Transport:
    def __init__(self, conn: _Conn) -> None:
        self.conn = conn

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        self.conn.connection_lost(None)


def test_the_pool_times_each_connection_it_opens_on_its_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a fake clock: an idle connection's request is not told anything; a request that
    opens one is told the set-up (from the connecting task's first step to the connection
    held), before it is written; a stale keep-alive re-send's new connection is reported too
    (the worker's exchange keeps it out of ``connect_ns``: it comes after ``sent_at``)."""
    clock = [1_000]
    monkeypatch.setattr("veeksha.dispatch.http1._monotonic_ns", lambda: clock[0])

    async def scenario() -> None:
        pool = Http1Pool("http://127.0.0.1:9/v1/completions", {})
        idle = _Conn(pool)
        idle.connection_made(_Transport(idle))  # type: ignore[arg-type]
        pool._idle.append(idle)

        async def connect() -> _Conn:
            clock[0] += 25_000_000  # the handshake
            conn = _Conn(pool)
            conn.connection_made(_Transport(conn))  # type: ignore[arg-type]
            return conn

        pool._connect = connect  # type: ignore[method-assign]
        reused, opened = ConnectRecorder(), ConnectRecorder()
        pool.send(b"{}", reused)
        pool.send(b"{}", opened)
        await asyncio.sleep(0)
        assert reused.calls == [("sent", 1_000)]
        assert opened.calls == [("connected", 25_000_000), ("sent", 25_001_000)]
        # the reused connection closes before any byte of its answer: re-sent on a new one
        clock[0] += 7
        idle.transport.close()  # type: ignore[union-attr]
        await asyncio.sleep(0)
        assert reused.calls[1:] == [("connected", 25_000_000), ("sent", 50_001_007)]

    asyncio.run(scenario())


def test_the_exchange_keeps_only_the_set_up_before_its_first_write() -> None:
    """``connect_ns`` is the set-up ``sent_at`` waited for: a later attempt's connection (a
    stale re-send, a 429/503 retry) is inside the latencies, so it is not taken."""
    a, b = socket.socketpair()
    try:
        worker = Worker(0, WorkerSettings(endpoint="http://127.0.0.1:9/v1/completions"), a)
        pool = Http1Pool("http://127.0.0.1:9/v1/completions", {})
        first = _Exchange(worker, pool, WorkItem(0, [("user", "hi")], 1, 0), 0)
        first.on_connected(30_000_000)
        first.on_sent(40_000_000)
        first.on_connected(20_000_000)  # a re-send's
        first.on_sent(90_000_000)
        assert (first.connect_ns, first.sent_at) == (30_000_000, 40_000_000)
        later = _Exchange(worker, pool, WorkItem(1, [("user", "hi")], 1, 0), 0)
        later.on_sent(40_000_000)
        later.on_connected(20_000_000)
        assert later.connect_ns == 0
    finally:
        a.close()
        b.close()
