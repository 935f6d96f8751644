"""Behaviours that answer correctly but report absurd numbers (issue 21 items 1 and 5).

Only the **second turn** of each chat (a request whose history holds exactly one assistant
answer) gets the bad number, so a test knows which rows were hit (``node_id == 1``) and can
check that the rows around them, recorded in the same batches, are exact.

Options (text, spliced into the JSON as given, so they may be what ``json`` cannot write:
``1e400``, ``18446744073709551617``, ``-5``):

- ``completion=RAW``: the second turn's ``usage.completion_tokens``;
- ``prompt=RAW`` / ``cached=RAW``: its ``prompt_tokens`` / ``prompt_tokens_details.cached_tokens``;
- ``timings=RAW``: a ``timings`` object (JSON text) sent with its usage chunk;
- ``tokens=N``: the number of content chunks of every answer (default: max_tokens).

``numbers_streamed`` streams the answer; ``numbers_whole`` answers a non-streamed request with
one JSON body (``client.stream: false``).
"""

from __future__ import annotations

import json

from tests.integration.hostile.server import (
    Conn,
    Request,
    content_event,
    default,
    json_response,
    stream_sse,
)


def _second_turn(req: Request) -> bool:
    messages = (req.json or {}).get("messages") or []
    return sum(1 for m in messages if m.get("role") == "assistant") == 1


def _usage(req: Request, tokens: int) -> bytes:
    """The usage object's JSON text, with the bad numbers on a second turn."""
    bad = _second_turn(req)
    completion = req.option("completion", str(tokens)) if bad else str(tokens)
    prompt = req.option("prompt", "10") if bad else "10"
    cached = req.option("cached", "0") if bad else "0"
    return (
        b'{"prompt_tokens":%b,"completion_tokens":%b,"prompt_tokens_details":{"cached_tokens":%b}}'
        % (prompt.encode(), completion.encode(), cached.encode())
    )


def _timings(req: Request) -> bytes:
    raw = req.option("timings", "")
    return b',"timings":' + raw.encode() if raw and _second_turn(req) else b""


def _tokens(req: Request) -> int:
    return int(req.option("tokens", str(req.max_tokens)))


async def numbers_streamed(req: Request, conn: Conn) -> None:
    """A correct stream whose usage chunk (second turns) carries the numbers of the options."""
    if req.method != "POST":
        await default(req, conn)
        return
    n = _tokens(req)
    events = [content_event(req, f"t{i} ") for i in range(n)]
    events.append(b'data: {"choices":[],"usage":%b%b}\n\n' % (_usage(req, n), _timings(req)))
    events.append(b"data: [DONE]\n\n")
    await stream_sse(conn, events)


async def numbers_whole(req: Request, conn: Conn) -> None:
    """A correct non-streamed answer whose body (second turns) carries the options' numbers."""
    if req.method != "POST":
        await default(req, conn)
        return
    n = _tokens(req)
    text = "".join(f"t{i} " for i in range(n))
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "length"}
    if not req.chat:
        choice = {"index": 0, "text": text, "finish_reason": "length"}
    body = json.dumps({"id": "x", "choices": [choice]}).encode()[:-1]
    body += b',"usage":%b%b}' % (_usage(req, n), _timings(req))
    head = json_response(200, {})
    head = head[: head.index(b"Content-Length:")]
    await conn.send(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
