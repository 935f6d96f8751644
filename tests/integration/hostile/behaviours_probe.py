"""Behaviours of the probe and key-masking tests: set-up calls answered badly, and a server that
echoes the API key back in every form a careless server or proxy could.

``setup_fault``: the call named by the ``where`` option (``models``: the start-up probe's
``GET /v1/models``; ``tokenize``: the server tokenizer's ``POST /tokenize``) is answered with the
``fault`` option (after ``after`` good answers, 0 by default); everything else is answered
correctly (``/tokenize`` and ``/detokenize`` as vLLM does, with the builtin tokenizer's ids).

``echo_key``: every completion request is answered with an error that quotes the request's key,
after a padding that puts it across veeksha's 300-character cut (see ``echo_forms``).
"""

from __future__ import annotations

import json
import urllib.parse

from tests.integration.hostile.server import (
    LAST_CHUNK,
    STREAM_HEAD,
    Conn,
    Request,
    chunk,
    default,
    json_response,
)
from veeksha.generate.tokenizer import BuiltinTokenizer

_TOKENIZER = BuiltinTokenizer()


async def setup_fault(req: Request, conn: Conn) -> None:
    if "/moved/" in req.path:  # the destination of a same-origin redirect: answered correctly
        req.path = req.path.replace("/moved", "", 1)
        await _correct(req, conn)
        return
    where = req.option("where", "models")
    models = req.method == "GET" and req.path.endswith("/models")
    if (where == "models" and models) or (where == "tokenize" and req.path == "/tokenize"):
        calls = req.server.state["calls"] = req.server.state.get("calls", 0) + 1
        if calls > int(req.option("after", "0")):  # the first ``after`` calls are answered well
            await _fault(req, conn, req.option("fault", "not_http"))
            return
    await _correct(req, conn)


async def _correct(req: Request, conn: Conn) -> None:
    if req.path in ("/tokenize", "/detokenize"):
        await tokenizer(req, conn)
    else:
        await default(req, conn)


async def tokenizer(req: Request, conn: Conn) -> None:
    """vLLM's ``/tokenize`` and ``/detokenize`` (builtin ids); the key, if any, must be right."""
    body = req.json or {}
    if req.path == "/tokenize":
        ids = _TOKENIZER.encode(str(body.get("prompt", "")))
        await conn.send(json_response(200, {"tokens": ids, "count": len(ids)}))
    else:
        text = _TOKENIZER.decode([int(t) for t in body.get("tokens", [])])
        await conn.send(json_response(200, {"prompt": text}))


async def _fault(req: Request, conn: Conn, fault: str) -> None:
    auth = req.headers.get("authorization", "")
    if fault == "not_http":  # the status line of another protocol, echoing what it was sent
        await conn.send(f"SSH-2.0-OpenSSH_9.6 {auth}\r\n\r\n".encode())
        conn.close()
    elif fault == "truncated":  # promises 1,000 bytes, sends 20, closes
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        await conn.send(head + b'{"object": "list", "')
        conn.close()
    elif fault == "slow_status":  # a byte a second (``gap``), never finishing in time
        gap = float(req.option("gap", "1"))
        await conn.send_bytewise(json_response(200, {"object": "list", "data": []}), gap)
    elif fault == "slow_body":  # head at once, then the body a byte a second
        body = json.dumps({"object": "list", "data": [{"id": "m"}], "pad": "x" * 60}).encode()
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        await conn.send(head)
        await conn.send_bytewise(body, float(req.option("gap", "1")))
    elif fault == "bad_length":
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\n{}")
    elif fault == "reset":  # read the request, then a TCP reset
        conn.close()
    elif fault == "not_json":
        body = b"<html><body>Welcome to nginx!</body></html>"
        head = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n\r\n"
        await conn.send(head.encode() + body)
    elif fault == "huge":  # an endless body
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
        for _ in range(64 * 1024):
            await conn.send(b"0," * 512)
        conn.close()
    elif fault == "redirect":  # 307 to the ``to`` option (another server, or this one)
        location = req.option("to", "") or "/moved" + req.path
        await conn.send(
            f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\n"
            "Content-Length: 0\r\n\r\n".encode()
        )
    elif fault == "redirect_loop":
        await conn.send(
            f"HTTP/1.1 302 Found\r\nLocation: {req.path}\r\nContent-Length: 0\r\n\r\n".encode()
        )
    elif fault == "unauthorized":
        await conn.send(json_response(401, {"error": {"message": f"bad key: {auth}"}}))
    else:
        raise ValueError(f"unknown fault {fault!r}")


# ---------------------------------------------------------------------------- echoing the key

#: How the key is quoted: as sent, JSON-escaped (``/`` as ``\\/``, as PHP and some proxies
#: write it), URL-encoded, in an SSE ``error`` event, in an SSE event that is not JSON, in a
#: status line that is not HTTP.
echo_forms = ("raw", "json", "url", "url_plus", "stream_error", "malformed_event", "status_line")


def _pads(req: Request) -> tuple[str, int]:
    """(form, padding) of request ``index``: every form at every padding from ``lo`` to
    ``hi`` (options), so the key lies across any cut between them."""
    lo, hi = int(req.option("lo", "240")), int(req.option("hi", "310"))
    form = echo_forms[req.index % len(echo_forms)]
    pad = lo + (req.index // len(echo_forms)) % (hi - lo + 1)
    return form, pad


async def echo_key(req: Request, conn: Conn) -> None:
    if not (req.method == "POST" and req.path.endswith("completions")):
        await default(req, conn)
        return
    key = req.headers.get("authorization", "").removeprefix("Bearer ")
    form, pad = _pads(req)
    padding = "p" * pad
    if form == "raw":
        body = f"{padding}{key} rejected".encode()
        await conn.send(
            f"HTTP/1.1 401 Unauthorized\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )
    elif form == "json":
        text = json.dumps({"error": {"message": padding + key}}).replace("/", "\\/")
        body = text.encode()
        await conn.send(
            b"HTTP/1.1 500 Oops\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
    elif form in ("url", "url_plus"):
        quote = urllib.parse.quote_plus if form == "url_plus" else urllib.parse.quote
        body = f"{padding}?api_key={quote(key, safe='')}&next=1".encode()
        await conn.send(
            f"HTTP/1.1 403 Forbidden\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        )
    elif form == "stream_error":
        event = json.dumps({"error": {"message": padding + key, "code": 500}})
        await conn.send(STREAM_HEAD + chunk(f"data: {event}\n\n".encode()) + LAST_CHUNK)
    elif form == "malformed_event":
        event = f"data: {padding}{key}\n\n".encode()
        await conn.send(STREAM_HEAD + chunk(event) + LAST_CHUNK)
    else:
        await conn.send(f"SSH-2.0 {padding}{key}\r\n\r\n".encode())
        conn.close()
