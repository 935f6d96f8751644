"""Behaviours that fail a request well after its last byte: when did the request end?

Each misbehaves on the first turn of a chat only (a request whose conversation is one message),
and answers later turns correctly, so a test can see when the children of a failed request were
sent. Every failure comes ``after`` seconds (option, default 0.5) after the last byte sent:

- ``stall``: the stream's head and one content chunk, then nothing (the client's timeout ends it);
- ``reset``: the head and one content chunk, then, after ``after`` s, a TCP reset;
- ``error_500``: a 500 whose body comes in two parts, ``after`` s apart.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct

from tests.integration.hostile.server import (
    STREAM_HEAD,
    Conn,
    Request,
    chunk,
    content_event,
    default,
)


def _first_turn(req: Request) -> bool:
    body = req.json or {}
    return req.method == "POST" and len(body.get("messages", ())) == 1


def _after(req: Request) -> float:
    return float(req.option("after", "0.5"))


async def stall(req: Request, conn: Conn) -> None:
    """First turns: the head and one chunk, then silence until the client gives up."""
    if not _first_turn(req):
        await default(req, conn)
        return
    await conn.send(STREAM_HEAD + chunk(content_event(req, "t0 ")))
    await conn.reader.read()  # until the client closes the connection
    conn.close()


async def reset(req: Request, conn: Conn) -> None:
    """First turns: the head and one chunk, then a TCP reset ``after`` s later."""
    if not _first_turn(req):
        await default(req, conn)
        return
    await conn.send(STREAM_HEAD + chunk(content_event(req, "t0 ")))
    await asyncio.sleep(_after(req))
    sock = conn.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
    conn.close()


async def error_500(req: Request, conn: Conn) -> None:
    """First turns: HTTP 500, its body in two parts ``after`` s apart."""
    if not _first_turn(req):
        await default(req, conn)
        return
    body = json.dumps({"error": {"message": "the engine is overloaded"}}).encode()
    half = len(body) // 2
    await conn.send(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body[:half])
    )
    await conn.send(body[half:], _after(req))
