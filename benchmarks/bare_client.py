"""A bare open-loop streaming client for ``benchmarks.client_floor`` (run as a script).

    python benchmarks/bare_client.py HOST PORT RATE SECONDS DECODE

Nothing of veeksha: uvloop, a ``call_at`` per release on a fixed grid, a prebuilt completions
request written on a kept-alive connection, and per read a stamp, the SSE events split and
(``DECODE`` 1) each decoded to count its text, else counted by ``bytes.count``. Prints one JSON
line: requests done, the median time to the first read, reads and text per request.
"""

import asyncio
import json
import sys
import time

import msgspec
import uvloop

_DECODER = msgspec.json.Decoder()


class Stream(asyncio.Protocol):
    """One kept-alive connection; one request at a time, its reads stamped and counted."""

    def __init__(self, client: "Client") -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.sent = 0
        self.stamps: list[int] = []
        self.text = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def start(self) -> None:
        self.sent = time.monotonic_ns()
        self.stamps = []
        self.text = 0
        assert self.transport is not None
        self.transport.write(self.client.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        self.stamps.append(now)
        if self.client.decode:
            for piece in data.split(b"data: ")[1:]:
                line = piece.split(b"\n", 1)[0]
                if line.startswith(b"{"):
                    for choice in _DECODER.decode(line).get("choices") or ():
                        self.text += len(choice.get("text") or "")
        else:
            self.text += data.count(b"data: ")
        if data.endswith(b"0\r\n\r\n"):  # the chunked body's last chunk
            self.client.done(self, now)


class Client:
    """Releases ``rate`` requests a second for ``seconds``; keeps one tuple per answer."""

    def __init__(self, host: str, port: int, rate: float, seconds: float, decode: bool) -> None:
        self.host, self.port, self.decode = host, port, decode
        self.total = int(rate * seconds)
        self.interval = 1.0 / rate
        body = json.dumps(
            {
                "model": "veeksha-sim",
                "prompt": " ".join(["word"] * 128),
                "max_tokens": 32,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        ).encode()
        self.request = (
            b"POST /v1/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (host.encode(), len(body), body)
        )
        self.rows: list[tuple[int, int, int, int, int]] = []
        self.idle: list[Stream] = []
        self.finished: asyncio.Future[None] | None = None

    def done(self, stream: Stream, now: int) -> None:
        self.rows.append((stream.sent, stream.stamps[0], now, len(stream.stamps), stream.text))
        self.idle.append(stream)
        if len(self.rows) == self.total and self.finished is not None:
            self.finished.set_result(None)

    async def release(self) -> None:
        if self.idle:
            stream = self.idle.pop()
        else:
            loop = asyncio.get_running_loop()
            _, stream = await loop.create_connection(lambda: Stream(self), self.host, self.port)
        stream.start()

    async def run(self) -> dict[str, float]:
        loop = asyncio.get_running_loop()
        self.finished = loop.create_future()
        t0 = loop.time() + 0.05
        for i in range(self.total):
            loop.call_at(t0 + i * self.interval, lambda: loop.create_task(self.release()))
        await self.finished
        n = len(self.rows)
        first = sorted(r[1] - r[0] for r in self.rows)
        return {
            "requests": n,
            "first_read_p50_ms": first[n // 2] / 1e6,
            "reads_mean": sum(r[3] for r in self.rows) / n,
            "text_mean": sum(r[4] for r in self.rows) / n,
            "connections": len(self.idle),
        }


if __name__ == "__main__":
    host, port, rate, seconds, decode = sys.argv[1:6]
    client = Client(host, int(port), float(rate), float(seconds), decode == "1")
    print(json.dumps(uvloop.run(client.run())))
