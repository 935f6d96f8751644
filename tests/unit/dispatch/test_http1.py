"""Http1Pool and its connections on fake transports: framing, callbacks, reuse, retry, abort."""

from __future__ import annotations

import asyncio
import errno
import socket
import tracemalloc
from typing import Any

import pytest

from veeksha.dispatch.http1 import ConnectFailed, Exchange, Http1Pool, MalformedResponse, _Conn
from veeksha.dispatch.worker import _msg

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


# ----------------------------------------------------------------- the server's malformed bytes


def sent(pool: Http1Pool, conn: _Conn) -> Recorder:
    ex = Recorder()
    pool.send(b"{}", ex)
    assert transport(conn).written
    return ex


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP response: status line b'SSH-2.0-"),
        (b"HTTP/1.1 2xx OK\r\n\r\n", "invalid status code b'2xx' in b'HTTP/1.1 2xx OK'"),
        (b"HTTP/1.1 20 OK\r\n\r\n", "invalid status code b'20'"),
        (b"HTTP/1.1 +200 OK\r\n\r\n", "invalid status code b'+200'"),
        (b"HTTP/1.1 600 Odd\r\n\r\n", "invalid status code b'600'"),
        (b"HTTP/1.1 101 Switching\r\n\r\n", "HTTP 101: the server switched protocols unasked"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "invalid header line b'no colon here'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "invalid Content-Length b'-5'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n", "invalid Content-Length b'1e3'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", "invalid Content-Length b'5, 5'"),
        (HEAD + b"zz\r\ndata\r\n", "invalid chunk size b'zz' in the chunked body"),
        (HEAD + b"0x5\r\nhello\r\n", "invalid chunk size b'0x5'"),
        (HEAD + b"+5\r\nhello\r\n", "invalid chunk size b'+5'"),
        (HEAD + b"1_0\r\n", "invalid chunk size b'1_0'"),
        (HEAD + b"1" * 17 + b"\r\n", "invalid chunk size b'11111111111111111'"),
        (HEAD + b"5\r\nhello!!\r\n", "chunk data longer than its size: b'!!\\r\\n' follows it"),
        (HEAD + b"5" * 5000, "a chunk-size line longer than 4096 bytes"),
        (HEAD + b"0\r\n" + b"X-T: " + b"v" * 70000, "trailers larger than 64 KiB"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"v" * 70000, "response head larger than 64 KiB"),
    ],
)
def test_malformed_responses_fail_at_once_with_a_readable_message(
    response: bytes, message: str
) -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    conn.data_received(response)
    failure = ex.ended()
    assert isinstance(failure, MalformedResponse)
    assert str(failure).startswith(message), str(failure)
    assert transport(conn).closed
    assert pool._idle == []


@pytest.mark.parametrize("size", [b"-6", b"-1", b"-0", b"0x2", b" -6"])
def test_a_negative_or_odd_chunk_size_after_a_whole_chunk_does_not_loop(size: bytes) -> None:
    """The fast path of whole chunks once went round forever on ``-6`` after a chunk (its end
    pointed back at the previous chunk's CRLF), hanging the worker."""
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    conn.data_received(HEAD)
    conn.data_received(chunk(b"a") + size + b"\r\nxxxxxxxx\r\n")
    assert isinstance(ex.ended(), MalformedResponse)
    assert ex.body() == b"a"


@pytest.mark.parametrize("size", [b"0x5", b"+5", b"0_5", b"-5"])
def test_an_odd_chunk_size_in_a_read_of_its_own_is_malformed(size: bytes) -> None:
    """A read that is one whole chunk takes the fast path; its size line must be hex digits
    there too (``int(…, 16)`` alone would take these, which the general parser refuses;
    spaces around the digits it allows, and so does the fast path, by leaving them to it)."""
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    conn.data_received(HEAD)
    conn.data_received(size + b"\r\nhello\r\n")
    assert isinstance(ex.ended(), MalformedResponse)
    assert ex.body() == b""


