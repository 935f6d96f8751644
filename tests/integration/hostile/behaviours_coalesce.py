"""The coalesced-chunks test's behaviour: a streamed answer written whole in one write (its
chunks reach the client in one read), or one byte a write (each chunk in a read of its own),
turn by turn."""

from __future__ import annotations

from tests.integration.hostile.server import (
    LAST_CHUNK,
    STREAM_HEAD,
    Conn,
    Request,
    chunk,
    default,
    sse_events,
)


def _answer(req: Request) -> bytes:
    return STREAM_HEAD + b"".join(chunk(e) for e in sse_events(req)) + LAST_CHUNK


async def whole_then_bytewise(req: Request, conn: Conn) -> None:
    """POSTs 0 and 2 (turns 1 and 3 of a chat): one write; POST 1: one byte a write."""
    if req.method != "POST":
        await default(req, conn)
    elif req.index == 1:
        await conn.send_bytewise(_answer(req), 0.0005)
    else:
        await conn.send(_answer(req))
