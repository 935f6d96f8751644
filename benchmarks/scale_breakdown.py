"""Where the scale figure's time goes: CPython's floor, then veeksha's own parts, added one by one.

    python -m benchmarks.scale_breakdown [--sessions 100000] [--repeats 3]

``benchmarks.python_floor`` pushes the scale figure's sessions (linear, 3 requests, 1,000 alive)
through the minimal data flow written inline. This script runs the same sessions through flows
that swap in veeksha's real parts, cumulatively, and prints the main thread's CPU per request of
each, so the difference between two stages is what that part costs:

floor    the inline flow of ``python_floor`` (bare lists as session state, heapq, tuples as rows)
state    + ``SessionState`` (start, outgoing, mark_dispatched, complete: DAG bookkeeping and the
         inherited conversation) and an ``InFlight`` record per request
queue    + ``ReadyQueue`` (push, pop_due by batches of the 1,000 alive)
rows     + ``RequestColumns.add_result`` and ``SessionColumns.add`` (the real rows)
engine   the real ``TrafficLoop`` with the dry run's ``InProcessPool`` and the real
         ``RunRecorder``/``ResultWriter`` (its writer thread's CPU not counted) on uvloop: a
         ``veeksha run --dry-run`` without the CLI, set-up, generation and evaluation
engine, null sink   the same with a sink that records nothing (what the loop alone costs)

Generation (veeksha's ``SessionGenerator``) is timed once and added to each stage's sessions/s.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from itertools import count
from typing import Any

import uvloop

from benchmarks.python_floor import run_floor, scale_sessions
from veeksha.clock import MonotonicClock
from veeksha.dispatch.inprocess import InProcessPool, dry_result
from veeksha.dispatch.messages import WorkItem
from veeksha.engine.loop import InFlight, LoopSettings, TrafficLoop
from veeksha.engine.recorder import RunRecorder
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.record.columnar import RequestColumns, SessionColumns
from veeksha.record.parquet import ResultWriter, run_metadata
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.ready_queue import ReadyQueue
from veeksha.schedule.session_state import SessionState
from veeksha.timers import LoopTimers

_CONCURRENCY = 1000
_BATCH_ROWS = 8192


def run_parts(
    pool: list[SessionSpec], sessions: int, *, queue: bool, rows: bool
) -> tuple[float, int]:
    """Main-thread CPU seconds of the flow with ``SessionState`` (always), ``ReadyQueue`` and
    the real row code (when asked), and the number of requests."""
    request_rows, session_rows = RequestColumns(), SessionColumns()
    ready: ReadyQueue[tuple[SessionState, int]] = ReadyQueue()
    heap: list[tuple[int, int, int, tuple[SessionState, int]]] = []
    seq = count()
    in_flight: dict[int, InFlight] = {}
    chunks: dict[int, list[int]] = {}
    next_request = started = active = 0
    now = 0
    start = time.thread_time()

    def push(at: int, entry: tuple[SessionState, int]) -> None:
        if queue:
            ready.push(at, entry)
        else:
            heapq.heappush(heap, (at, 0, next(seq), entry))

    while started < sessions or heap or len(ready):
        while active < _CONCURRENCY and started < sessions:
            state = SessionState(pool[started % len(pool)], now, True)
            for node_id, at in state.start():
                push(at, (state, node_id))
            started += 1
            active += 1
        now += 1
        due = ready.pop_due(now) if queue else [heapq.heappop(heap)[3]]
        for state, node_id in due:
            spec = state.spec
            node = spec.nodes[node_id]
            messages, history_tokens = state.outgoing(node_id)
            item = WorkItem(next_request, messages, node.max_tokens, now, 0)
            state.mark_dispatched(node_id)
            in_flight[next_request] = InFlight(state, node_id, now, now, 0, 0, history_tokens)
            next_request += 1
            result = dry_result(item, 0, now, chunks)
            request = in_flight.pop(result.request_id)
            if rows:
                total = history_tokens + node.prompt_tokens
                request_rows.add_result(
                    "run", "measured", spec.session_id, request.request_id, node, "model",
                    now, now, now, result, node.prompt_tokens, total, 0,
                )  # fmt: skip
                if request_rows.rows >= _BATCH_ROWS:  # handed to a writer: the flow keeps none
                    request_rows, session_rows = RequestColumns(), SessionColumns()
            released = state.complete(
                node_id,
                now,
                True,
                answer=result.output_text,
                conversation_tokens=history_tokens + node.prompt_tokens,
                answer_tokens=result.completion_tokens or 0,
            )
            for child, at in released:
                push(at, (state, child))
            if state.done:
                active -= 1
                if rows:
                    session_rows.add(
                        "run", "measured", spec.session_id, state.started_at_ns,
                        state.ended_at_ns, len(spec.nodes), len(spec.nodes), len(spec.nodes),
                        0, 0, 0.0, state.status, 0,
                    )  # fmt: skip
    return time.thread_time() - start, next_request


class _NullSink:
    """A ``TrafficSink`` that records nothing."""

    def dispatched(self, request: Any, item: Any) -> None: ...

    def request_done(self, request: Any, result: Any, processed_at_ns: int) -> None: ...

    def request_cancelled(self, session: Any, node_id: int, request_id: int, at_ns: int) -> None:
        pass

    def session_done(self, session: Any) -> None: ...


async def _engine(pool: list[SessionSpec], sessions: int, record: bool) -> tuple[float, int]:
    loop = asyncio.get_running_loop()
    clock = MonotonicClock()
    timers = LoopTimers(loop, clock)
    t0 = clock.now_ns()
    settings = LoopSettings(
        cancel_on_failure=True,
        max_sessions=sessions,
        concurrency=ConcurrencyRamp(_CONCURRENCY, 0.0),
    )
    with tempfile.TemporaryDirectory(prefix="veeksha-breakdown-") as tmp:
        writer = None
        sink: Any = _NullSink()
        if record:
            metadata = run_metadata(
                run_id="run", scenario_hash="-", seed=1, t0_ns=t0, t0_wall=datetime.now(UTC),
                target="dry run",
            )  # fmt: skip
            writer = ResultWriter(tmp, metadata, t0_ns=t0)
            sink = RunRecorder("run", "model", t0, writer, BuiltinTokenizer())

        def deliver(results: list[Any]) -> None:
            traffic.on_results(results)  # (bound below, before the first pass)

        dispatcher = InProcessPool(deliver)
        await dispatcher.start()
        traffic = TrafficLoop(
            settings, lambda i: pool[i % len(pool)], dispatcher.submit, sink, clock, timers
        )
        finished: asyncio.Future[None] = loop.create_future()
        traffic.on_finish(lambda: finished.set_result(None))
        start = time.thread_time()
        traffic.start(t0)
        await finished
        cpu = time.thread_time() - start
        timers.close()
        if writer is not None:
            writer.close()
    return cpu, traffic.counters.requests_done


def run_engine(pool: list[SessionSpec], sessions: int, record: bool) -> tuple[float, int]:
    """Main-thread CPU seconds of the real traffic loop in a dry run, and the requests."""
    return uvloop.run(_engine(pool, sessions, record))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n = args.sessions
    pool, generation = scale_sessions(n)
    stages: list[tuple[str, Callable[[], tuple[float, int]]]] = [
        ("floor", lambda: run_floor(pool, n)),
        ("state", lambda: run_parts(pool, n, queue=False, rows=False)),
        ("queue", lambda: run_parts(pool, n, queue=True, rows=False)),
        ("rows", lambda: run_parts(pool, n, queue=True, rows=True)),
        ("engine, null sink", lambda: run_engine(pool, n, record=False)),
        ("engine", lambda: run_engine(pool, n, record=True)),
    ]
    cpu: dict[str, list[float]] = {name: [] for name, _ in stages}
    requests = 0
    for _ in range(args.repeats):  # round-robin, so drift spreads over every stage
        for name, stage in stages:
            seconds, requests = stage()
            cpu[name].append(seconds)
    print(
        f"{n:,} sessions, {requests:,} requests; generation {generation / n * 1e6:.1f} us per "
        f"session; main-thread CPU, median of {args.repeats}:"
    )
    previous = None
    for name, _ in stages:
        us = statistics.median(cpu[name]) / requests * 1e6
        per_session = n / (statistics.median(cpu[name]) + generation)
        delta = "" if previous is None else f"  ({us - previous:+.2f})"
        print(f"  {name:18} {us:6.2f} us per request{delta:10}  {per_session:9,.0f} sessions/s")
        previous = us


if __name__ == "__main__":
    main()
