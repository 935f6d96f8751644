"""A small HTTP/1.1 client for the workers: keep-alive pool, one write per request, no tasks.

Why not aiohttp: per streamed request aiohttp costs ~0.6 CPU-ms in a worker (a writer task that
sends the body one loop pass later, a ``StreamReader``, header multidicts, a task wake-up per
read). Here a request is one ``transport.write`` of head and body (``Exchange.on_sent`` is called
with the time right before it) and the response is parsed from ``data_received``: the body
bytes of each read go to the exchange's ``on_data(data, t_ns)`` with the read's timestamp (at
once, or with ``stamp_first`` after the other reads of the same loop pass: ``Http1Pool``), and
the end of the response (or its failure) to ``on_end``. A request that has to open a
connection (no idle one) is first told how long that took (``on_connected``: from the start of
opening it to the pool holding it, name resolution and TCP connect; a reused connection costs
nothing, not even the call). Nothing awaits: no task,
no future, no coroutine per request; the caller is called back. With ``kernel_stamps`` the
connections run on ``kernel_stamps.KernelStampTransport`` instead of uvloop's, and a read's
timestamp is the kernel's receipt of its bytes (``received_at``); a stamp the transport had to
clamp (the wall clock stepped) is counted on the exchange (``Exchange.stamps_clamped``).

Only what an OpenAI server sends is understood: a status line, headers, and a body framed by
``Content-Length``, ``Transfer-Encoding: chunked`` or the end of the connection. Interim ``1xx``
responses (``100 Continue``, ``103 Early Hints``) are skipped; ``204`` and ``304`` have no body
(RFC 9112). Plain ``http`` only (``Http1Pool.supports``); the worker keeps aiohttp for ``https``.

Errors reach ``Exchange.on_end(exc)``: a connection that cannot be opened is ``ConnectFailed``
(an ``OSError``); one that breaks before its response is complete, ``ConnectionResetError``;
bytes that are not a valid response (a status line that is not HTTP or has no numeric code, a
header line without a colon, a ``Content-Length`` that is not a number, a chunk size that is not
hexadecimal, a head or trailers over 64 KiB, a chunk-size line over 4 KiB), ``MalformedResponse``
with a readable message. An exception raised by the exchange's own ``on_head``/``on_data`` (a
malformed event, an error inside the stream) is handed back as is. After any error the
connection is closed. A reused keep-alive connection that the server had closed before answering
is retried once on a fresh connection, as browsers do, and the exchange told (``on_resent``: the
row counts it in ``retries``, since a server that took the request and then closed the
connection before answering looks the same). ``Http1Pool.abort`` drops an exchange
(timeout, cancellation): its connection is closed and it gets no further call.

A connection is reused only when its last response ended exactly where its framing said: bytes
past the end of a response (after the last chunk, beyond ``Content-Length``) or bytes that
arrive while it is idle close it, since what the server meant by them is unknown (a stray
answer taken for the next request's would be a wrong answer recorded as right). The response
itself stands. What this cannot catch: stray bytes that arrive after the next request was
written on the connection are read as that request's response (every HTTP/1.1 client shares
this limit).

Parsing is linear in the bytes received: a head (or trailers) arriving in pieces is gathered in
one buffer whose new bytes alone are searched for the blank line; chunk data is passed on as it
comes, never buffered (only a chunk-size line cut by a read, at most 4 KiB, is joined again).
A head with the same bytes as the pool's last final head (a server answers every request of a
run with the same head, but for a ``Date``) is not parsed again: its status, headers and framing
are taken from that one.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from urllib.parse import urlsplit

from veeksha.dispatch.kernel_stamps import KERNEL_STAMPS_SUPPORTED, open_stamped

__all__ = ["ConnectFailed", "Exchange", "Http1Pool", "MalformedResponse"]

_MAX_HEAD = 64 * 1024  # a response head, or a chunked body's trailers
_MAX_CHUNK_LINE = 4096  # a chunk-size line with its extensions (as Go's net/http)
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_NO_BODY = (204, 304)  # (and 1xx, which are interim here)
_monotonic_ns = time.monotonic_ns


class Exchange:
    """One request's receiver; subclass it. The pool calls, in order: ``on_connected`` (only
    for an attempt that opened a new connection), ``on_sent`` (once per attempt), ``on_head``,
    ``on_data`` (per read with body bytes), then ``on_end`` exactly once; ``on_resent`` before
    a reused connection's stale-close re-send (a new attempt, on a new connection).

    ``stamps_clamped`` counts the reads of its responses (every attempt) whose kernel stamp was
    out of range and clamped (``kernel_stamps``): their times were substituted, not observed.
    """

    __slots__ = ("_conn", "_payload", "_stale_retried", "stamps_clamped")

    def __init__(self) -> None:
        self._conn: _Conn | None = None
        self._payload = b""
        self._stale_retried = False
        self.stamps_clamped = 0

    def on_connected(self, connect_ns: int) -> None:
        """The attempt about to be written opened a new connection, which took ``connect_ns``
        from the start of opening it (name resolution and TCP connect) until the pool held it
        usable. Not called when an idle kept-alive connection was reused."""

    def on_sent(self, t_ns: int) -> None:
        """Called with the time right before the request is written."""

    def on_head(self, status: int, headers: dict[bytes, bytes]) -> None:
        """The status line and headers (names lower-cased)."""

    def on_data(self, data: bytes, t_ns: int) -> None:
        """The body bytes of one read (de-chunked), stamped with the read's time."""

    def on_resent(self) -> None:
        """The request is written once more, on a fresh connection: the reused one it was
        written to closed before any response byte (the server may or may not have taken it)."""

    def on_end(self, exc: BaseException | None) -> None:
        """The response is complete (``exc`` None) or failed; called exactly once."""