@pytest.mark.parametrize("size", [b"0x5", b"+5", b"0_5"])
def test_an_odd_chunk_size_after_a_whole_chunk_in_one_read_is_malformed(size: bytes) -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    conn.data_received(HEAD)
    conn.data_received(chunk(b"a") + size + b"\r\nhello\r\n")
    assert isinstance(ex.ended(), MalformedResponse)
    assert ex.body() == b"a"


def test_a_huge_chunk_size_is_refused_and_extensions_with_spaces_are_not() -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    conn.data_received(HEAD + b"5 ;name=value\r\nhello\r\n0000000000000000\r\n\r\n")
    assert (ex.body(), ex.ended()) == (b"hello", None)


# --------------------------------------------------------------------- interim and no body


@pytest.mark.parametrize("split", [False, True])
def test_interim_responses_are_skipped(split: bool) -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    reads = [
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        HEAD + chunk(b"data: a\n\n") + b"0\r\n\r\n",
    ]
    if not split:
        reads = [b"".join(reads)]
    for read in reads:
        conn.data_received(read)
    assert [c[0] for c in ex.calls] == ["sent", "head", "data", "end"]
    assert (ex.calls[1], ex.body(), ex.ended()) == (("head", 200), b"data: a\n\n", None)
    assert pool._idle == [conn]


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_no_content_ends_at_its_head_whatever_its_headers_say(status: bytes) -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    conn.data_received(b"HTTP/1.1 %b\r\nTransfer-Encoding: chunked\r\n\r\n" % status)
    assert (ex.calls[1][0], ex.body(), ex.ended()) == ("head", b"", None)
    assert pool._idle == [conn]  # (nothing came after it)


# ------------------------------------------------------------------------ bytes past the end


@pytest.mark.parametrize(
    "response",
    [
        HEAD + chunk(b"data: a\n\n") + b"0\r\n\r\nHTTP/1.1 200 OK\r\n",  # after the last chunk
        HEAD + chunk(b"data: a\n\n") + b"0\r\nX-T: 1\r\n\r\nstray",  # after trailers
        b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\ndata: a\n\nstray",  # past Content-Length
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nstray",
        b"HTTP/1.1 204 No Content\r\n\r\nstray",
    ],
)
@pytest.mark.parametrize("split", [False, True])
def test_bytes_past_the_end_of_a_response_close_its_connection(
    response: bytes, split: bool
) -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    reads = [response[:-3], response[-3:]] if split else [response]
    for read in reads:
        conn.data_received(read)
    assert ex.ended() is None  # the response itself stands
    assert ex.body() in (b"data: a\n\n", b"")
    assert transport(conn).closed
    assert pool._idle == []


def test_bytes_on_an_idle_connection_close_it_and_the_next_request_takes_another() -> None:
    pool, (stray, spare) = pool_with_idle(2)
    pool._idle.remove(spare)
    pool._idle.insert(0, spare)  # (the one with stray bytes is the next to be taken)
    stray.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
    assert transport(stray).closed
    ex = sent(pool, spare)
    assert transport(stray).written == []
    spare.data_received(HEAD + chunk(b"data: a\n\n") + b"0\r\n\r\n")
    assert (ex.body(), ex.ended()) == (b"data: a\n\n", None)


def test_trailers_one_byte_a_read() -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    response = HEAD + chunk(b"data: a\n\n") + b"0\r\nX-One: 1\r\nX-Two: 2\r\n\r\n"
    for i in range(len(response)):
        conn.data_received(response[i : i + 1])
    assert (ex.body(), ex.ended()) == (b"data: a\n\n", None)
    assert pool._idle == [conn]


# ------------------------------------------------------------------------- linear in the bytes


def copied_per_read(conn: _Conn, reads: list[bytes]) -> int:
    """The bytes each read allocated beyond what was live before it (tracemalloc's peak), summed."""
    total = 0
    tracemalloc.start()
    try:
        for read in reads:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            conn.data_received(read)
            total += tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return total


