"""``Http1Pool(kernel_stamps=True)`` over loopback: stamps from the kernel, EOF, reset, big writes.

The server is a thread with plain sockets, so it runs while the client's loop is blocked.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
import uvloop

from veeksha.dispatch import kernel_stamps
from veeksha.dispatch.http1 import Exchange, Http1Pool
from veeksha.dispatch.kernel_stamps import KERNEL_STAMPS_SUPPORTED

pytestmark = pytest.mark.timeout(30)


def on_uvloop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test on uvloop, as the workers run."""

    @functools.wraps(test)
    def run() -> None:
        uvloop.run(test())

    return run


_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.fixture(scope="module", autouse=True)
def kernel_stamps_on() -> Iterator[None]:
    """The kernel's receive timestamps switched on for the host, and held on, as a worker
    holds them (``hold_stamps_on``): on a loaded machine Linux's work queue switched them on
    late enough for a test's first read to go unstamped."""
    held, on = kernel_stamps.hold_stamps_on(timeout_s=10)
    try:
        assert on or not KERNEL_STAMPS_SUPPORTED, "the kernel's receive stamps stayed off for 10 s"
        yield
    finally:
        for sock in held:
            sock.close()


def test_held_stamps_reach_a_new_connections_first_read() -> None:
    """With the stamps held on, a connection opened afterwards gets a stamp on its very first
    read."""
    if not KERNEL_STAMPS_SUPPORTED:
        assert kernel_stamps.hold_stamps_on() == ([], False)
        return
    held, on = kernel_stamps.hold_stamps_on()
    assert on
    assert len(held) == 2
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        client.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_TIMESTAMPNS", 35), 1)
        server.sendall(b"first")
        data, ancdata, _, _ = client.recvmsg(16, socket.CMSG_SPACE(16))
    assert data == b"first"
    assert ancdata
    for sock in held:
        sock.close()


class Recorder(Exchange):
    """Keeps what the pool calls back; ``head_hook`` runs inside ``on_head``."""

    def __init__(self, head_hook: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.head_hook = head_hook
        self.data: list[tuple[bytes, int]] = []
        self.done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

    def on_head(self, status: int, headers: dict[bytes, bytes]) -> None:
        if self.head_hook is not None:
            self.head_hook()

    def on_data(self, data: bytes, t_ns: int) -> None:
        self.data.append((data, t_ns))

    def on_end(self, exc: BaseException | None) -> None:
        self.done.set_result(exc)


def _read_request(conn: socket.socket) -> bytes:
    """One request's body (framed by Content-Length)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += conn.recv(65536)
    head, _, body = buf.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        time.sleep(0.001)  # a slow reader: the client's socket fills up
        body += conn.recv(65536)
    return body


def _serve(script: Callable[[socket.socket], None]) -> tuple[str, threading.Thread]:
    """A one-connection server running ``script(conn)`` in a thread; its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def run() -> None:
        conn, _ = listener.accept()
        listener.close()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            script(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}/v1/completions", thread


async def _stamp_after_blocked_loop(kernel: bool) -> tuple[int, int]:
    """The server writes a chunk while the client's loop sleeps 150 ms: (its write, the stamp)."""
    head_read = threading.Event()
    written: list[int] = []

    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(_HEAD)
        head_read.wait(10)
        written.append(time.monotonic_ns())
        conn.sendall(b"5\r\nhello\r\n")
        time.sleep(0.2)
        conn.sendall(b"0\r\n\r\n")

    def block_loop() -> None:
        head_read.set()
        time.sleep(0.15)  # the loop is busy: the chunk waits in the socket

    url, thread = _serve(script)
    pool = Http1Pool(url, {}, stamp_first=True, kernel_stamps=kernel)
    ex = Recorder(block_loop)
    pool.send(b"{}", ex)
    assert await asyncio.wait_for(ex.done, 10) is None
    pool.close()
    thread.join(5)
    assert [d for d, _ in ex.data] == [b"hello"]
    return written[0], ex.data[0][1]


@pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
@on_uvloop
async def test_kernel_stamp_is_the_arrival_not_the_read() -> None:
    written, stamp = await _stamp_after_blocked_loop(kernel=True)
    assert abs(stamp - written) < 20_000_000  # the arrival, well before the loop read it


@on_uvloop
async def test_read_stamp_is_the_read() -> None:
    written, stamp = await _stamp_after_blocked_loop(kernel=False)
    assert stamp >= written + 100_000_000


# --------------------------------------------------------------- the transport's other paths


@pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
@on_uvloop
async def test_body_framed_by_eof() -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nall of it")

    url, thread = _serve(script)
    pool = Http1Pool(url, {}, kernel_stamps=True)
    ex = Recorder()
    pool.send(b"{}", ex)
    assert await asyncio.wait_for(ex.done, 10) is None
    assert b"".join(d for d, _ in ex.data) == b"all of it"
    thread.join(5)


@pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
@on_uvloop
async def test_reset_mid_stream() -> None:
    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(_HEAD + b"5\r\nhello\r\n")
        time.sleep(0.05)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    url, thread = _serve(script)
    pool = Http1Pool(url, {}, kernel_stamps=True)
    ex = Recorder()
    pool.send(b"{}", ex)
    exc = await asyncio.wait_for(ex.done, 10)
    assert isinstance(exc, ConnectionResetError)
    assert [d for d, _ in ex.data] == [b"hello"]
    thread.join(5)


@pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
@on_uvloop
async def test_large_body_written_in_parts_then_keep_alive() -> None:
    body = bytes(range(256)) * 40_000  # 10 MB: more than the socket buffers take at once
    got: list[bytes] = []

    def script(conn: socket.socket) -> None:
        for _ in range(2):
            got.append(_read_request(conn))
            size = b"%d" % len(got[-1])
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%b" % (len(size), size))

    url, thread = _serve(script)
    pool = Http1Pool(url, {}, kernel_stamps=True)
    for payload in (body, b"{}"):  # the second on the same (kept) connection
        ex = Recorder()
        pool.send(payload, ex)
        assert await asyncio.wait_for(ex.done, 20) is None
        assert ex.data[0][0] == b"%d" % len(payload)
    pool.close()
    thread.join(5)
    assert got == [body, b"{}"]


# ------------------------------------------------------------------ a wall clock that stepped


class SentRecorder(Recorder):
    def on_sent(self, t_ns: int) -> None:
        self.sent_at = t_ns


@pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
@pytest.mark.parametrize("shift_ns", [0, 1_000_000_000, -1_000_000_000])
def test_a_stamp_out_of_range_is_clamped_and_counted_on_its_exchange(
    monkeypatch: pytest.MonkeyPatch, shift_ns: int
) -> None:
    """The wall clock read at the conversion is ``shift_ns`` off the kernel's: +1 s puts every
    stamp 1 s early (clamped to ``sent_at``), -1 s 1 s late (clamped to the read's own time).
    Each clamped read is counted on the request's exchange; none without a shift."""
    real = time.time_ns
    monkeypatch.setattr(kernel_stamps, "_realtime_ns", lambda: real() + shift_ns)

    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(_HEAD + b"5\r\nhello\r\n")
        time.sleep(0.05)
        conn.sendall(b"5\r\nworld\r\n0\r\n\r\n")

    async def exchange() -> tuple[SentRecorder, list[int]]:
        url, thread = _serve(script)
        pool = Http1Pool(url, {}, kernel_stamps=True)
        ex = SentRecorder()
        read_times: list[int] = []
        ex.head_hook = lambda: read_times.append(time.monotonic_ns())
        pool.send(b"{}", ex)
        assert await asyncio.wait_for(ex.done, 10) is None
        read_times.append(time.monotonic_ns())
        pool.close()
        thread.join(5)
        return ex, read_times

    ex, (after_head, end) = uvloop.run(exchange())
    assert b"".join(d for d, _ in ex.data) == b"helloworld"
    stamps = [t for _, t in ex.data]
    assert all(ex.sent_at <= t <= end for t in stamps)
    if shift_ns == 0:
        assert ex.stamps_clamped == 0
        assert stamps[-1] > ex.sent_at  # the second chunk came 50 ms later, as stamped
    # (chunks that came in one read share its stamp and its clamp: on a loaded machine the
    # client may read both chunks at once, 50 ms apart or not; the head's read counts too)
    elif shift_ns > 0:
        assert ex.stamps_clamped >= 1
        assert stamps == [ex.sent_at] * len(stamps)
    else:
        assert ex.stamps_clamped >= len(set(stamps)) >= 1  # each read: its own time
        assert stamps[-1] >= after_head  # the read's own time, not a second in the future


@pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="SO_TIMESTAMPNS is Linux's")
def test_a_pause_between_the_clock_reads_does_not_reorder_a_streams_stamps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process is paused (here: 2 ms, every other time) between reading the wall clock and
    the monotonic one, as a busy machine preempts it. Sampled at every read, each paused read's
    stamp came 2 ms late and after its successors'; the offset taken from the narrowest of three
    brackets, shared by the reads in between, keeps the stream's stamps in the kernel's order."""
    real = time.time_ns
    calls = [0]

    def paused_wall_clock() -> int:
        calls[0] += 1
        value = real()
        if calls[0] % 2:
            time.sleep(0.002)
        return value

    monkeypatch.setattr(kernel_stamps, "_realtime_ns", paused_wall_clock)

    def script(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(_HEAD)
        for _ in range(30):
            conn.sendall(b"1\r\nx\r\n")
            time.sleep(0.0005)
        conn.sendall(b"0\r\n\r\n")

    async def exchange() -> SentRecorder:
        url, thread = _serve(script)
        pool = Http1Pool(url, {}, kernel_stamps=True)
        ex = SentRecorder()
        pool.send(b"{}", ex)
        assert await asyncio.wait_for(ex.done, 10) is None
        pool.close()
        thread.join(5)
        return ex

    ex = uvloop.run(exchange())
    assert b"".join(d for d, _ in ex.data) == b"x" * 30
    stamps = [t for _, t in ex.data]
    assert len(stamps) >= 5  # (reads 0.5 ms apart, not one coalesced read)
    assert stamps == sorted(stamps)
    assert ex.stamps_clamped == 0