class ConnectFailed(OSError):
    """No connection could be opened (refused, unreachable, unresolvable).

    ``ConnectFailed(errno, message)``: ``str()`` is the message alone, which quotes the cause
    (``[Errno 111] Connection refused``), so the errno is said once, not twice."""

    def __str__(self) -> str:
        return self.strerror if isinstance(self.strerror, str) else super().__str__()


class MalformedResponse(Exception):
    """The server's bytes are not a valid HTTP/1.1 response (the message says what and where)."""


class _StaleConnection(ConnectionResetError):
    """A reused connection closed before any response byte (safe to retry)."""


class _Conn(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time."""

    __slots__ = (
        "_body_left",
        "_buf",
        "_chunked",
        "_exchange",
        "_gathered",
        "_got_bytes",
        "_in_body",
        "_keep_alive",
        "_pool",
        "_reused",
        "_until_close",
        "closed",
        "sent_at",
        "transport",
    )

    def __init__(self, pool: Http1Pool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.sent_at = 0  # when the current request was written
        self._reused = False
        self._exchange: Exchange | None = None
        self._gathered = bytearray()  # a head, or trailers, not complete yet
        self._reset()

    def _reset(self) -> None:
        self._buf = b""  # an incomplete chunk-size line, or the CRLF after a chunk's data
        if self._gathered:
            self._gathered = bytearray()
        self._in_body = False
        self._chunked = False
        self._until_close = False
        self._body_left = 0
        self._keep_alive = True
        self._got_bytes = False

    # ---------------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._pool._pending:
            self._pool._take_pending()  # (the bytes read before the end come first)
        self.closed = True
        if self._exchange is None:
            return
        if self._until_close and self._in_body:
            self._finish()  # the body was framed by the end of the connection
        elif self._reused and not self._got_bytes:
            self._fail(_StaleConnection("keep-alive connection closed"))
        else:
            self._fail(ConnectionResetError("connection closed before the response ended"))

    def data_received(self, data: bytes) -> None:
        t = _monotonic_ns()
        pending = self._pool._pending
        if pending is None:
            self._take(data, t)
            return
        if not pending:  # the first read of this loop pass: its bytes are taken after the last
            self._pool._loop_call_soon(self._pool._take_pending)
        pending.append((self, data, t))

    def _take(self, data: bytes, t: int) -> None:
        """Parse the bytes of one read, stamped ``t`` (the time of the read)."""
        exchange = self._exchange
        if exchange is None:
            self.close()  # nothing asked: bytes on an idle connection make it unusable
            return
        try:
            if self._chunked and not self._buf and self._body_left == 0:
                # The common read of a chunked stream: whole chunks (vLLM, SGLang and our
                # simulator send one or a few SSE events per chunk). Parsed here in one loop;
                # anything unusual (a partial chunk, an extension, the last chunk) goes on to
                # the general parser from where this loop stopped.
                n = len(data)
                eol = data.find(b"\r\n")
                if eol > 0:  # one whole chunk, the usual read of a token stream
                    digits = data[:eol]
                    # (hex digits only: int() would also take "0x", "_", signs and spaces,
                    # which the general parser rejects as malformed)
                    end = 0 if digits.lstrip(_HEX_DIGITS) else eol + 2 + int(digits, 16)
                    if end == n - 2 and end > eol + 2 and data[end:] == b"\r\n":
                        exchange.on_data(data[eol + 2 : end], t)
                        return
                pos = 0
                out = []
                while True:
                    eol = data.find(b"\r\n", pos)
                    if eol < 0:
                        break
                    digits = data[pos:eol]
                    if not digits or digits.lstrip(_HEX_DIGITS):
                        break  # (the general parser judges it)
                    size = int(digits, 16)
                    start = eol + 2
                    end = start + size
                    if size <= 0 or end + 2 > n or data[end : end + 2] != b"\r\n":
                        break
                    out.append(data[start:end])
                    pos = end + 2
                    if pos == n:
                        exchange.on_data(out[0] if len(out) == 1 else b"".join(out), t)
                        return
                if out:
                    exchange.on_data(out[0] if len(out) == 1 else b"".join(out), t)
                    if self._exchange is not exchange:
                        return  # aborted from inside on_data
                data = data[pos:]
            self._got_bytes = True
            self._feed(data, t)
        except Exception as exc:  # noqa: BLE001 - handed to the exchange
            self._keep_alive = False
            if self._exchange is exchange:
                self._fail(exc)

    # A read stamped by its transport (``kernel_stamps``, where ``stamp_first`` is off: a
    # stamp does not depend on when its read is parsed), parsed at once.
    received_at = _take

    def stamp_clamped(self) -> None:
        """The transport clamped the stamp of the read it hands over next: counted on the
        exchange (a read on an idle connection has none: it closes the connection unused)."""
        if self._exchange is not None:
            self._exchange.stamps_clamped += 1

    # ------------------------------------------------------------------------------- parsing

    def _feed(self, data: bytes, t: int) -> None:
        while not self._in_body:  # (a loop: interim 1xx responses are skipped)
            if self._gathered:
                end = self._gather(data, "response head")
                if end < 0:
                    return
                data = bytes(self._gathered)
                self._gathered = bytearray()
            else:
                end = data.find(b"\r\n\r\n")
                if end < 0:
                    if data:
                        self._gather(data, "response head")
                    return
                if end > _MAX_HEAD:
                    raise _head_too_large("response head")
            final = self._head(data[:end])
            data = data[end + 4 :]
            if final:
                self._in_body = True
                if not self._chunked and not self._until_close and self._body_left == 0:
                    if data:
                        self._keep_alive = False  # bytes past the end of the response
                    self._finish()
                    return
        if self._chunked:
            self._feed_chunked(data, t)
        elif self._until_close:
            if data:
                self._deliver(data, t)
        else:
            left = self._body_left
            if len(data) > left:
                self._keep_alive = False  # bytes past the end of the response
                data = data[:left]
            self._body_left = left - len(data)
            if data:
                self._deliver(data, t)
            if self._body_left == 0 and self._exchange is not None:
                self._finish()

    def _gather(self, data: bytes, what: str) -> int:
        """Add ``data`` to a head (or trailers) arriving in pieces; the position of its end (the
        first blank line) in ``_gathered``, or -1. Only the new bytes are searched."""
        gathered = self._gathered
        start = len(gathered) - 3 if len(gathered) > 3 else 0
        gathered += data
        end = gathered.find(b"\r\n\r\n", start)
        if (end if end >= 0 else len(gathered)) > _MAX_HEAD:
            raise _head_too_large(what)
        return end

    def _head(self, head: bytes) -> bool:
        """Parse a status line and headers; False for an interim (1xx) response."""
        known = self._pool._known_head
        if known is not None and head == known[0]:  # the same bytes as the last final head
            _, status, same, self._keep_alive, self._chunked, self._body_left = known
            if self._body_left < 0:
                self._body_left = 0
                self._until_close = True
            assert self._exchange is not None
            self._exchange._payload = b""
            self._exchange.on_head(status, same)
            return True
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            # whole (it is at most _MAX_HEAD): the worker masks the key in it, then cuts it
            raise MalformedResponse(f"not an HTTP response: status line {lines[0]!r}")
        code = parts[1]
        try:  # (3 characters from 100 to 599 that int() reads are 3 digits)
            status = int(code) if len(code) == 3 else 0
        except ValueError:
            status = 0
        if not 100 <= status <= 599:
            raise MalformedResponse(f"invalid status code {code[:20]!r} in {lines[0]!r}")
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise MalformedResponse(f"invalid header line {line[:80]!r} (no colon)")
            headers[name.strip().lower()] = value.strip()
        if status < 200:
            if status == 101:
                raise MalformedResponse("HTTP 101: the server switched protocols unasked")
            return False  # interim (100 Continue, 103 Early Hints): the answer follows
        assert self._exchange is not None
        self._exchange._payload = b""  # answered: no stale retry, so the request is not kept
        encoding = headers.get(b"transfer-encoding", b"").lower()
        conn = headers.get(b"connection", b"").lower()
        self._keep_alive = parts[0] != b"HTTP/1.0" and conn != b"close"
        if status in _NO_BODY:
            pass  # no body, whatever the headers say
        elif encoding.find(b"chunked") >= 0:  # (cheaper than `in`, which tries an int first)
            self._chunked = True
        elif b"content-length" in headers:
            length = headers[b"content-length"]
            if not length.isdigit() or len(length) > 18:
                raise MalformedResponse(f"invalid Content-Length {length[:40]!r}")
            self._body_left = int(length)
        else:
            self._until_close = True
            self._keep_alive = False
        # Kept for the next head with the same bytes (a server repeats its answer's head:
        # parsed once, not per response; its headers dict is shared, and nobody changes it).
        left = -1 if self._until_close else self._body_left
        self._pool._known_head = (head, status, headers, self._keep_alive, self._chunked, left)
        self._exchange.on_head(status, headers)
        return True

    def _feed_chunked(self, data: bytes, t: int) -> None:
        if self._body_left == -2:  # in the trailers: gathered until their blank line
            end = self._gather(data, "trailers")
            if end >= 0:
                if len(self._gathered) > end + 4:
                    self._keep_alive = False  # bytes past the end of the response
                self._finish()
            return
        buf = self._buf + data if self._buf else data
        pos = 0
        out: list[bytes] = []
        n = len(buf)
        while True:
            if self._body_left > 0:  # inside a chunk's data
                take = min(self._body_left, n - pos)
                if take <= 0:
                    break
                out.append(buf[pos : pos + take])
                pos += take
                self._body_left -= take
                if self._body_left == 0:
                    self._body_left = -1  # its CRLF is next
                continue
            if self._body_left == -1:
                if n - pos < 2:
                    break
                if buf[pos] != 13 or buf[pos + 1] != 10:  # (CRLF)
                    raise MalformedResponse(
                        f"chunk data longer than its size: {buf[pos : pos + 20]!r} follows it"
                    )
                pos += 2
                self._body_left = 0
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if n - pos > _MAX_CHUNK_LINE:
                    raise _chunk_line_too_long(buf[pos:])
                break
            line = buf[pos:eol]
            if line and len(line) <= 16 and not line.lstrip(_HEX_DIGITS):
                size = int(line, 16)  # (the usual line: hexadecimal digits only)
            else:
                size = _chunk_size(line)  # extensions, spaces, or malformed
            pos = eol + 2
            if size == 0:  # the last chunk, then optional trailers, then an empty line
                if out:
                    self._deliver(b"".join(out), t)
                    if self._exchange is None:
                        return
                self._buf = b""
                if buf[pos : pos + 2] == b"\r\n":  # no trailers
                    if n > pos + 2:
                        self._keep_alive = False  # bytes past the end of the response
                    self._finish()
                else:
                    self._body_left = -2
                    self._gathered = bytearray(b"\r\n")  # (so the blank line is found at once)
                    self._feed_chunked(buf[pos:], t)
                return
            self._body_left = size
        self._buf = buf[pos:]
        if out:
            self._deliver(out[0] if len(out) == 1 else b"".join(out), t)

    def _deliver(self, data: bytes, t: int) -> None:
        if self._exchange is not None:
            self._exchange.on_data(data, t)

    # ---------------------------------------------------------------------------- exchanges

    def start(self, payload: bytes, exchange: Exchange, reused: bool) -> None:
        """Write one request for ``exchange`` (``on_sent`` first)."""
        assert self.transport is not None
        self._reused = reused
        self._exchange = exchange
        exchange._conn = self
        self.sent_at = t = _monotonic_ns()
        exchange.on_sent(t)
        self.transport.write(payload)

    def _finish(self) -> None:
        exchange = self._exchange
        keep = self._keep_alive and not self.closed
        self._reset()
        self._exchange = None
        if not keep:
            self.close()
        if exchange is not None:
            exchange._conn = None
            self._pool._ended(self if keep else None, exchange, None)

    def _fail(self, exc: BaseException) -> None:
        exchange = self._exchange
        self._exchange = None
        self.close()
        if exchange is not None:
            exchange._conn = None
            self._pool._ended(None, exchange, exc)

    def detach(self) -> None:
        """Forget the current exchange and close (the caller gave up on it)."""
        self._exchange = None
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


def _chunk_size(line: bytes) -> int:
    """The size in a chunk-size line (``1*HEXDIG [ext]``), or ``MalformedResponse``."""
    if len(line) > _MAX_CHUNK_LINE:
        raise _chunk_line_too_long(line)
    digits = line.split(b";", 1)[0].strip(b" \t")
    if not digits or len(digits) > 16 or digits.lstrip(_HEX_DIGITS):
        raise MalformedResponse(f"invalid chunk size {line[:40]!r} in the chunked body")
    return int(digits, 16)


def _chunk_line_too_long(line: bytes) -> MalformedResponse:
    return MalformedResponse(
        f"a chunk-size line longer than {_MAX_CHUNK_LINE} bytes: {line[:40]!r}"
    )


def _head_too_large(what: str) -> MalformedResponse:
    return MalformedResponse(f"{what} larger than {_MAX_HEAD // 1024} KiB")


class Http1Pool:
    """Keep-alive connections to one origin; ``send`` POSTs a body for an ``Exchange``.

    ``max_connections`` > 0 bounds the requests in progress (connecting included); the ones over
    it wait in order and start when one ends.

    ``stamp_first`` (the worker's setting; call it on the running loop): a read's bytes are
    stamped at once but parsed only after every connection made readable by the same wake-up of
    the loop has been read (one ``call_soon`` a pass, which takes the reads in order). Without
    it, each read is parsed, and its response possibly finished, before the next connection is
    read, and a chunk's time includes the parsing of every read before it in that pass: at 128
    streams that was about half the time between two reads (``benchmarks/streams.py``). A
    connection that ends has its pending reads taken first. Off, ``data_received`` parses at
    once (the unit tests and the replay benchmarks drive connections that way, without a loop).

    ``kernel_stamps`` (Linux; ``runtime.chunk_timestamps: kernel``): connections are opened on
    ``kernel_stamps.KernelStampTransport``, and a read's time is the kernel's receipt of its
    last segment, not the moment the loop read it: neither the loop's other work nor the other
    reads of its pass delay a stamp, so ``stamp_first`` is not needed and is off (each read is
    parsed at once).
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        max_connections: int = 0,
        stamp_first: bool = False,
        kernel_stamps: bool = False,
    ) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._prefix = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")
        self._idle: list[_Conn] = []
        self._limit = max_connections
        self._active = 0
        self._waiting: deque[Exchange] = deque()
        self._connecting: dict[Exchange, asyncio.Task[None]] = {}
        self._reopening: set[asyncio.Task[None]] = set()  # replacements of aborted connections
        # reads of the current loop pass, not parsed yet (None: parsed as they come)
        self._pending: list[tuple[_Conn, bytes, int]] | None = None
        # the last final response head parsed: (bytes, status, headers, keep-alive, chunked,
        # Content-Length or -1 for a body framed by the end of the connection)
        self._known_head: tuple[bytes, int, dict[bytes, bytes], bool, bool, int] | None = None
        self.kernel_stamps = kernel_stamps and KERNEL_STAMPS_SUPPORTED
        if stamp_first and not self.kernel_stamps:
            self._pending = []
            self._loop_call_soon = asyncio.get_running_loop().call_soon

    def _take_pending(self) -> None:
        """Parse the reads stamped so far, in the order they were read."""
        pending = self._pending
        if pending:
            self._pending = []
            for conn, data, t in pending:
                conn._take(data, t)

    @staticmethod
    def supports(url: str) -> bool:
        """Whether this client can send to ``url`` (plain http)."""
        return urlsplit(url).scheme == "http"

    async def warm(self, count: int) -> None:
        """Open up to ``count`` idle connections now (errors are left for the requests)."""
        conns = await asyncio.gather(
            *(self._connect() for _ in range(count)), return_exceptions=True
        )
        for conn in conns:
            if isinstance(conn, _Conn):
                self._idle.append(conn)

    async def _connect(self) -> _Conn:
        try:
            if self.kernel_stamps:
                conn = await open_stamped(lambda: _Conn(self), self.host, self.port)
            else:
                loop = asyncio.get_running_loop()
                _, conn = await loop.create_connection(lambda: _Conn(self), self.host, self.port)
        except OSError as exc:
            raise ConnectFailed(
                exc.errno, f"cannot connect to {self.host}:{self.port}: {exc}"
            ) from exc
        return conn

    # ------------------------------------------------------------------------------ requests

    def send(self, body: bytes, exchange: Exchange) -> None:
        """POST ``body``; the exchange is called back (see ``Exchange``); never raises."""
        exchange._payload = b"%b%d\r\n\r\n%b" % (self._prefix, len(body), body)
        exchange._stale_retried = False
        if self._limit and self._active >= self._limit:
            self._waiting.append(exchange)
            return
        self._active += 1
        self._start(exchange)

    def send_headed(self, body: bytes, exchange: Exchange, lines: bytes) -> None:
        """``send``, with header ``lines`` (each ending in CRLF) after the pool's own: headers
        that differ per request (``client.session_header``, ``client.request_id_header``).
        (``send``'s body again, one format for the whole payload, rather than a call or a
        format more on its path.)"""
        exchange._payload = b"%b%d\r\n%b\r\n%b" % (self._prefix, len(body), lines, body)
        exchange._stale_retried = False
        if self._limit and self._active >= self._limit:
            self._waiting.append(exchange)
            return
        self._active += 1
        self._start(exchange)

    def _start(self, exchange: Exchange) -> None:
        idle = self._idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                conn.start(exchange._payload, exchange, True)
                return
        self._connecting[exchange] = asyncio.get_running_loop().create_task(
            self._connect_and_start(exchange)
        )

    async def _connect_and_start(self, exchange: Exchange) -> None:
        # (timed from here, the task's first step: the pass it waited to run is the worker's)
        start = _monotonic_ns()
        try:
            conn = await self._connect()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the exchange
            del self._connecting[exchange]
            self._ended(None, exchange, exc)
            return
        connect_ns = _monotonic_ns() - start
        del self._connecting[exchange]
        exchange.on_connected(connect_ns)
        conn.start(exchange._payload, exchange, False)

    def _ended(self, conn: _Conn | None, exchange: Exchange, exc: BaseException | None) -> None:
        if conn is not None:
            self._idle.append(conn)
        if type(exc) is _StaleConnection and not exchange._stale_retried:
            exchange._stale_retried = True  # the server closed it while idle: once more, fresh
            exchange.on_resent()
            self._connecting[exchange] = asyncio.get_running_loop().create_task(
                self._connect_and_start(exchange)
            )
            return
        self._release()
        if type(exc) is _StaleConnection:
            exc = ConnectionResetError("the server closed the connection before answering")
        exchange._payload = b""
        exchange.on_end(exc)

    def _release(self) -> None:
        self._active -= 1
        if self._waiting and self._active < self._limit:
            self._active += 1
            self._start(self._waiting.popleft())

    def abort(self, exchange: Exchange, replace: bool = False) -> None:
        """Give up on ``exchange`` (timeout, cancellation): close its connection; no more calls.

        Does nothing when the exchange has already ended or was never sent. ``replace``: a
        connection closed for it is replaced by a new idle one, opened now in the background, so
        that the requests after it do not pay a connection's set-up for a close that was the
        client's choice (an abandoned request's).
        """
        conn = exchange._conn
        if conn is not None:
            exchange._conn = None
            conn.detach()
            if replace:
                task = asyncio.get_running_loop().create_task(self._reopen())
                self._reopening.add(task)
                task.add_done_callback(self._reopening.discard)
        elif exchange in self._connecting:
            self._connecting.pop(exchange).cancel()
        elif exchange in self._waiting:
            self._waiting.remove(exchange)  # it held no slot
            exchange._payload = b""
            return
        else:
            return
        exchange._payload = b""
        self._release()

    async def _reopen(self) -> None:
        """One more idle connection (none if it cannot be opened: a request will say why)."""
        try:
            conn = await self._connect()
        except ConnectFailed:
            return
        self._idle.append(conn)

    def close(self) -> None:
        """Close every idle connection and cancel connections being opened."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        for task in self._connecting.values():
            task.cancel()
        self._connecting.clear()
        for task in self._reopening:
            task.cancel()
