"""A small HTTP/1.1 client for the workers: keep-alive pool, one write per request, no tasks.

Why not aiohttp: per streamed request aiohttp costs ~0.6 CPU-ms in a worker (a writer task that
sends the body one loop pass later, a ``StreamReader``, header multidicts, a task wake-up per
read). Here a request is one ``transport.write`` of head and body (``sent_at`` is taken right
before it) and the response is parsed inside ``data_received``: the body bytes of each read go
synchronously to the exchange's ``on_data(data, t_ns)`` with the read's timestamp, so a streamed
response wakes the request's coroutine once, at its end.

Only what an OpenAI server sends is understood: a status line, headers, and a body framed by
``Content-Length``, ``Transfer-Encoding: chunked`` or the end of the connection. Plain ``http``
only (``Http1Pool.supports``); the worker keeps aiohttp for ``https``.

Errors: connecting raises ``ConnectFailed`` (an ``OSError``); a connection that
breaks before its response is complete raises ``ConnectionResetError``; an exception raised by
the exchange's ``on_data`` (a malformed event, an error inside the stream) is raised from
``request``. A reused keep-alive connection that the server had closed before answering is
retried once on a fresh connection, as browsers do. Cancellation closes the connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

__all__ = ["ConnectFailed", "Exchange", "Http1Pool"]

_MAX_HEAD = 64 * 1024


class Exchange(Protocol):
    """Receives one response: its head, then its body bytes read by read."""

    def on_head(self, status: int, headers: dict[bytes, bytes]) -> None: ...

    def on_data(self, data: bytes, t_ns: int) -> None: ...


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
        "_until_close",
        "closed",
        "done",
        "reused",
        "transport",
    )

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.done: asyncio.Future[None] | None = None
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
        if self.done is None or self.done.done():
            return
        if self._until_close and self._in_body:
            self._finish()  # the body was framed by the end of the connection
            return
        if self.reused and not self._got_bytes:
            self.done.set_exception(_StaleConnection("keep-alive connection closed"))
        else:
            self.done.set_exception(
                ConnectionResetError("connection closed before the response ended")
            )

    def data_received(self, data: bytes) -> None:
        t = time.monotonic_ns()
        if self.done is None or self.done.done():
            return  # nothing asked: a stray byte on an idle connection, dropped
        self._got_bytes = True
        try:
            self._feed(data, t)
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting request
            self._keep_alive = False
            if not self.done.done():
                self.done.set_exception(exc)
            self.close()

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
            raise ConnectionResetError(f"not an HTTP response: {lines[0][:80]!r}")
        status = int(parts[1])
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        encoding = headers.get(b"transfer-encoding", b"").lower()
        conn = headers.get(b"connection", b"").lower()
        self._keep_alive = parts[0] != b"HTTP/1.0" and conn != b"close"
        if b"chunked" in encoding:
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
                self._buf = buf[end:]
                self._finish()
                return
            pos = eol + 2
            self._body_left = size
        self._buf = buf[pos:]
        if out:
            self._deliver(out[0] if len(out) == 1 else b"".join(out), t)

    def _deliver(self, data: bytes, t: int) -> None:
        assert self._exchange is not None
        self._exchange.on_data(data, t)

    def _finish(self) -> None:
        done = self.done
        keep = self._keep_alive and not self._buf
        self._reset()
        self._exchange = None
        if not keep:
            self.close()
        if done is not None and not done.done():
            done.set_result(None)

    # ---------------------------------------------------------------------------- requesting

    def start(self, payload: bytes, exchange: Exchange, reused: bool) -> asyncio.Future[None]:
        """Write one request; the future resolves when its response has been read."""
        assert self.transport is not None
        self.reused = reused
        self.done = asyncio.get_running_loop().create_future()
        self._exchange = exchange
        self.transport.write(payload)
        return self.done

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Http1Pool:
    """Keep-alive connections to one origin; ``request`` writes a payload built by ``head``."""

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
        self._limit = asyncio.Semaphore(max_connections) if max_connections > 0 else None

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
            _, conn = await loop.create_connection(_Conn, self.host, self.port)
        except OSError as exc:
            raise ConnectFailed(
                exc.errno, f"cannot connect to {self.host}:{self.port}: {exc}"
            ) from exc
        return conn

    async def request(
        self, body: bytes, exchange: Exchange, on_sent: Callable[[int], None]
    ) -> None:
        """POST ``body``; ``on_sent(t_ns)`` right before writing; returns at the response's end."""
        payload = b"%d\r\n\r\n%b" % (len(body), body)
        payload = self._prefix + payload
        if self._limit is not None:
            async with self._limit:
                await self._request(payload, exchange, on_sent)
        else:
            await self._request(payload, exchange, on_sent)

    async def _request(
        self, payload: bytes, exchange: Exchange, on_sent: Callable[[int], None]
    ) -> None:
        for _ in range(2):
            conn = None
            reused = True
            while self._idle:
                candidate = self._idle.pop()
                if not candidate.closed:
                    conn = candidate
                    break
            if conn is None:
                conn = await self._connect()
                reused = False
            on_sent(time.monotonic_ns())
            done = conn.start(payload, exchange, reused)
            try:
                await done
            except _StaleConnection:
                continue  # the server closed it while idle: once more on a fresh one
            except BaseException:
                conn.close()
                raise
            if not conn.closed:
                self._idle.append(conn)
            return
        raise ConnectionResetError("the server closed the connection before answering")

    def close(self) -> None:
        """Close every idle connection."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()
