"""Small HTTP helpers for the simulator tests (stdlib and aiohttp, every call time-bounded)."""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import urllib.parse
import zlib
from dataclasses import dataclass
from typing import Any

MODEL = "veeksha-sim"


@dataclass
class Reply:
    """A whole HTTP response."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[str]:
        """The SSE ``data:`` payloads, in order."""
        return [
            line[len("data: ") :]
            for line in self.body.decode().split("\n")
            if line.startswith("data: ")
        ]

    def chunks(self) -> list[dict[str, Any]]:
        """The JSON SSE events (everything but ``[DONE]``)."""
        return [json.loads(e) for e in self.events() if e != "[DONE]"]


def request(url: str, body: Any = None, method: str = "POST", timeout: float = 10.0) -> Reply:
    """One request on a fresh connection; ``body`` is JSON-encoded unless bytes."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if data is not None else {}
        if method == "GET" and data is None:
            conn.request(method, parts.path, headers=headers)
        else:
            conn.request(method, parts.path, body=data, headers=headers)
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def chat(
    prompt: str = "ba be bi", max_tokens: int = 8, stream: bool = True, **extra: Any
) -> dict[str, Any]:
    """A chat request body."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def words(n: int, salt: str = "") -> str:
    """``n`` distinct-ish builtin-vocabulary words (``salt`` makes prompts unique per test)."""
    from veeksha.generate.tokenizer import BUILTIN_VOCAB

    start = zlib.crc32(salt.encode()) % 5000
    return " ".join(BUILTIN_VOCAB[90 + (start + i) % 8000] for i in range(n))


def content_of(chunks: list[dict[str, Any]]) -> str:
    """The concatenated streamed chat content."""
    return "".join(
        c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")
    )


async def timed_stream(
    url: str, body: dict[str, Any], limit_s: float = 10.0
) -> tuple[int, int, list[tuple[int, bytes]]]:
    """(sent_ns, status, [(receive_ns, bytes)]) of one streamed request, via aiohttp."""
    import aiohttp

    async with asyncio.timeout(limit_s), aiohttp.ClientSession() as session:
        sent = time.monotonic_ns()
        async with session.post(url, json=body) as resp:
            pieces = []
            async for data in resp.content.iter_any():
                pieces.append((time.monotonic_ns(), data))
            return sent, resp.status, pieces
