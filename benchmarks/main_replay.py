"""The main process' per-request path at an open-loop rate, replayed on a fake clock, for
instruction counts (callgrind): what each request costs the main process, machine-independent.

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m benchmarks.main_replay --requests N [--per-wake 1]

The ``mainrate`` figure's sessions (single requests, 128-token prompts, 32 output tokens,
completions API; veeksha's own generator) go through veeksha's own ``TrafficLoop``,
``RunRecorder`` and a real ``ResultWriter`` (its thread writes only at ``close``, so that no
tick of the real clock makes two runs differ), on a fake clock: the arrival timer fires with
``--per-wake`` sessions due in its hand-over window (1: 100 req/s and below; 5: 500 req/s with
the default 20 ms window), each request is handed over (its ``WorkItem`` encoded as a frame to
a worker, the frame dropped), and its answer comes back as the worker sends it: a frame with one
``Result`` (32 chunk stamps, the built-in simulator's ``timings``), decoded by a real ``Link``
and handed on as ``WorkerPool._on_batch`` does. What is left out: the event loop, the system
calls and the writer's part files (one per second of a run).

The answers' frames are encoded before the traffic, ``--pool`` of them whatever ``N`` is, so
two runs with different ``N`` differ by ``N``'s requests alone: (instructions(2N) −
instructions(N)) / N is the main process' instructions per request. Run with
``PYTHONHASHSEED=0`` and bytecode compiled on both sides for counts equal to a few parts in 10⁴.
"""

from __future__ import annotations

import argparse
import heapq
import socket
import sys
import tempfile
from collections.abc import Callable
from itertools import count
from pathlib import Path

import numpy as np

from benchmarks.harness import scenario
from veeksha.dispatch.channel import Link, encode_frame, from_worker_decoder
from veeksha.dispatch.messages import FromWorker, Result, WorkItem
from veeksha.engine.loop import LoopSettings, TrafficLoop
from veeksha.engine.recorder import RunRecorder
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.record.parquet import ResultWriter
from veeksha.scenario.models import Scenario

_MS = 1_000_000
_T0 = 10**12
_AHEAD = 20 * _MS  # the default hand-over window
_ANSWER_NS = 25 * _MS  # from the release to the answer's frame


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def now_ns(self) -> int:
        return self.now


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class _Timers:
    def __init__(self, clock: _Clock) -> None:
        self.clock = clock
        self.heap: list[tuple[int, int, _Timer, Callable[[], None]]] = []
        self.seq = count()

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> _Timer:
        timer = _Timer()
        heapq.heappush(self.heap, (max(when_ns, self.clock.now), next(self.seq), timer, callback))
        return timer

    def next_time(self) -> int | None:
        heap = self.heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


def _answer(request_id: int, ready_ns: int, rng: np.random.Generator) -> bytes:
    """The frame a worker sends for one answered request (the fast simulator's shape)."""
    sent = ready_ns + 30_000
    first = sent + 2 * _MS
    chunks = [first + i * 100_000 for i in range(32)]
    text = " ".join(f"w{int(x)}" for x in rng.integers(0, 9999, 32))
    timings = {
        "arrival_ns": sent + 100_000,
        "scheduled_ns": sent + 120_000,
        "first_token_ns": first - 50_000,
        "last_token_ns": chunks[-1] - 50_000,
        "queue_wait_s": 2e-05,
        "prefill_s": 0.00183,
        "decode_s": 0.0031,
        "cached_tokens": 0,
        "prompt_tokens": 128,
        "completion_tokens": 32,
        "process": 0,
        "fault": None,
    }
    result = Result(
        request_id=request_id,
        worker_id=0,
        status="ok",
        received_at_ns=ready_ns - _AHEAD // 2,
        sent_at_ns=sent,
        completed_at_ns=chunks[-1] + 10_000,
        first_chunk_at_ns=first,
        chunk_times_ns=chunks,
        output_text=text,
        http_status=200,
        prompt_tokens=128,
        completion_tokens=32,
        cached_tokens=0,
        server_timings=timings,
        released_at_ns=ready_ns,
        last_byte_at_ns=chunks[-1],
    )
    return bytes(encode_frame([result]))


