"""A small HTTP/1.1 client for the workers: keep-alive pool, one write per request, no tasks.

Why not aiohttp: per streamed request aiohttp costs ~0.6 CPU-ms in a worker (a writer task that
sends the body one loop pass later, a ``StreamReader``, header multidicts, a task wake-up per
read). Here a request is one ``transport.write`` of head and body (``Exchange.on_sent`` is called
with the time right before it) and the response is parsed inside ``data_received``: the body
bytes of each read go synchronously to the exchange's ``on_data(data, t_ns)`` with the read's
timestamp, and the end of the response (or its failure) to ``on_end``. Nothing awaits: no task,
no future, no coroutine per request; the caller is called back.

Only what an OpenAI server sends is understood: a status line, headers, and a body framed by
``Content-Length``, ``Transfer-Encoding: chunked`` or the end of the connection. Plain ``http``
only (``Http1Pool.supports``); the worker keeps aiohttp for ``https``.

Errors reach ``Exchange.on_end(exc)``: a connection that cannot be opened is ``ConnectFailed``
(an ``OSError``); one that breaks before its response is complete, ``ConnectionResetError``; an
exception raised by the exchange's own ``on_head``/``on_data`` (a malformed event, an error inside
the stream) is handed back as is, and the connection is closed. A reused keep-alive connection
that the server had closed before answering is retried once on a fresh connection, as browsers do.
``Http1Pool.abort`` drops an exchange (timeout, cancellation): its connection is closed and it
gets no further call.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from urllib.parse import urlsplit

__all__ = ["ConnectFailed", "Exchange", "Http1Pool"]

_MAX_HEAD = 64 * 1024
_monotonic_ns = time.monotonic_ns


class Exchange:
    """One request's receiver; subclass it. The pool calls, in order: ``on_sent`` (once per
    attempt), ``on_head``, ``on_data`` (per read with body bytes), then ``on_end`` exactly once.
    """

    __slots__ = ("_conn", "_payload", "_stale_retried")

    def __init__(self) -> None:
        self._conn: _Conn | None = None
        self._payload = b""
        self._stale_retried = False

    def on_sent(self, t_ns: int) -> None:
        """Called with the time right before the request is written."""

    def on_head(self, status: int, headers: dict[bytes, bytes]) -> None:
        """The status line and headers (names lower-cased)."""

    def on_data(self, data: bytes, t_ns: int) -> None:
        """The body bytes of one read (de-chunked), stamped with the read's time."""

    def on_end(self, exc: BaseException | None) -> None:
        """The response is complete (``exc`` None) or failed; called exactly once."""


class ConnectFailed(OSError):
    """No connection could be opened (refused, unreachable, unresolvable)."""


class _StaleConnection(ConnectionResetError):
    """A reused connection closed before any response byte (safe to retry)."""