def test_a_head_one_byte_a_read_costs_work_linear_in_its_size() -> None:
    """A head of 30 KB and one of 60 KB, sent one byte a read: twice the bytes cost twice the
    copying (each read's bytes are added to one buffer and only they are searched), not four
    times (re-joining what came before on every read copies ~N²/2 bytes: 1.8 GB for 60 KB)."""

    def copied(pads: int) -> tuple[int, int]:
        pad = b"".join(b"X-Pad-%03d: %b\r\n" % (i, b"v" * 60) for i in range(pads))
        head = HEAD[:-2] + pad + b"\r\n"
        pool, (conn,) = pool_with_idle()
        ex = sent(pool, conn)
        total = copied_per_read(conn, [head[i : i + 1] for i in range(len(head))])
        assert ex.calls[1] == ("head", 200)
        return len(head), total

    size, small = copied(425)
    double, large = copied(850)
    assert 60_000 < double < 64 * 1024
    assert 1.9 < double / size < 2.1
    assert large < 2.5 * small, (small, large)


def test_a_large_chunk_is_passed_on_as_it_comes_not_gathered() -> None:
    pool, (conn,) = pool_with_idle()
    ex = sent(pool, conn)
    data = b"data: " + b"x" * (4 << 20) + b"\n\n"
    wire = HEAD + chunk(data) + b"0\r\n\r\n"
    reads = [wire[i : i + 65536] for i in range(0, len(wire), 65536)]
    copied = copied_per_read(conn, reads)
    assert ex.body() == data
    assert len([c for c in ex.calls if c[0] == "data"]) == len(reads)  # one part per read
    assert copied < 2 * len(wire), copied


# --------------------------------------------------------------------------------- stamp_first


def stamp_first_pool(count: int) -> tuple[Http1Pool, list[_Conn], list[Recorder]]:
    """A ``stamp_first`` pool (made on the running loop) with ``count`` requests sent."""
    pool = Http1Pool("http://127.0.0.1:9/v1/completions", {}, stamp_first=True)
    conns, exchanges = [], []
    for _ in range(count):
        conn = _Conn(pool)
        conn.connection_made(FakeTransport(conn))  # type: ignore[arg-type]
        pool._idle.append(conn)
        ex = Recorder()
        pool.send(b"{}", ex)
        conns.append(conn)
        exchanges.append(ex)
    return pool, conns, exchanges


def test_stamp_first_reads_every_connection_of_a_pass_before_parsing_any() -> None:
    async def scenario() -> None:
        pool, (a, b), (ex_a, ex_b) = stamp_first_pool(2)
        a.data_received(HEAD + chunk(b"data: a\n\n"))
        b.data_received(HEAD + chunk(b"data: b\n\n") + b"0\r\n\r\n")
        assert ex_a.calls == ex_b.calls == [("sent",)]  # read and stamped, not parsed yet
        await asyncio.sleep(0)  # the loop's next pass: both reads taken, in order
        (read_a,) = [c for c in ex_a.calls if c[0] == "data"]
        (read_b,) = [c for c in ex_b.calls if c[0] == "data"]
        assert (read_a[1], read_b[1]) == (b"data: a\n\n", b"data: b\n\n")
        assert read_a[2] < read_b[2]  # each with the time of its own read
        assert ex_b.ended() is None
        assert not [c for c in ex_a.calls if c[0] == "end"]
        a.data_received(chunk(b"data: c\n\n") + b"0\r\n\r\n")  # a later pass: a new call_soon
        await asyncio.sleep(0)
        assert ex_a.body() == b"data: a\n\ndata: c\n\n"
        assert ex_a.ended() is None
        assert pool._idle == [b, a]

    asyncio.run(scenario())


def test_stamp_first_takes_pending_reads_before_the_connection_ends() -> None:
    async def scenario() -> None:
        _, (conn,), (ex,) = stamp_first_pool(1)
        conn.data_received(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        transport(conn).close()  # the end of a body framed by the connection's close
        assert (ex.body(), ex.ended()) == (b"all of it", None)
        await asyncio.sleep(0)
        assert [c[0] for c in ex.calls] == ["sent", "head", "data", "end"]

    asyncio.run(scenario())


def test_stamp_first_drops_the_pending_reads_of_an_aborted_exchange() -> None:
    async def scenario() -> None:
        pool, (conn,), (ex,) = stamp_first_pool(1)
        conn.data_received(HEAD + chunk(b"data: a\n\n"))
        pool.abort(ex)  # (a timeout between the read and its parsing)
        await asyncio.sleep(0)
        assert ex.calls == [("sent",)]
        assert conn.closed

    asyncio.run(scenario())


# ------------------------------------------------------------------------ a head seen before

FRAMINGS = {
    "chunked": (HEAD, chunk(b"data: a\n\n") + b"0\r\n\r\n", True),
    "length": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", b"hello", True),
    "close": (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"until the end", False),
    "1.0": (b"HTTP/1.0 200 OK\r\n\r\n", b"until the end", False),
    "no content": (b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n", b"", True),
    "error": (b"HTTP/1.1 503 Busy\r\nRetry-After: 0\r\nContent-Length: 4\r\n\r\n", b"busy", True),
}


@pytest.mark.parametrize("second", list(FRAMINGS))
@pytest.mark.parametrize("first", list(FRAMINGS))
def test_a_head_seen_before_frames_its_response_the_same(first: str, second: str) -> None:
    """The pool's last head is reused when the same bytes come again: every framing, twice,
    after any other, gives what a first parse gives (status, headers, body, end, reuse)."""

    class Heads(Recorder):
        def on_head(self, status: int, headers: dict[bytes, bytes]) -> None:
            self.calls.append(("head", status, dict(headers)))

        def on_data(self, data: bytes, t_ns: int) -> None:
            self.calls.append(("data", data))  # (not its time)

    def answer(pool: Http1Pool, name: str) -> tuple[Any, ...]:
        head, body, keep = FRAMINGS[name]
        conn = _Conn(pool)
        conn.connection_made(FakeTransport(conn))  # type: ignore[arg-type]
        pool._idle.append(conn)
        ex = Heads()
        pool.send(b"{}", ex)
        conn.data_received(head + body)
        if not keep:
            conn.connection_lost(None)  # (the end of the connection ends the body)
        return (ex.calls[1:], ex.body(), ex.ended(), conn in pool._idle)

    fresh = [answer(Http1Pool("http://127.0.0.1:9/", {}), name) for name in (first, second)]
    pool = Http1Pool("http://127.0.0.1:9/", {})
    assert [answer(pool, first), answer(pool, second), answer(pool, second)] == [*fresh, fresh[1]]
    assert pool._known_head is not None
    assert pool._known_head[0] == FRAMINGS[second][0][:-4]


@pytest.mark.parametrize("kernel_stamps", [False, True])
def test_a_refused_connection_says_its_errno_once(kernel_stamps: bool) -> None:
    # was: "[Errno 111] cannot connect to 127.0.0.1:P: [Errno 111] Connection refused"
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def scenario() -> BaseException | None:
        pool = Http1Pool(
            f"http://127.0.0.1:{port}/v1/completions", {}, 0, kernel_stamps=kernel_stamps
        )
        exchange = Recorder()
        pool.send(b"{}", exchange)
        for _ in range(100):
            if exchange.calls:
                break
            await asyncio.sleep(0.01)
        return exchange.ended()

    failed = asyncio.run(scenario())
    assert isinstance(failed, ConnectFailed)
    assert failed.errno == errno.ECONNREFUSED
    message = _msg(failed)
    assert message.startswith(f"ConnectFailed: cannot connect to 127.0.0.1:{port}: "), message
    assert message.count(str(errno.ECONNREFUSED)) == 1, message
    assert message.count("Errno") == 1, message