def replay(requests: int, per_wake: int, pool: int) -> int:
    """Push ``requests`` requests through the main process' path; returns the rows written."""
    gap_ns = (_AHEAD // 2) // per_wake  # per_wake sessions fall in each refill of the window
    spec = scenario(
        api_base="http://127.0.0.1:9/v1",
        scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 0.01}},
        max_sessions=requests,
    )
    generator = SessionGenerator(Scenario.model_validate(spec), BuiltinTokenizer())
    # the answers, encoded now (the same number whatever ``requests`` is)
    rng = np.random.default_rng(1)
    frames = [_answer(i, _T0 + i * gap_ns, rng) for i in range(pool)]

    folder = Path(tempfile.mkdtemp(prefix="main-replay-"))
    writer = ResultWriter(folder, {"run_id": "replay"}, t0_ns=_T0, flush_interval_s=3600.0)
    recorder = RunRecorder(
        "replay", "veeksha-sim", _T0, writer, BuiltinTokenizer(), None, clients=[("default", "m")]
    )
    clock = _Clock()
    timers = _Timers(clock)
    outbox: list[WorkItem] = []
    due: list[tuple[int, int]] = []  # (answer time, request id)

    def submit(item: WorkItem) -> int:
        outbox.append(item)
        return 0

    def flush() -> None:
        encode_frame(outbox)  # (what WorkerPool.flush sends to the worker)
        for item in outbox:
            ready = item.not_before_ns or item.dispatched_at_ns
            heapq.heappush(due, (ready + _ANSWER_NS, item.request_id))
        outbox.clear()

    settings = LoopSettings(
        cancel_on_failure=True,
        max_sessions=requests,
        rate_gaps=lambda n: np.full(n, gap_ns / 1e9),
        dispatch_ahead_ns=_AHEAD,
    )
    loop = TrafficLoop(settings, generator.session, submit, recorder, clock, timers, flush=flush)
    in_flight: dict[int, int] = {}

    def on_batch(batch: list[FromWorker]) -> None:  # (WorkerPool._on_batch's bookkeeping)
        results: list[Result] = []
        for msg in batch:
            if type(msg) is Result and in_flight.pop(msg.request_id, None) is not None:
                results.append(msg)
        if results:
            loop.on_results(results)

    ours, theirs = socket.socketpair()
    link: Link[FromWorker] = Link(ours, from_worker_decoder(), on_batch)
    clock.now = _T0 - _AHEAD
    loop.start(_T0)
    while not loop.finished:
        at_timer = timers.next_time()
        at_answer = due[0][0] if due else None
        if at_answer is not None and (at_timer is None or at_answer <= at_timer):
            clock.now = max(clock.now, at_answer)
            _, request_id = heapq.heappop(due)
            in_flight[request_id] = 0
            frame = frames[request_id % pool]
            out: list[FromWorker] = []
            link._frames(memoryview(frame), out)  # (Link._on_readable after its recv_into)
            on_batch(out)
        elif at_timer is not None:
            clock.now = max(clock.now, at_timer)
            _, _, timer, callback = heapq.heappop(timers.heap)
            timer.cancelled = True
            callback()
        else:
            break
    writer.close()
    ours.close()
    theirs.close()
    return writer.rows_written["requests"]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--per-wake", type=int, default=1, help="sessions per arrival wake-up")
    parser.add_argument("--pool", type=int, default=4000, help="answers encoded up front")
    args = parser.parse_args()
    if args.requests > args.pool:
        parser.error("--requests must not exceed --pool")
    rows = replay(args.requests, args.per_wake, args.pool)
    print(f"{rows} rows")
    return 0 if rows == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
