"""Behaviours of the misbehaviours veeksha already holds against (``test_held.py``).

Each one answers the start-up probe (``GET /v1/models``) correctly and misbehaves on the POSTs
only, in one way, as real proxies, gateways and half-finished servers do. Unless it says
otherwise, a behaviour means to answer ``t0 t1 ... t{n-1} `` (n = the request's max tokens),
the answer of ``server.default``, so a test can compare what veeksha took the answer to be.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import socket
import struct
import zlib
from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

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
    usage_event,
)

Behaviour = Callable[[Request, Conn], Awaitable[None]]

_EOLS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}
_FOREVER_S = 3600.0


def posts_only(behaviour: Behaviour) -> Behaviour:
    """Misbehave on POSTs; answer everything else (the probe) like a correct server."""

    @wraps(behaviour)
    async def wrapped(req: Request, conn: Conn) -> None:
        if req.method != "POST":
            await default(req, conn)
        else:
            await behaviour(req, conn)

    return wrapped


def with_eol(event: bytes, eol: bytes) -> bytes:
    """``event`` (LF line ends) with ``eol`` line ends instead."""
    return event.replace(b"\n", eol)


def reset(conn: Conn) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0), not a FIN."""
    sock = conn.writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


def head(status: str = "200 OK", *lines: str, version: str = "HTTP/1.1") -> bytes:
    """A response head: status line, the given header lines, the blank line."""
    return "".join(f"{line}\r\n" for line in (f"{version} {status}", *lines, "")).encode()


def _chat_completion(text: str, tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": tokens, "total_tokens": 10 + tokens},
    }


def _answer(req: Request) -> str:
    return "".join(f"t{i} " for i in range(req.max_tokens))


# ------------------------------------------------------------------------- bytes and framing


@posts_only
async def bytewise(req: Request, conn: Conn) -> None:
    """A chunked SSE stream written one byte per write (chunk sizes, ``data:`` and line ends
    split across reads); options ``eol`` (lf, crlf, cr) and ``text=utf8`` (multi-byte UTF-8 and
    emoji as raw bytes, not escaped)."""
    eol = _EOLS[req.option("eol", "lf")]
    if req.option("text", "") == "utf8":
        words = [f"é{i}😀日本 " for i in range(req.max_tokens)]
        events = [
            b"data: "
            + json.dumps(
                {"choices": [{"index": 0, "delta": {"content": w}}]}, ensure_ascii=False
            ).encode()
            + b"\n\n"
            for w in words
        ]
        events += [usage_event(10, req.max_tokens), b"data: [DONE]\n\n"]
    else:
        events = sse_events(req)
    body = b"".join(chunk(with_eol(e, eol)) for e in events) + LAST_CHUNK
    await conn.send(STREAM_HEAD)
    await conn.send_bytewise(body, float(req.option("gap", "0.0005")))


@posts_only
async def line_ends(req: Request, conn: Conn) -> None:
    """Each event its own chunk, with ``eol`` line ends (crlf or a lone cr)."""
    eol = _EOLS[req.option("eol", "crlf")]
    await stream_sse(conn, [with_eol(e, eol) for e in sse_events(req)])


@posts_only
async def rechunked(req: Request, conn: Conn) -> None:
    """The SSE bytes cut into chunks of ``size`` bytes regardless of events (``size`` 7: every
    event split across chunks; a large size: several events in one chunk)."""
    data = b"".join(sse_events(req))
    size = int(req.option("size", "7"))
    await conn.send(STREAM_HEAD)
    for i in range(0, len(data), size):
        await conn.send(chunk(data[i : i + size]))
    await conn.send(LAST_CHUNK)


