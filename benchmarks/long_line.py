"""The worker's time to take in one long SSE line, and a response head sent one byte a read.

    python -m benchmarks.long_line [--sizes-mb 5,10,20] [--read-kb 64] [--head-kb 60]

A server may write one SSE line of many megabytes (a whole answer in one chunk, or a hostile
one). Each figure drives the worker's own objects, as ``benchmarks.worker_replay`` does: an
``_Exchange`` on an ``Http1Pool`` connection, ``data_received`` per read, no socket or loop.

- ``line``: one streamed response whose first event is a single ``data:`` line of N MB (a
  completions chunk with N MB of text), sent as one HTTP chunk per read of ``--read-kb``; then
  ``[DONE]`` and the last chunk. Reported: CPU seconds from the head to the Result, and the
  Result (ok, or the error a line over the limit gets).
- ``parser``: the same line through ``SSEParser.feed`` alone, with no line limit (where the
  parser takes one), so the growth with N shows beyond the worker's limit too.
- ``head``: a response head of ``--head-kb`` KB (many headers) fed one byte per read, then an
  empty chunked body.

Work linear in the bytes received shows as time proportional to N; re-joining and re-scanning
everything pending on every read shows as time growing with N².
"""

from __future__ import annotations

import argparse
import inspect
import socket
import time
from typing import Any

from benchmarks.worker_replay import offline_worker
from veeksha.dispatch.http1 import Http1Pool, _Conn
from veeksha.dispatch.messages import WorkItem
from veeksha.dispatch.openai import SSEParser
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
MB = 1 << 20


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def long_event(size: int) -> bytes:
    """One completions chunk event whose line is ``size`` bytes long (its blank line apart)."""
    before, after = b'data: {"choices":[{"index":0,"text":"', b'"}]}'
    return before + b"x" * (size - len(before) - len(after)) + after + b"\n\n"


def _worker() -> tuple[Worker, Http1Pool, _Conn, list[socket.socket]]:
    settings = WorkerSettings(
        endpoint="http://127.0.0.1:9/v1/completions",
        model="m",
        chat=False,
        max_tokens_param="max_tokens",
        request_timeout_s=3600,
    )
    worker, pool, conn, sockets = offline_worker(settings)
    return worker, pool, conn, list(sockets)


def _one_response(reads: list[bytes]) -> tuple[float, Any]:
    """CPU seconds for the worker to take ``reads`` as one response, and its Result."""
    worker, pool, conn, sockets = _worker()
    worker._start_http1(pool, WorkItem(0, [("user", "hi")], 1, 0), time.monotonic_ns())
    t = time.process_time()
    for read in reads:
        if conn.closed:
            break  # (the worker gave up on the response and closed the connection)
        conn.data_received(read)
    cpu = time.process_time() - t
    for s in sockets:
        s.close()
    (result,) = worker._outbox
    return cpu, result


def line_figure(size: int, read: int) -> tuple[float, str]:
    event = long_event(size)
    reads = [HEAD]
    reads += [_chunk(event[i : i + read]) for i in range(0, len(event), read)]
    reads += [_chunk(b"data: [DONE]\n\n"), b"0\r\n\r\n"]
    cpu, result = _one_response(reads)
    outcome = result.status if result.status == "ok" else f"{result.status} {result.error_kind}"
    if result.status == "ok":
        outcome += f", {len(result.output_text) / MB:.1f} MB of text"
    else:
        outcome += f": {result.error_message[:70]}"
    return cpu, outcome


def parser_figure(size: int, read: int) -> float:
    unbounded = "max_line" in inspect.signature(SSEParser).parameters
    parser = SSEParser(max_line=1 << 62) if unbounded else SSEParser()  # type: ignore[call-arg]
    event = long_event(size)
    pieces = [event[i : i + read] for i in range(0, len(event), read)]
    t = time.process_time()
    out: list[bytes] = []
    for piece in pieces:
        out += parser.feed(piece)
    cpu = time.process_time() - t
    assert [len(payload) for payload in out] == [size - 6], "the line's payload"
    return cpu


def head_figure(size: int) -> tuple[float, str]:
    head = HEAD[:-2]
    i = 0
    while len(head) < size:
        head += b"X-Pad-%d: %s\r\n" % (i, b"v" * 60)
        i += 1
    head += b"\r\n"
    reads = [head[i : i + 1] for i in range(len(head))]
    reads += [_chunk(b'data: {"choices":[{"text":"a"}]}\n\n'), b"0\r\n\r\n"]
    cpu, result = _one_response(reads)
    return cpu, result.status if result.status == "ok" else result.error_message[:70]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="5,10,20")
    parser.add_argument("--read-kb", type=int, default=64)
    parser.add_argument("--head-kb", type=int, default=60)
    args = parser.parse_args()
    read = args.read_kb * 1024
    sizes = [float(s) for s in args.sizes_mb.split(",")]
    print(f"one SSE line in {args.read_kb} KB reads (CPU seconds)")
    print("| line | worker | worker's result | SSEParser alone |")
    print("|---:|---:|---|---:|")
    for mb in sizes:
        size = int(mb * MB)
        cpu, outcome = line_figure(size, read)
        alone = parser_figure(size, read)
        print(f"| {mb:g} MB | {cpu:.3f} | {outcome} | {alone:.3f} |")
    cpu, outcome = head_figure(args.head_kb * 1024)
    print(f"\nresponse head of {args.head_kb} KB, one byte a read: {cpu:.3f} CPU-s ({outcome})")


if __name__ == "__main__":
    main()
