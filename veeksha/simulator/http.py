"""A minimal HTTP/1.1 server protocol for the simulator: keep-alive, pipelining, chunked bodies.

Hand-written on ``asyncio.Protocol`` (run on uvloop) because the simulator's own CPU cost is part
of every measurement: no per-request objects beyond ``Request``, no logging, no header dicts for
the response. Only what an OpenAI client sends is understood; anything else gets a 4xx and, when
the framing itself is broken, the connection is closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, cast

__all__ = ["HttpConnection", "Request", "RequestHandler", "chunk", "response_head"]

MAX_HEAD = 64 * 1024
MAX_BODY = 64 * 1024 * 1024

_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    411: b"Length Required",
    413: b"Payload Too Large",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}


def chunk(data: bytes) -> bytes:
    """One chunk of a ``Transfer-Encoding: chunked`` body."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def response_head(
    status: int,
    content_type: bytes,
    *,
    length: int | None = None,
    keep_alive: bool = True,
    extra: bytes = b"",
) -> bytes:
    """Status line and headers; chunked when ``length`` is None. ``extra``: raw header lines."""
    reason = _REASONS.get(status, b"Unknown")
    framing = (
        b"transfer-encoding: chunked\r\n" if length is None else b"content-length: %d\r\n" % length
    )
    conn = b"" if keep_alive else b"connection: close\r\n"
    return b"HTTP/1.1 %d %b\r\ncontent-type: %b\r\n%b%b%b\r\n" % (
        status,
        reason,
        content_type,
        framing,
        conn,
        extra,
    )


class Request:
    """One parsed HTTP request."""

    __slots__ = ("arrival_ns", "body", "headers", "keep_alive", "method", "path", "query")

    def __init__(
        self,
        method: bytes,
        path: bytes,
        headers: dict[bytes, bytes],
        body: bytes,
        keep_alive: bool,
        arrival_ns: int,
        query: bytes = b"",
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive
        self.arrival_ns = arrival_ns


class RequestHandler(Protocol):
    """What the connection hands each request to. It must end with ``conn.finish()``."""

    def handle(self, conn: HttpConnection, request: Request) -> None: ...

    def bad_request(self, conn: HttpConnection, status: int, message: str) -> None: ...


class _FramingError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _parse_chunked(buf: bytes, start: int) -> tuple[bytes, int] | None:
    """Decode a chunked body from ``buf[start:]``; (body, end offset) or None if incomplete."""
    parts: list[bytes] = []
    pos = start
    total = 0
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(buf[pos:eol].split(b";", 1)[0], 16)
        except ValueError:
            raise _FramingError(400, "invalid chunk size") from None
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", pos - 2)  # skip optional trailers
            return (b"".join(parts), end + 4) if end >= 0 else None
        total += size
        if total > MAX_BODY:
            raise _FramingError(413, "request body too large")
        if len(buf) < pos + size + 2:
            return None
        parts.append(buf[pos : pos + size])
        pos += size + 2


class HttpConnection(asyncio.Protocol):
    """One client connection. Requests are handled one at a time, in order (pipelining safe).

    The handler writes through ``transport`` and calls ``finish()`` when its response is
    complete; ``on_lost`` (set by the handler) runs if the client goes away before that.
    """

    __slots__ = ("_buf", "_handler", "busy", "closed", "keep_alive", "on_lost", "transport")

    def __init__(self, handler: RequestHandler) -> None:
        self._handler = handler
        self._buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self.on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        callback, self.on_lost = self.on_lost, None
        if callback is not None:
            callback()

    def data_received(self, data: bytes) -> None:
        self._buf = self._buf + data if self._buf else data
        if not self.busy:
            self._next()

    def write(self, data: bytes) -> None:
        """Write to the client unless it is gone."""
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def close(self) -> None:
        """Close the connection (FIN after pending data)."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def finish(self) -> None:
        """The current response is complete: close or go on with the next request."""
        self.busy = False
        self.on_lost = None
        if self.closed:
            return
        if not self.keep_alive:
            self.close()
        elif self._buf:
            self._next()

    def _next(self) -> None:
        try:
            request = self._parse()
        except _FramingError as exc:
            self.busy = True
            self.keep_alive = False
            self._handler.bad_request(self, exc.status, str(exc))
            return
        if request is not None:
            self.busy = True
            self.keep_alive = request.keep_alive
            self._handler.handle(self, request)

    def _parse(self) -> Request | None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise _FramingError(431, "request head too large")
            return None
        arrival_ns = time.monotonic_ns()
        lines = buf[:end].split(b"\r\n")
        try:
            method, target, version = lines[0].split(b" ")
        except ValueError:
            raise _FramingError(400, "malformed request line") from None
        headers: dict[bytes, bytes] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise _FramingError(400, "malformed header line")
            headers[name.strip().lower()] = value.strip()
        start = end + 4
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            parsed = _parse_chunked(buf, start)
            if parsed is None:
                return None
            body, stop = parsed
        else:
            try:
                length = int(headers.get(b"content-length", b"0"))
            except ValueError:
                raise _FramingError(400, "invalid content-length") from None
            if length < 0 or length > MAX_BODY:
                raise _FramingError(413, "request body too large")
            stop = start + length
            if len(buf) < stop:
                if headers.get(b"expect", b"").lower() == b"100-continue" and len(buf) == start:
                    self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                return None
            body = buf[start:stop]
        self._buf = buf[stop:]
        conn = headers.get(b"connection", b"").lower()
        keep_alive = conn != b"close" if version == b"HTTP/1.1" else conn == b"keep-alive"
        path, _, query = target.partition(b"?")
        return Request(method, path, headers, body, keep_alive, arrival_ns, query)
