"""The streams figure's probe: where a worker's chunk timestamps wait (benchmarks only).

This folder is put first on ``PYTHONPATH`` by ``benchmarks.streams``; Python imports this
module at start-up in every process of the run. It does nothing unless ``VEEKSHA_PROBE_DIR`` is
set and the process is a worker (``python -m veeksha.dispatch.worker``). In a worker it wraps two
methods of ``veeksha.dispatch.http1`` (the plain-http client, the same in every revision since it
was written, so a previous commit is probed the same way; veeksha itself has no probe code):

- ``_Conn.data_received``: per read, the request, the clock before and after the worker took it
  (its parsing included), its size, and the loop *pass* it belongs to. A pass is the run of reads
  from one wake-up of the loop: it opens at its first read and closes in a ``call_soon``
  callback (after every I/O callback of that wake-up, and after a callback the first read
  scheduled itself, such as the parsing of ``Http1Pool(stamp_first=True)``). At a pass's start
  and end the worker's run-queue wait so far is read (``/proc/thread-self/schedstat``, field
  2): the time it was runnable while another process held its CPU. Per read also the thread's
  CPU time, so the wait inside a pass splits into the worker's own work and preemption.
- ``Http1Pool._ended``: per response, the request id, ``sent_at``, the client's chunk times and
  the server's ``timings`` (the simulator's ``arrival_ns`` and, with ``record_chunk_times``,
  ``chunk_ns``: when it wrote each content chunk).

Per garbage collection (``gc.callbacks``): its start, end and generation.

At exit the worker writes ``probe-<pid>.msgpack`` into ``VEEKSHA_PROBE_DIR``. The probe's own
cost: two clock reads and a few array appends a read, two small ``pread`` calls and a
``call_soon`` a pass (a few µs a pass).
"""

from __future__ import annotations

import os
import sys


def _install(out_dir: str) -> None:
    import asyncio
    import atexit
    import gc
    import time
    from array import array

    import msgspec

    from veeksha.dispatch import http1

    now = time.monotonic_ns
    cpu = time.thread_time_ns
    reads = array("q")  # per read: request id, t before, t after, pass, bytes, CPU time before
    # per pass: start, end, run delay at start and at end, CPU time at start and at end
    passes = array("q")
    # per response: request id, sent_at, chunks (client, server), the server's arrival; and the
    # chunk times of every response one after another (flat arrays: nothing for the collector)
    meta = array("q")
    client = array("q")
    server = array("q")
    collections = array("q")  # per garbage collection: start, end, generation
    gc_start = [0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = now()
        else:
            collections.extend((gc_start[0], now(), info["generation"]))

    gc.callbacks.append(on_gc)
    fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    state = {"open": False, "start": 0, "rd": 0, "index": -1, "cpu": 0}

    def run_delay() -> int:
        return int(os.pread(fd, 128, 0).split()[1])

    def close_pass() -> None:
        passes.extend((state["start"], now(), state["rd"], run_delay(), state["cpu"], cpu()))
        state["open"] = False

    received = http1._Conn.data_received

    def data_received(self: http1._Conn, data: bytes) -> None:
        t = now()
        c = cpu()
        first = not state["open"]
        if first:
            state["open"] = True
            state["start"] = t
            state["cpu"] = c
            state["rd"] = run_delay()
            state["index"] += 1
        exchange = self._exchange
        item = getattr(exchange, "item", None)
        request_id = item.request_id if item is not None else -1
        received(self, data)
        if first:  # (after the reader's own call_soon, if it made one: the pass ends after it)
            asyncio.get_running_loop().call_soon(close_pass)
        reads.extend((request_id, t, now(), state["index"], len(data), c))

    stamped = getattr(http1._Conn, "received_at", None)

    def received_at(self: http1._Conn, data: bytes, t_ns: int) -> None:
        t = now()  # (the read's time; the chunk's stamp is the kernel's, passed in)
        c = cpu()
        first = not state["open"]
        if first:
            state["open"] = True
            state["start"] = t
            state["cpu"] = c
            state["rd"] = run_delay()
            state["index"] += 1
        exchange = self._exchange
        item = getattr(exchange, "item", None)
        request_id = item.request_id if item is not None else -1
        stamped(self, data, t_ns)  # type: ignore[misc]
        if first:
            asyncio.get_running_loop().call_soon(close_pass)
        reads.extend((request_id, t, now(), state["index"], len(data), c))

    ended = http1.Http1Pool._ended

    def _ended(self: http1.Http1Pool, conn: object, exchange: object, exc: object) -> None:
        acc = getattr(exchange, "acc", None)
        item = getattr(exchange, "item", None)
        if acc is not None and item is not None and exc is None:
            timings = acc.server_timings or {}
            mine = acc.chunk_times_ns
            theirs = timings.get("chunk_ns") or ()
            client.extend(mine)
            server.extend(theirs)
            arrival = timings.get("arrival_ns")
            sent = getattr(exchange, "sent_at", 0)
            meta.extend((item.request_id, sent, len(mine), len(theirs), int(arrival or 0)))
        ended(self, conn, exchange, exc)  # type: ignore[arg-type]

    def dump() -> None:
        if state["open"]:
            close_pass()
        path = os.path.join(out_dir, f"probe-{os.getpid()}.msgpack")
        with open(path, "wb") as f:
            f.write(
                msgspec.msgpack.encode(
                    {
                        "reads": reads.tobytes(),
                        "passes": passes.tobytes(),
                        "responses": meta.tobytes(),
                        "client": client.tobytes(),
                        "server": server.tobytes(),
                        "gc": collections.tobytes(),
                    }
                )
            )

    http1._Conn.data_received = data_received  # type: ignore[method-assign]
    if stamped is not None:  # (the kernel-stamped transport's entry: ``chunk_timestamps``)
        http1._Conn.received_at = received_at  # type: ignore[method-assign]
    http1.Http1Pool._ended = _ended  # type: ignore[method-assign]
    atexit.register(dump)


_OUT = os.environ.get("VEEKSHA_PROBE_DIR")

if _OUT and "veeksha.dispatch.worker" in getattr(sys, "orig_argv", ()):
    _install(_OUT)