@posts_only
async def chunk_extras(req: Request, conn: Conn) -> None:
    """Chunked framing's rarely used parts: an extension on every chunk size
    (``5;name=val;q="a b"``, the last chunk's too) and trailer fields after the last chunk."""
    await conn.send(
        head(
            "200 OK",
            "Content-Type: text/event-stream",
            "Transfer-Encoding: chunked",
            "Trailer: X-Checksum, X-Tokens",
        )
    )
    for event in sse_events(req):
        await conn.send(b'%x;name=val;q="a b"\r\n%b\r\n' % (len(event), event))
    await conn.send(b"0;last=1\r\nX-Checksum: abc123\r\nX-Tokens: %d\r\n\r\n" % req.max_tokens)


@posts_only
async def http10_close(req: Request, conn: Conn) -> None:
    """An HTTP/1.0 answer with ``Connection: close``, its body framed by the end of the
    connection (no length, not chunked)."""
    await conn.send(
        head("200 OK", "Content-Type: text/event-stream", "Connection: close", version="HTTP/1.0")
    )
    for event in sse_events(req):
        await conn.send(event)
    conn.keep_alive = False  # the server closes (a FIN, after the bytes) when it returns


@posts_only
async def content_length(req: Request, conn: Conn) -> None:
    """An SSE stream framed by ``Content-Length`` (not chunked), one event per write."""
    events = sse_events(req)
    await conn.send(
        head(
            "200 OK",
            "Content-Type: text/event-stream",
            f"Content-Length: {sum(len(e) for e in events)}",
        )
    )
    for event in events:
        await conn.send(event)


@posts_only
async def compressed_stream(req: Request, conn: Conn) -> None:
    """The stream compressed although veeksha asks for ``identity``: ``encoding=gzip`` flushes
    the compressor after every event (one chunk each, as a gzip proxy in front of a stream
    does); ``encoding=br`` sends bytes labelled brotli."""
    encoding = req.option("encoding", "gzip")
    await conn.send(
        head(
            "200 OK",
            "Content-Type: text/event-stream",
            f"Content-Encoding: {encoding}",
            "Transfer-Encoding: chunked",
        )
    )
    if encoding == "gzip":
        compressor = zlib.compressobj(wbits=31)
        for event in sse_events(req):
            await conn.send(chunk(compressor.compress(event) + compressor.flush(zlib.Z_SYNC_FLUSH)))
        await conn.send(chunk(compressor.flush()))
    else:
        await conn.send(chunk(b"\x1b\x00\xf8\xa5\x03\x00brotli-ish"))
    await conn.send(LAST_CHUNK)


@posts_only
async def gzip_json(req: Request, conn: Conn) -> None:
    """``Content-Encoding: gzip`` on a non-streamed JSON answer."""
    body = gzip.compress(json.dumps(_chat_completion(_answer(req), req.max_tokens)).encode())
    await conn.send(
        head(
            "200 OK",
            "Content-Type: application/json",
            "Content-Encoding: gzip",
            f"Content-Length: {len(body)}",
        )
        + body
    )


# ----------------------------------------------------------------------------------- SSE syntax


@posts_only
async def sse_fields(req: Request, conn: Conn) -> None:
    """Comments (``: ping``) between events and ``event:``/``id:``/``retry:`` fields in them."""
    events = [b": ping\n\n", b":\n\n"]
    for i, event in enumerate(sse_events(req)):
        events.append(b"event: message\nid: %d\nretry: 1000\n%b" % (i, event))
        events.append(b": keep-alive %d\n\n" % i)
    await stream_sse(conn, events)


@posts_only
async def multiline_data(req: Request, conn: Conn) -> None:
    """Each JSON chunk spread over several ``data:`` lines (joined with a newline, which JSON
    reads as whitespace)."""
    events = []
    for event in sse_events(req):
        payload = event[len(b"data: ") : -2]
        if payload.startswith(b"{"):
            cut = payload.index(b":") + 1
            payload = payload[:cut] + b"\ndata: " + payload[cut:]
            payload = payload.replace(b', "', b',\ndata:"', 1)
        events.append(b"data: " + payload + b"\n\n")
    await stream_sse(conn, events)


