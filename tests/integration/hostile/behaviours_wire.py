"""Behaviours that break the wire protocol: long lines, bad bytes where HTTP or SSE has rules,
interim and bodiless responses, bytes after the end, a byte order mark.

Each breaks only the POSTs it names (``req.index``, 0-based, or an option ``at``) and answers
the others as ``default`` does, so a test can tell the broken request's row from its neighbours'.
The stray-byte behaviours remember every connection they left stray bytes on; a request that
arrives on such a connection again is answered 500 ("reused after stray bytes"), so a client that
reuses one shows up as an error row.
"""

from __future__ import annotations

import asyncio

from tests.integration.hostile.server import (
    LAST_CHUNK,
    STREAM_HEAD,
    Conn,
    Request,
    chunk,
    content_event,
    default,
    json_response,
    sse_events,
    stream_sse,
)

BOM = b"\xef\xbb\xbf"
STRAY = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray"


def _broken(req: Request) -> bool:
    """Whether this request is the one to break (the POST numbered ``at``, default 0)."""
    return req.method == "POST" and req.index == int(req.option("at", "0"))


async def long_line(req: Request, conn: Conn) -> None:
    """The broken POST's answer is one content event whose text is ``mb`` MB of ``x``."""
    if not _broken(req):
        await default(req, conn)
        return
    text = "x" * int(float(req.option("mb", "20")) * (1 << 20))
    await stream_sse(conn, [content_event(req, text), *sse_events(req, 0)])


async def invalid_utf8(req: Request, conn: Conn) -> None:
    """The second content chunk holds a byte that is not UTF-8 (``\\xff``) in its text."""
    if not _broken(req):
        await default(req, conn)
        return
    events = sse_events(req)
    events[1] = events[1].replace(b"t1 ", b"t1\xff ")
    await stream_sse(conn, events)


async def status_2xx(req: Request, conn: Conn) -> None:
    """A status line whose code is not a number: ``HTTP/1.1 2xx OK``."""
    if not _broken(req):
        await default(req, conn)
        return
    await conn.send(STREAM_HEAD.replace(b"200 OK", b"2xx OK"))
    for event in sse_events(req):
        await conn.send(chunk(event))
    await conn.send(LAST_CHUNK)


async def header_without_colon(req: Request, conn: Conn) -> None:
    """A header line with no colon in the head."""
    if not _broken(req):
        await default(req, conn)
        return
    await conn.send(STREAM_HEAD.replace(b"\r\n\r\n", b"\r\nthis is no header\r\n\r\n"))
    for event in sse_events(req):
        await conn.send(chunk(event))
    await conn.send(LAST_CHUNK)


async def bad_chunk_size(req: Request, conn: Conn) -> None:
    """After two good chunks, a chunk whose size line is the option ``size`` (``zz``); in a
    write of its own unless the option ``joined`` is set (then all in one write)."""
    if not _broken(req):
        await default(req, conn)
        return
    events = sse_events(req)
    good = STREAM_HEAD + chunk(events[0]) + chunk(events[1])
    bad = b"%b\r\n%b\r\n" % (req.option("size", "zz").encode(), events[2])
    if req.option("joined", ""):
        await conn.send(good + bad)
    else:
        await conn.send(good)
        await conn.send(bad, 0.05)
    await asyncio.sleep(30)  # then nothing: only the parse can end this request quickly


async def huge_head(req: Request, conn: Conn) -> None:
    """A response head of ``kb`` KB (many headers), sent in 1 KB writes, never ending."""
    if not _broken(req):
        await default(req, conn)
        return
    await conn.send(STREAM_HEAD[:-2])
    line = b"X-Pad: " + b"v" * 1016 + b"\r\n"
    for _ in range(int(req.option("kb", "80"))):
        await conn.send(line)
    await asyncio.sleep(30)


async def interim_responses(req: Request, conn: Conn) -> None:
    """``103 Early Hints`` and ``100 Continue`` before the real answer (of every POST)."""
    if req.method != "POST":
        await default(req, conn)
        return
    await conn.send(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
    await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n", 0.02)
    await asyncio.sleep(0.02)
    await stream_sse(conn, sse_events(req))


async def no_content(req: Request, conn: Conn) -> None:
    """``204 No Content`` to the broken POST; the connection stays open."""
    if not _broken(req):
        await default(req, conn)
        return
    await conn.send(b"HTTP/1.1 204 No Content\r\n\r\n")


async def bad_content_length(req: Request, conn: Conn) -> None:
    """A ``Content-Length`` of ``length`` (``-5``) before an SSE body; the connection stays."""
    if not _broken(req):
        await default(req, conn)
        return
    length = req.option("length", "-5")
    body = b"".join(sse_events(req))
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    await conn.send(head.encode() + body)
    await asyncio.sleep(30)


async def bom_first(req: Request, conn: Conn) -> None:
    """Every answer starts with a UTF-8 byte order mark, in the first chunk or (``split``)
    one byte of it per chunk."""
    if req.method != "POST":
        await default(req, conn)
        return
    events = sse_events(req)
    if req.option("split", "0") == "1":
        await conn.send(STREAM_HEAD + b"".join(chunk(BOM[i : i + 1]) for i in range(3)))
    else:
        await conn.send(STREAM_HEAD)
        events[0] = BOM + events[0]
    for event in events:
        await conn.send(chunk(event))
    await conn.send(LAST_CHUNK)


async def data_after_done(req: Request, conn: Conn) -> None:
    """Every answer goes on after ``data: [DONE]``: more events and garbage, in the [DONE]
    chunk (``where=same``) or in a chunk of their own 150 ms later (``where=later``), before
    the last chunk."""
    if await _refused_reuse(req, conn):
        return
    if req.method != "POST":
        await default(req, conn)
        return
    events = sse_events(req)
    after = content_event(req, "AFTER") + b"data: {not json\n\n"
    if req.option("where", "same") == "same":
        events[-1] += after
        await stream_sse(conn, events)
    else:
        await conn.send(STREAM_HEAD)
        for event in events:
            await conn.send(chunk(event))
        await conn.send(chunk(after) + LAST_CHUNK, 0.15)
    _mark(req, conn)


async def stray_after_response(req: Request, conn: Conn) -> None:
    """Every answer is followed by stray bytes: in the same write as its end (``when=end``) or
    50 ms later, on the then idle connection (``when=idle``). The answer is framed by chunks
    or (``framing=length``) by ``Content-Length``."""
    if await _refused_reuse(req, conn):
        return
    if req.method != "POST":
        await default(req, conn)
        return
    body = b"".join(sse_events(req))
    if req.option("framing", "chunked") == "length":
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        answer = head + body
    else:
        answer = STREAM_HEAD + chunk(body) + LAST_CHUNK
    if req.option("when", "end") == "end":
        await conn.send(answer + STRAY)
    else:
        await conn.send(answer)
        await conn.send(STRAY, 0.05)
    _mark(req, conn)


def _mark(req: Request, conn: Conn) -> None:
    req.server.state.setdefault("dirty", []).append(conn)  # (a strong reference: ids stay)


async def _refused_reuse(req: Request, conn: Conn) -> bool:
    """Answer 500 to a request on a connection this server left stray bytes on."""
    if not any(c is conn for c in req.server.state.get("dirty", [])):
        return False
    error = {"error": {"message": "reused after stray bytes"}}
    await conn.send(json_response(500, error, reason="ERR"))
    return True
