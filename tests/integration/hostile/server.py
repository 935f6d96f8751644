"""A hostile HTTP server: a real process on loopback that misbehaves on purpose, byte by byte.

The robustness tests need servers that break the protocol in ways no well-behaved framework
(aiohttp, the simulator) will produce: a status line that is not HTTP, a chunk size ``zz``, a
number too large for 64 bits, the API key echoed in an error, a 20 MB SSE line. This server
speaks HTTP/1.1 over raw asyncio streams and hands every request to a *behaviour*: an async
function ``behaviour(req, conn)`` that writes whatever bytes it likes. ``default(req, conn)``
answers like a correct OpenAI server (``GET /v1/models`` lists the model ``m``; a POST to
``…/completions`` streams ``tokens`` chunks of text and a usage chunk), so a behaviour overrides
only what it breaks.

Run: ``python -m tests.integration.hostile.server MODULE:FUNCTION [key=value ...]``; it prints
``PORT`` on its first stdout line, then serves until killed. Every request it receives is logged
as one JSON line (method, path, headers, body) to the file named by the ``log=`` option, so a
test can see what veeksha sent (the ``Authorization`` header of a redirected probe, say).
``HostileServer`` (in ``tests.integration.hostile.harness``) starts and stops it from a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conn", "Request", "default", "sse_events", "stream_sse"]

MODEL = "m"


@dataclass
class Request:
    """One request as received: ``index`` counts the POSTs the server has seen (0-based)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    index: int
    options: dict[str, str]
    server: Server

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    @property
    def chat(self) -> bool:
        return self.path.endswith("/chat/completions")

    def option(self, name: str, default: str) -> str:
        return self.options.get(name, default)

    @property
    def max_tokens(self) -> int:
        body = self.json or {}
        value = body.get("max_completion_tokens") or body.get("max_tokens") or 4
        return int(value)


@dataclass
class Conn:
    """The connection a request came on; ``keep_alive = False`` closes it after the answer."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    keep_alive: bool = True

    async def send(self, data: bytes, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        self.writer.write(data)
        await self.writer.drain()

    async def send_bytewise(self, data: bytes, gap: float) -> None:
        """Send ``data`` one byte at a time, ``gap`` seconds apart (a slowloris server)."""
        for i in range(len(data)):
            await self.send(data[i : i + 1], gap)

    def close(self) -> None:
        self.keep_alive = False
        with contextlib.suppress(Exception):
            self.writer.transport.abort()


Behaviour = Callable[[Request, Conn], Awaitable[None]]


# ---------------------------------------------------------------------------- correct answers


def json_response(status: int, obj: Any, *, reason: str = "OK", extra: str = "") -> bytes:
    body = json.dumps(obj).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def chunk(data: bytes) -> bytes:
    """One chunk of a ``Transfer-Encoding: chunked`` body."""
    return b"%x\r\n%b\r\n" % (len(data), data)


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
LAST_CHUNK = b"0\r\n\r\n"


def content_event(req: Request, text: str) -> bytes:
    choice: dict[str, Any] = (
        {"index": 0, "delta": {"content": text}} if req.chat else {"index": 0, "text": text}
    )
    return b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n"


def usage_event(prompt_tokens: Any, completion_tokens: Any, **extra: Any) -> bytes:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return b"data: " + json.dumps({"choices": [], "usage": usage, **extra}).encode() + b"\n\n"


def sse_events(req: Request, tokens: int | None = None) -> list[bytes]:
    """The events of a correct streamed answer: ``tokens`` content chunks, usage, ``[DONE]``."""
    n = req.max_tokens if tokens is None else tokens
    events = [content_event(req, f"t{i} ") for i in range(n)]
    events.append(usage_event(10, n))
    events.append(b"data: [DONE]\n\n")
    return events


async def stream_sse(conn: Conn, events: list[bytes], gap: float = 0.0) -> None:
    """Send ``events`` as a correct chunked SSE response, one chunk each, ``gap`` s apart."""
    await conn.send(STREAM_HEAD)
    for event in events:
        await conn.send(chunk(event), gap)
    await conn.send(LAST_CHUNK)


async def default(req: Request, conn: Conn) -> None:
    """What a correct OpenAI-compatible server answers."""
    if req.method == "GET" and req.path.endswith("/models"):
        await conn.send(json_response(200, {"object": "list", "data": [{"id": MODEL}]}))
    elif req.method == "POST" and req.path.endswith("completions"):
        await stream_sse(conn, sse_events(req), float(req.option("gap", "0")))
    else:
        await conn.send(json_response(404, {"error": {"message": "not found"}}, reason="NF"))


# ------------------------------------------------------------------------------------ server


@dataclass
class Server:
    behaviour: Behaviour
    options: dict[str, str]
    posts: int = 0
    log: Any = None
    state: dict[str, Any] = field(default_factory=dict)  # for behaviours that count

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Conn(reader, writer)
        try:
            while conn.keep_alive:
                req = await self._read(reader)
                if req is None:
                    break
                await self.behaviour(req, conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _read(self, reader: asyncio.StreamReader) -> Request | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        index = self.posts
        if method == "POST":
            self.posts += 1
        if self.log is not None:
            entry = {"method": method, "path": path, "headers": headers, "body": body.decode()}
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()
        return Request(method, path, headers, body, index, self.options, self)


def load_behaviour(spec: str) -> Behaviour:
    module_name, _, function = spec.partition(":")
    return getattr(importlib.import_module(module_name), function)  # type: ignore[no-any-return]


async def serve(server: Server, options: dict[str, str], port_fd: int | None = None) -> None:
    listener = await asyncio.start_server(
        server.handle, "127.0.0.1", int(options.get("port", "0")), limit=1 << 26
    )
    port = listener.sockets[0].getsockname()[1]
    if port_fd is None:
        print(port, flush=True)
    else:
        os.write(port_fd, f"{port}\n".encode())
        os.close(port_fd)
    async with listener:
        await listener.serve_forever()


def main(argv: list[str], port_fd: int | None = None) -> None:
    """Serve ``argv`` (``MODULE:FUNCTION key=value ...``) until killed; the port goes to stdout,
    or to the file descriptor ``port_fd`` (``HostileServer``'s forked server)."""
    options = dict(arg.partition("=")[::2] for arg in argv[1:])
    server = Server(load_behaviour(argv[0]), options)
    if "log" in options:
        server.log = open(options["log"], "a")  # noqa: SIM115 - open for the process' life
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(server, options, port_fd))


if __name__ == "__main__":
    main(sys.argv[1:])