class _Conn(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time."""

    __slots__ = (
        "_body_left",
        "_buf",
        "_chunked",
        "_exchange",
        "_got_bytes",
        "_in_body",
        "_keep_alive",
        "_pool",
        "_reused",
        "_until_close",
        "closed",
        "transport",
    )

    def __init__(self, pool: Http1Pool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reused = False
        self._exchange: Exchange | None = None
        self._reset()

    def _reset(self) -> None:
        self._buf = b""
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
        exchange = self._exchange
        if exchange is None:
            return  # nothing asked: a stray byte on an idle connection, dropped
        try:
            if self._chunked and not self._buf and self._body_left == 0:
                # The common read of a chunked stream: whole chunks (vLLM, SGLang and our
                # simulator send one or a few SSE events per chunk). Parsed here in one loop;
                # anything unusual (a partial chunk, an extension, the last chunk) goes on to
                # the general parser from where this loop stopped.
                n = len(data)
                eol = data.find(b"\r\n")
                if eol > 0:  # one whole chunk, the usual read of a token stream
                    try:
                        end = eol + 2 + int(data[:eol], 16)
                    except ValueError:
                        end = 0
                    if end == n - 2 and end > eol + 2 and data[end:] == b"\r\n":
                        exchange.on_data(data[eol + 2 : end], t)
                        return
                pos = 0
                out = []
                while True:
                    eol = data.find(b"\r\n", pos)
                    if eol < 0:
                        break
                    try:
                        size = int(data[pos:eol], 16)
                    except ValueError:
                        break
                    start = eol + 2
                    end = start + size
                    if size == 0 or end + 2 > n or data[end : end + 2] != b"\r\n":
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

    # ------------------------------------------------------------------------------- parsing

    def _feed(self, data: bytes, t: int) -> None:
        if not self._in_body:
            buf = self._buf + data if self._buf else data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise ConnectionResetError("response head too large")
                self._buf = buf
                return
            self._buf = b""
            self._head(buf[:end])
            data = buf[end + 4 :]
            self._in_body = True
            if not self._chunked and not self._until_close and self._body_left == 0:
                self._finish()
                return
        if self._chunked:
            self._feed_chunked(data, t)
        elif self._until_close:
            if data:
                self._deliver(data, t)
        else:
            take = data[: self._body_left]
            self._body_left -= len(take)
            if take:
                self._deliver(take, t)
            if self._body_left == 0:
                self._finish()

    def _head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            # whole (it is at most _MAX_HEAD): the worker masks the key in it, then cuts it
            raise ConnectionResetError(f"not an HTTP response: {lines[0]!r}")
        status = int(parts[1])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        assert self._exchange is not None
        self._exchange._payload = b""  # answered: no stale retry, so the request is not kept
        encoding = headers.get(b"transfer-encoding", b"").lower()
        conn = headers.get(b"connection", b"").lower()
        self._keep_alive = parts[0] != b"HTTP/1.0" and conn != b"close"
        if encoding.find(b"chunked") >= 0:  # (cheaper than `in`, which tries an int first)
            self._chunked = True
        elif b"content-length" in headers:
            self._body_left = int(headers[b"content-length"])
        else:
            self._until_close = True
            self._keep_alive = False
        assert self._exchange is not None
        self._exchange.on_head(status, headers)

    def _feed_chunked(self, data: bytes, t: int) -> None:
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
                pos += 2
                self._body_left = 0
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
            if size == 0:  # last chunk, then optional trailers, then an empty line
                if buf[eol + 2 : eol + 4] == b"\r\n":
                    end = eol + 4
                else:
                    found = buf.find(b"\r\n\r\n", eol + 2)
                    if found < 0:
                        break  # the end of the body has not arrived yet
                    end = found + 4
                if out:
                    self._deliver(b"".join(out), t)
                    if self._exchange is None:
                        return
                self._buf = buf[end:]
                self._finish()
                return
            pos = eol + 2
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
        exchange.on_sent(_monotonic_ns())
        self.transport.write(payload)

    def _finish(self) -> None:
        exchange = self._exchange
        keep = self._keep_alive and not self._buf and not self.closed
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


class Http1Pool:
    """Keep-alive connections to one origin; ``send`` POSTs a body for an ``Exchange``.

    ``max_connections`` > 0 bounds the requests in progress (connecting included); the ones over
    it wait in order and start when one ends.
    """

    def __init__(
        self,
        url: str,
        headers: dict[str, str],
        max_connections: int = 0,
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
        loop = asyncio.get_running_loop()
        try:
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
        try:
            conn = await self._connect()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the exchange
            del self._connecting[exchange]
            self._ended(None, exchange, exc)
            return
        del self._connecting[exchange]
        conn.start(exchange._payload, exchange, False)

    def _ended(self, conn: _Conn | None, exchange: Exchange, exc: BaseException | None) -> None:
        if conn is not None:
            self._idle.append(conn)
        if type(exc) is _StaleConnection and not exchange._stale_retried:
            exchange._stale_retried = True  # the server closed it while idle: once more, fresh
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

    def abort(self, exchange: Exchange) -> None:
        """Give up on ``exchange`` (timeout, cancellation): close its connection; no more calls.

        Does nothing when the exchange has already ended or was never sent.
        """
        conn = exchange._conn
        if conn is not None:
            exchange._conn = None
            conn.detach()
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

    def close(self) -> None:
        """Close every idle connection and cancel connections being opened."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        for task in self._connecting.values():
            task.cancel()
        self._connecting.clear()
