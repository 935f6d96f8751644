"""Http1Pool and its connections on fake transports: framing, callbacks, reuse, retry, abort."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from veeksha.dispatch.http1 import ConnectFailed, Exchange, Http1Pool, _Conn

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class FakeTransport:
    def __init__(self, conn: _Conn) -> None:
        self.conn = conn
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.conn.connection_lost(None)


class Recorder(Exchange):
    __slots__ = ("calls",)

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, ...]] = []

    def on_sent(self, t_ns: int) -> None:
        self.calls.append(("sent",))

    def on_head(self, status: int, headers: dict[bytes, bytes]) -> None:
        self.calls.append(("head", status))

    def on_data(self, data: bytes, t_ns: int) -> None:
        self.calls.append(("data", data, t_ns))

    def on_end(self, exc: BaseException | None) -> None:
        self.calls.append(("end", exc))

    def body(self) -> bytes:
        return b"".join(c[1] for c in self.calls if c[0] == "data")

    def ended(self) -> BaseException | None:
        ends = [c for c in self.calls if c[0] == "end"]
        assert len(ends) == 1, self.calls
        return ends[0][1]


def pool_with_idle(count: int = 1, limit: int = 0) -> tuple[Http1Pool, list[_Conn]]:
    pool = Http1Pool("http://127.0.0.1:9/v1/completions", {"X-Test": "1"}, limit)
    conns = []
    for _ in range(count):
        conn = _Conn(pool)
        conn.connection_made(FakeTransport(conn))  # type: ignore[arg-type]
        pool._idle.append(conn)
        conns.append(conn)
    return pool, conns


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def transport(conn: _Conn) -> FakeTransport:
    assert isinstance(conn.transport, FakeTransport)
    return conn.transport


def test_one_write_per_request_then_reuse() -> None:
    pool, (conn,) = pool_with_idle()
    first = Recorder()
    pool.send(b'{"x":1}', first)
    (payload,) = transport(conn).written
    head = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:9\r\nX-Test: 1\r\n"
    assert payload.startswith(head)
    assert payload.endswith(b"Content-Length: 7\r\n\r\n" + b'{"x":1}')
    conn.data_received(HEAD + chunk(b"data: a\n\n") + b"0\r\n\r\n")
    assert first.calls[:2] == [("sent",), ("head", 200)]
    assert first.calls[2][:2] == ("data", b"data: a\n\n")
    assert first.ended() is None
    assert pool._idle == [conn]
    second = Recorder()
    pool.send(b"{}", second)
    assert len(transport(conn).written) == 2  # the same connection, kept alive


@pytest.mark.parametrize("cut", [1, 5, 40, 90, 95, 99, 101, 104])
def test_chunked_body_split_anywhere(cut: int) -> None:
    pool, (conn,) = pool_with_idle()
    ex = Recorder()
    pool.send(b"{}", ex)
    response = HEAD + chunk(b"data: a\n\n") + chunk(b"data: bc\n\n") + b"0\r\n\r\n"
    cut = min(cut, len(response) - 1)
    conn.data_received(response[:cut])
    conn.data_received(response[cut:])
    assert ex.body() == b"data: a\n\ndata: bc\n\n"
    assert ex.ended() is None


def test_whole_chunks_per_read_each_stamped_with_its_read() -> None:
    pool, (conn,) = pool_with_idle()
    ex = Recorder()
    pool.send(b"{}", ex)
    conn.data_received(HEAD)
    conn.data_received(chunk(b"data: a\n\n"))
    conn.data_received(chunk(b"data: b\n\n") + chunk(b"data: c\n\n"))
    conn.data_received(chunk(b"data: d\n\n") + b"0\r\n\r\n")
    data = [c[1] for c in ex.calls if c[0] == "data"]
    assert data == [b"data: a\n\n", b"data: b\n\ndata: c\n\n", b"data: d\n\n"]
    times = [c[2] for c in ex.calls if c[0] == "data"]
    assert times == sorted(times)
    assert ex.ended() is None


def test_chunk_extension_and_trailers() -> None:
    pool, (conn,) = pool_with_idle()
    ex = Recorder()
    pool.send(b"{}", ex)
    conn.data_received(HEAD + b"3;ext=1\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n")
    assert (ex.body(), ex.ended()) == (b"abc", None)


def test_content_length_and_close_delimited_bodies() -> None:
    pool, (conn,) = pool_with_idle()
    ex = Recorder()
    pool.send(b"{}", ex)
    conn.data_received(b"HTTP/1.1 429 Too Many\r\nContent-Length: 4\r\nRetry-After: 0\r\n\r\nsl")
    conn.data_received(b"ow")
    assert (ex.calls[1], ex.body(), ex.ended()) == (("head", 429), b"slow", None)
    ex2 = Recorder()
    pool.send(b"{}", ex2)
    conn.data_received(b"HTTP/1.0 200 OK\r\n\r\nuntil ")
    conn.data_received(b"close")
    transport(conn).close()
    assert (ex2.body(), ex2.ended()) == (b"until close", None)
    assert pool._idle == []


def test_broken_connection_and_errors_raised_by_the_exchange() -> None:
    pool, (conn, other) = pool_with_idle(2)
    ex = Recorder()
    pool.send(b"{}", ex)
    assert pool._idle == [conn]
    other.data_received(HEAD + chunk(b"x"))
    transport(other).close()
    assert isinstance(ex.ended(), ConnectionResetError)

    class Raising(Recorder):
        def on_data(self, data: bytes, t_ns: int) -> None:
            raise ValueError("malformed")

    bad = Raising()
    pool.send(b"{}", bad)
    conn.data_received(HEAD + chunk(b"x"))
    assert isinstance(bad.ended(), ValueError)
    assert transport(conn).closed


def test_stale_keep_alive_connection_is_retried_once_on_a_fresh_one() -> None:
    async def scenario() -> None:
        pool, (stale,) = pool_with_idle()
        fresh: list[_Conn] = []

        async def connect() -> _Conn:
            conn = _Conn(pool)
            conn.connection_made(FakeTransport(conn))  # type: ignore[arg-type]
            fresh.append(conn)
            return conn

        pool._connect = connect  # type: ignore[method-assign]
        ex = Recorder()
        pool.send(b"{}", ex)
        transport(stale).close()  # closed by the server before any byte
        await asyncio.sleep(0)
        (conn,) = fresh
        assert transport(conn).written == transport(stale).written
        conn.data_received(HEAD + b"0\r\n\r\n")
        assert ex.ended() is None
        assert [c[0] for c in ex.calls] == ["sent", "sent", "head", "end"]

    asyncio.run(scenario())


def test_connect_failure_and_limit_queue() -> None:
    async def scenario() -> None:
        pool, _ = pool_with_idle(0, limit=1)

        async def refuse() -> _Conn:
            raise ConnectFailed(111, "refused")

        pool._connect = refuse  # type: ignore[method-assign]
        first, second = Recorder(), Recorder()
        pool.send(b"{}", first)
        pool.send(b"{}", second)  # waits for the one slot
        assert list(pool._waiting) == [second]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert isinstance(first.ended(), ConnectFailed)
        assert isinstance(second.ended(), ConnectFailed)
        assert pool._active == 0

    asyncio.run(scenario())


def test_abort_closes_the_connection_and_stops_the_callbacks() -> None:
    pool, (conn, _) = pool_with_idle(2, limit=1)
    ex, queued = Recorder(), Recorder()
    pool.send(b"{}", ex)
    pool.send(b"{}", queued)
    conn_used = next(c for c in (conn, _) if transport(c).written)
    conn_used.data_received(HEAD + chunk(b"partial"))
    pool.abort(queued)  # still waiting: simply dropped
    pool.abort(ex)
    assert transport(conn_used).closed
    assert [c[0] for c in ex.calls] == ["sent", "head", "data"]  # no on_end after an abort
    assert queued.calls == []
    assert pool._active == 0
    pool.abort(ex)  # twice: nothing
