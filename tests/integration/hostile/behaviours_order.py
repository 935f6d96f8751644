"""Behaviours of the timestamp-order stress test: a worker kept busy by a few huge answers."""

from __future__ import annotations

import json

from tests.integration.hostile.server import Conn, Request, content_event, default, stream_sse


async def huge_last_turns(req: Request, conn: Conn) -> None:
    """The third turn of a chat (five messages) is answered by one content chunk of ``mb`` MB in
    one SSE line, sent in 64 KB writes: the worker's loop parses it while other requests due
    to it wait (the conditions of a busy worker); everything else is answered correctly."""
    body = req.json or {}
    if req.method == "POST" and len(body.get("messages", [])) == 5:
        size = int(float(req.option("mb", "4")) * 1_000_000)
        event = content_event(req, "x" * size)
        usage = {"prompt_tokens": 10, "completion_tokens": 1}
        tail = b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
        await stream_sse(conn, [event, tail, b"data: [DONE]\n\n"])
        return
    await default(req, conn)