@posts_only
async def no_done(req: Request, conn: Conn) -> None:
    """No ``[DONE]``, and the last event lacks its blank line: the stream just ends."""
    events = sse_events(req)[:-1]
    events[-1] = events[-1][:-2]
    await stream_sse(conn, events)


# ------------------------------------------------------------------------------- connections


@posts_only
async def close_after_each(req: Request, conn: Conn) -> None:
    """A correct answer, then the connection closed without a ``Connection: close`` header."""
    await default(req, conn)
    conn.keep_alive = False


@posts_only
async def connection_close_header(req: Request, conn: Conn) -> None:
    """``Connection: close`` on a chunked stream, then the connection closed."""
    await conn.send(
        head(
            "200 OK",
            "Content-Type: text/event-stream",
            "Transfer-Encoding: chunked",
            "Connection: close",
        )
    )
    for event in sse_events(req):
        await conn.send(chunk(event))
    await conn.send(LAST_CHUNK)
    conn.keep_alive = False


@posts_only
async def reset_reused(req: Request, conn: Conn) -> None:
    """A connection's first request is answered; any later request on it is reset unanswered
    (a keep-alive connection the server dropped as the request arrived)."""
    if vars(conn).get("served"):  # (a mark on the object: an id() is reused once it is freed)
        reset(conn)
        return
    vars(conn)["served"] = True
    await default(req, conn)


@posts_only
async def reset_midstream(req: Request, conn: Conn) -> None:
    """Three content chunks, then the connection reset (RST)."""
    await conn.send(STREAM_HEAD)
    for i in range(3):
        await conn.send(chunk(content_event(req, f"t{i} ")))
    await asyncio.sleep(0.05)
    reset(conn)


# ----------------------------------------------------------------------------- HTTP statuses


@posts_only
async def retry_once(req: Request, conn: Conn) -> None:
    """Each request's first attempt gets ``status`` (429 or 503) with ``Retry-After: 0.1``; its
    second attempt (the same body) a correct answer."""
    seen: set[str] = req.server.state.setdefault("seen", set())
    digest = hashlib.sha256(req.body).hexdigest()
    if digest in seen:
        await default(req, conn)
        return
    seen.add(digest)
    status = int(req.option("status", "429"))
    reason = "Too Many Requests" if status == 429 else "Service Unavailable"
    error = {"error": {"message": "slow down", "type": "rate_limit", "code": status}}
    await conn.send(json_response(status, error, reason=reason, extra="Retry-After: 0.1\r\n"))


@posts_only
async def always_429(req: Request, conn: Conn) -> None:
    """Every POST: 429 with a JSON error body and a ``Retry-After``."""
    error = {"error": {"message": "rate limit reached", "type": "rate_limit", "code": 429}}
    await conn.send(
        json_response(429, error, reason="Too Many Requests", extra="Retry-After: 1\r\n")
    )


