"""A tiny OpenAI-compatible streaming server for the dispatch tests (loopback, same event loop).

The last user message (or the last prompt line) is a command: words separated by spaces.
    delay=S        seconds between chunks (default 0)
    status=N       answer HTTP N with a short body
    retry=K        answer 429 (Retry-After: 0) to the first K attempts of this text
    hang           never answer
    reset=I        close the connection after I chunks
    garbage        send a malformed SSE event
    echo           answer 400 with the request's headers as the body (a proxy's echo)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web


class StubServer:
    """Start with ``await start()`` (returns the api_base), stop with ``await stop()``."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.attempts: dict[str, int] = {}
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/completions", self._handle)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            handler_cancellation=True,  # a client that gives up ends a "hang" handler
            shutdown_timeout=0.5,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        return f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        chat = "messages" in body
        text = body["messages"][-1]["content"] if chat else body["prompt"].split("\n")[-1]
        cmd = dict(w.partition("=")[::2] for w in text.split())
        n = body.get("max_completion_tokens") or body.get("max_tokens") or 4
        if "echo" in cmd:
            return web.json_response({"error": dict(request.headers)}, status=400)
        if "status" in cmd:
            return web.Response(status=int(cmd["status"]), text="boom: injected failure")
        if "retry" in cmd:
            seen = self.attempts[text] = self.attempts.get(text, 0) + 1
            if seen <= int(cmd["retry"]):
                return web.Response(status=429, headers={"Retry-After": "0"}, text="slow down")
        if "hang" in cmd:
            await asyncio.sleep(3600)
        delay = float(cmd.get("delay", 0))
        words = [f"w{i} " for i in range(n)]
        usage = {
            "prompt_tokens": 7,
            "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": 2},
        }
        if not body.get("stream"):
            choice = (
                {"message": {"role": "assistant", "content": "".join(words)}}
                if chat
                else {"text": "".join(words)}
            )
            return web.json_response({"choices": [choice], "usage": usage, "timings": {"n": n}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, word in enumerate(words):
            if "reset" in cmd and i == int(cmd["reset"]):
                assert request.transport is not None
                request.transport.abort()
                return resp
            if "garbage" in cmd and i == 1:
                await resp.write(b"data: {not json\n\n")
            choice = {"delta": {"content": word}} if chat else {"text": word}
            await resp.write(b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")
            if delay:
                await asyncio.sleep(delay)
        tail = {"choices": [], "usage": usage, "timings": {"n": n}}
        await resp.write(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp
