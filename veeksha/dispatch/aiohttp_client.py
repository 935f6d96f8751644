"""The worker's aiohttp client, for ``https`` endpoints (plain http uses ``http1.Http1Pool``).

Imported by the worker only when it needs it: aiohttp costs ~0.18 CPU-s to import, which a
worker on a plain-http target (the built-in simulator, most local servers) never pays.

``sent_at`` is taken when aiohttp starts writing the request (``write_bytes``) into the
per-task slot the worker sets in ``sent_slot`` (a context variable the write task inherits),
and the slot's third entry, when set, is called then (a request its user will abandon).
A connection the connector opens for a request not yet written (no idle kept-alive one) is timed
around the connector's ``_create_connection`` (name resolution, TCP connect and the TLS
handshake, until the connection is handed back to the request) into the slot's second entry, the
request's ``connect_ns``. Only a new connection pays for it (two clock reads and a context
variable look-up); a reused one goes through ``_get`` and nothing is added to its path, where
a ``TraceConfig`` would have cost every request a ``Trace`` object and the awaits of its
signals. (``_create_connection`` is aiohttp's own method, there since 3.0; a unit test proves
the timing against a server that completes the handshake late.)
"""

from __future__ import annotations

import contextvars
import time
from typing import Any

import aiohttp

from veeksha.dispatch.http1 import ConnectFailed
from veeksha.dispatch.openai import ResponseAccumulator, ResponseError
from veeksha.dispatch.settings import WorkerSettings
from veeksha.open_files import CLIENT_LIMIT_ERRNOS

__all__ = ["error_kind", "make_session", "protocol_error", "read_stream"]


def make_session(
    settings: WorkerSettings, sent_slot: contextvars.ContextVar[list[Any]]
) -> aiohttp.ClientSession:
    """One keep-alive session whose requests stamp ``sent_slot``'s slot when written."""

    class TimedRequest(aiohttp.ClientRequest):
        """Records when the request is written: aiohttp writes headers and body here."""

        async def write_bytes(self, *args: Any, **kwargs: Any) -> None:
            slot = sent_slot.get(None)
            if slot is not None and not slot[0]:
                slot[0] = time.monotonic_ns()
                if slot[2] is not None:  # (the request's abandonment starts from here)
                    slot[2]()
            await super().write_bytes(*args, **kwargs)

    class TimedConnector(aiohttp.TCPConnector):
        """Times the connections it opens for requests not yet written (see the docstring)."""

        async def _create_connection(self, *args: Any, **kwargs: Any) -> Any:
            start = time.monotonic_ns()
            proto = await super()._create_connection(*args, **kwargs)
            slot = sent_slot.get(None)
            if slot is not None and not slot[0]:
                slot[1] = time.monotonic_ns() - start
            return proto

    connector = TimedConnector(
        limit=settings.max_connections,
        limit_per_host=0,
        keepalive_timeout=60,
        enable_cleanup_closed=False,
    )
    return aiohttp.ClientSession(
        connector=connector,
        request_class=TimedRequest,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None),
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding",),
        headers={"User-Agent": "veeksha"},
    )


async def read_stream(content: aiohttp.StreamReader, acc: ResponseAccumulator, state: Any) -> None:
    """Feed an SSE body to ``acc``, one timestamp per read; ``state.last_byte_at`` = last read."""
    feed = acc.feed
    readany = content.readany
    monotonic_ns = time.monotonic_ns
    while True:
        data = await readany()
        if not data:
            break
        t = monotonic_ns()
        state.last_byte_at = t
        feed(data, t)
    acc.end(state.last_byte_at)
    if not acc.done and not acc.chunk_times_ns and acc.completion_tokens is None:
        raise ResponseError("malformed_response", "stream ended without any event")


def protocol_error(exc: BaseException) -> str | None:
    """What was malformed, when ``exc`` is aiohttp's failure to parse a response head (a bad
    status line, header or ``Content-Length``: the server's fault); else None."""
    if type(exc) is not aiohttp.ClientResponseError:  # (raised by the parser: no raise_for_status)
        return None
    lines = (line.strip() for line in str(exc.message).splitlines())
    return " ".join(line for line in lines if line.strip("^"))


def error_kind(exc: BaseException) -> str | None:
    """The ``error_kind`` of an aiohttp failure, or None when ``exc`` is not one."""
    if isinstance(exc, aiohttp.ClientConnectorError | ConnectFailed):
        # (this machine's limit, never the server's: veeksha.open_files)
        return "client_limit" if exc.errno in CLIENT_LIMIT_ERRNOS else "connection_refused"
    if isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientPayloadError
        | aiohttp.ClientOSError
        | aiohttp.ClientConnectionError,
    ):
        return "connection_reset"
    return None