HTML_500 = (
    b"<html>\r\n<head><title>500 Internal Server Error</title></head>\r\n"
    b"<body><center><h1>500 Internal Server Error</h1></center><hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)


@posts_only
async def html_500(req: Request, conn: Conn) -> None:
    """A gateway's 500 page in HTML."""
    await conn.send(
        head(
            "500 Internal Server Error",
            "Server: nginx",
            "Content-Type: text/html",
            f"Content-Length: {len(HTML_500)}",
        )
        + HTML_500
    )


@posts_only
async def empty_200(req: Request, conn: Conn) -> None:
    """200 ``text/event-stream`` with an empty body (``Content-Length: 0``)."""
    await conn.send(head("200 OK", "Content-Type: text/event-stream", "Content-Length: 0"))


@posts_only
async def stream_error(req: Request, conn: Conn) -> None:
    """Two content chunks, then an ``error`` object with ``code`` inside the 200 stream (as
    vLLM sends when generation fails)."""
    code = int(req.option("code", "503"))
    error = {"error": {"message": "engine overloaded", "type": "server_error", "code": code}}
    events = [content_event(req, "t0 "), content_event(req, "t1 ")]
    events.append(b"data: " + json.dumps(error).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    await stream_sse(conn, events)


# ------------------------------------------------------------------------------ time


@posts_only
async def never_ends(req: Request, conn: Conn) -> None:
    """Two content chunks, then silence with the connection open."""
    await conn.send(STREAM_HEAD)
    for i in range(2):
        await conn.send(chunk(content_event(req, f"t{i} ")))
    await asyncio.sleep(_FOREVER_S)


@posts_only
async def no_headers(req: Request, conn: Conn) -> None:
    """Reads the request and never answers (not even a status line)."""
    await asyncio.sleep(_FOREVER_S)


@posts_only
async def slowloris(req: Request, conn: Conn) -> None:
    """A correct stream whose content chunks come one every ``gap`` seconds."""
    gap = float(req.option("gap", "0.5"))
    await conn.send(STREAM_HEAD)
    for event in sse_events(req):
        await conn.send(chunk(event), gap if event.startswith(b'data: {"choices": [{') else 0)
    await conn.send(LAST_CHUNK)


# --------------------------------------------------------------------------- content shapes


@posts_only
async def nul_and_surrogate(req: Request, conn: Conn) -> None:
    """Content with a NUL (``\\u0000``) and, with ``surrogate=1``, a lone surrogate
    (``\\ud800``) escaped in the JSON."""
    texts = ["t0 ", "a\x00b "]
    if req.option("surrogate", "0") == "1":
        texts.append("x\ud800y ")
    events = [content_event(req, text) for text in texts]
    events += [usage_event(10, len(texts)), b"data: [DONE]\n\n"]
    await stream_sse(conn, events)


@posts_only
async def json_for_stream(req: Request, conn: Conn) -> None:
    """A whole non-streamed ``chat.completion`` (``application/json``) for a streamed request."""
    await conn.send(json_response(200, _chat_completion(_answer(req), req.max_tokens)))


@posts_only
async def message_not_delta(req: Request, conn: Conn) -> None:
    """Chat chunks whose text is in ``message`` instead of ``delta``."""
    events = []
    for i in range(req.max_tokens):
        choice = {"index": 0, "message": {"role": "assistant", "content": f"t{i} "}}
        events.append(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
    events += [usage_event(10, req.max_tokens), b"data: [DONE]\n\n"]
    await stream_sse(conn, events)


def _chunk_event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


@posts_only
async def empty_choices(req: Request, conn: Conn) -> None:
    """``choices: []`` chunks before, between and after the content, a role-only first delta,
    an empty-content delta and a finish chunk with an empty delta."""
    events = [
        _chunk_event({"choices": []}),
        _chunk_event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
        _chunk_event({"choices": [{"index": 0, "delta": {"content": ""}}]}),
    ]
    for i in range(req.max_tokens):
        events.append(content_event(req, f"t{i} "))
        events.append(_chunk_event({"choices": []}))
    events.append(_chunk_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    events += [usage_event(10, req.max_tokens), b"data: [DONE]\n\n"]
    await stream_sse(conn, events)


@posts_only
async def usage_variants(req: Request, conn: Conn) -> None:
    """``usage=none``: no usage anywhere; ``usage=in_last``: usage inside the last content
    chunk (no separate usage chunk)."""
    n = req.max_tokens
    events = [content_event(req, f"t{i} ") for i in range(n)]
    if req.option("usage", "none") == "in_last":
        last = json.loads(events[-1][len(b"data: ") :])
        last["usage"] = {"prompt_tokens": 10, "completion_tokens": n}
        events[-1] = _chunk_event(last)
    events.append(b"data: [DONE]\n\n")
    await stream_sse(conn, events)


@posts_only
async def tiny_chunks(req: Request, conn: Conn) -> None:
    """One chunk per 1-character token (the letters a..j over and over), written back to back."""
    n = req.max_tokens
    events = [content_event(req, "abcdefghij"[i % 10]) for i in range(n)]
    events += [usage_event(10, n), b"data: [DONE]\n\n"]
    await stream_sse(conn, events)
