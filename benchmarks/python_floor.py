"""How fast CPython alone can run the scale figure's data flow: a lower bound, not veeksha.

    python -m benchmarks.python_floor [--sessions 200000] [--repeats 5]

The scale figure (``benchmarks.figures.fig_scale``) runs linear sessions of 3 turns in a dry run,
1,000 kept alive. Per request, whatever the implementation, a Python program has to: take the
request from a ready heap, build the message to a worker (``WorkItem``) with the conversation so
far, get an answer (``Result``), keep the request in an in-flight table and take it out again,
update the session's node states and conversation, and append the request's row (25 integers,
14 floats, 6 strings) to column buffers; per session: build the session's nodes and spec, and
append the session row. This script does exactly that and nothing else, inline in one function
(no classes of its own, no event loop, no timers, no checks, no phases, no writer thread), with
the same msgspec and dataclass types veeksha uses. Its sessions are veeksha's own, for the scale
figure's scenario: the generator's CPU is timed making all of them a block at a time (as a run
does), and the flow cycles through the first 4,096, so that its working set is a run's (1,000
sessions alive), not millions held at once, which would make it slower (measured: holding
100,000 sessions read 46,000 sessions/s, cycling 70,000). Rows are dropped every 8,192 as a
batch handed to a writer would be. It prints the main-thread CPU per request and the sessions/s
it implies: how much of the 50,000 sessions/s target (6.7 µs per request for everything) is left
for what an engine does beyond this (an event loop, timers, phases, cancellation, checks, the
writer thread's Arrow conversion).
"""

from __future__ import annotations

import argparse
import heapq
import statistics
import time
from itertools import count
from typing import Any

from benchmarks.harness import scale_scenario
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.models import Scenario

_NULL = -(2**63)
_FLOATS = (float("nan"),) * 13
_WORDS = ["token"] * 8
_BATCH_ROWS = 8192


def scale_sessions(sessions: int, pool: int = 4096) -> tuple[list[SessionSpec], float]:
    """The CPU seconds veeksha's generator takes to make ``sessions`` of the scale figure's
    sessions (made and dropped a block at a time, as a run does), and the first ``pool`` of
    them, which the flow then cycles through (so its working set is a run's, not millions of
    sessions held at once)."""
    spec = scale_scenario(sessions)
    generator = SessionGenerator(Scenario.model_validate(spec), BuiltinTokenizer())
    kept: list[SessionSpec] = []
    start = time.thread_time()
    for made in generator.iter_sessions():
        if len(kept) < pool:
            kept.append(made)
        if made.session_id + 1 >= sessions:
            break
    return kept, time.thread_time() - start


def run_floor(pool: list[SessionSpec], sessions: int, concurrency: int = 1000) -> tuple[float, int]:
    """Main-thread CPU seconds to push ``sessions`` sessions (cycling through ``pool``) through
    the minimal flow, and the number of requests that made."""
    answer = " ".join(_WORDS)
    chunks = [0] * len(_WORDS)
    ints: list[int] = []
    floats: list[float] = []
    strs: list[str] = []
    session_rows: list[object] = []
    # a session's state is a bare list [spec, node states, conversation]: no class of its own
    heap: list[tuple[int, int, int, list[Any]]] = []
    seq = count()
    in_flight: dict[int, tuple[list[Any], int]] = {}
    next_request = 0
    started = 0
    active = 0
    now = 0
    start = time.thread_time()
    while started < sessions or heap:
        while active < concurrency and started < sessions:
            spec = pool[started % len(pool)]
            state: list[Any] = [spec, [0] * len(spec.nodes), ()]
            heapq.heappush(heap, (now, 0, next(seq), [state, 0]))
            started += 1
            active += 1
        now += 1
        _, _, _, (state, node_id) = heapq.heappop(heap)
        spec, states, conversation = state
        node = spec.nodes[node_id]
        messages = [*conversation, ("user", node.prompt)]
        item = WorkItem(next_request, messages, node.max_tokens, now, 0)
        states[node_id] = 2
        in_flight[next_request] = (state, node_id)
        next_request += 1
        result = Result(
            request_id=item.request_id,
            worker_id=0,
            status="ok",
            received_at_ns=now,
            sent_at_ns=now,
            completed_at_ns=now,
            first_chunk_at_ns=now,
            chunk_times_ns=chunks,
            output_text=answer,
            completion_tokens=item.max_tokens,
        )
        state, node_id = in_flight.pop(result.request_id)
        states[node_id] = 3
        state[2] = (*messages, ("assistant", result.output_text))
        ints += (spec.session_id, node_id, result.request_id, len(node.parents), _NULL, 0, 32, 0)
        ints += (32, 32 * (node_id + 1), _NULL, 8, 8, 1, 200, 0, len(chunks), now, now, now)
        ints += (now, now, now, now, 1)
        floats += (node.wait_after_ready_s, *_FLOATS)
        strs += ("run", "measured", "model", "ok", "", "")
        if len(strs) >= _BATCH_ROWS * 6:  # a batch handed to a writer: the flow keeps no rows
            ints, floats, strs, session_rows = [], [], [], []
        children = spec.children[node_id]
        if children:
            heapq.heappush(heap, (now, 0, next(seq), [state, children[0]]))
        else:
            session_rows.append(("run", "measured", spec.session_id, 0, now, 3, "ok"))
            active -= 1
    return time.thread_time() - start, next_request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    pool, generation = scale_sessions(args.sessions)
    runs = [run_floor(pool, args.sessions) for _ in range(args.repeats)]
    flow = statistics.median(cpu for cpu, _ in runs)
    requests = runs[0][1]
    per_request = (flow + generation) / requests * 1e6
    print(
        f"{args.sessions:,} sessions, {requests:,} requests: generation "
        f"{generation / args.sessions * 1e6:.1f} us per session (veeksha's generator), minimal "
        f"flow {flow / requests * 1e6:.2f} us per request (median of {args.repeats}); together "
        f"{per_request:.2f} us per request = {args.sessions / (flow + generation):,.0f} sessions/s"
    )


if __name__ == "__main__":
    main()
