"""sessions.parquet's counts agree with the session's rows in requests.parquet (issue 21, item 6).

The traffic loop runs one session on a fake clock into a real recorder and writer, through every
ending a node can have: answered, failed, cancelled in flight by the run's stop, cancelled
before it was sent. Then the session's row is checked against what an analyst computes from
its request rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.fakes import FakeClock, FakeTimers
from tests.unit.record.builders import T0, make_metadata
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.engine.loop import LoopSettings, TrafficLoop
from veeksha.engine.recorder import RunRecorder
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.record.parquet import ResultWriter
from veeksha.record.reader import load_requests, load_sessions

S = 1_000_000_000


def _node(i: int, parents: tuple[int, ...], wait_s: float) -> NodeSpec:
    return NodeSpec(
        node_id=i,
        parents=parents,
        history_parent=parents[0] if parents else None,
        wait_after_ready_s=wait_s,
        prompt=f"p{i}",
        prompt_tokens=1,
        max_tokens=3,
    )


def _tree() -> SessionSpec:
    """0 → 1 → 3 and 0 → 2 → 4; think times 0.1 s (1), 0.2 (2), 0.3 (3), 0.4 (4)."""
    nodes = [_node(0, (), 0.0), _node(1, (0,), 0.1), _node(2, (0,), 0.2)]
    nodes += [_node(3, (1,), 0.3), _node(4, (2,), 0.4)]
    return SessionSpec(session_id=0, nodes=nodes)


def at(seconds: float) -> int:
    return T0 + round(seconds * S)


def _result(item: WorkItem, status: str, at_s: float) -> Result:
    kind = {"ok": "", "timeout": "timeout", "cancelled": "cancelled"}[status]
    return Result(
        request_id=item.request_id,
        worker_id=0,
        status=status,
        received_at_ns=item.dispatched_at_ns,
        sent_at_ns=item.dispatched_at_ns,
        completed_at_ns=at(at_s),
        output_text="a b c" if status == "ok" else "",
        error_kind=kind,
        last_byte_at_ns=item.dispatched_at_ns + S // 100,
    )


def test_session_counts_agree_with_its_request_rows(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    timers = FakeTimers(clock)
    writer = ResultWriter(tmp_path, make_metadata(), t0_ns=T0)
    recorder = RunRecorder("run-1", "m", T0, writer, BuiltinTokenizer())
    items: list[WorkItem] = []

    def submit(item: WorkItem) -> int:
        items.append(item)
        return 0

    settings = LoopSettings(
        cancel_on_failure=False, max_sessions=1, rate_gaps=lambda n: np.full(n, 10.0)
    )
    loop = TrafficLoop(settings, lambda i: _tree(), submit, recorder, clock, timers)
    loop.start(T0)
    timers.advance(T0)
    clock.now = at(1.0)
    loop.on_results([_result(items[0], "ok", 1.0)])
    timers.advance(at(1.2))  # nodes 1 and 2 sent
    clock.now = at(2.0)
    loop.on_results([_result(items[1], "timeout", 2.0)])  # node 3 is ready from the give-up
    timers.advance(at(2.3))
    assert items[3].dispatched_at_ns == at(2.3)
    clock.now = at(2.5)
    loop.stop("interrupted")  # node 4 (its parent still in flight) is cancelled, never sent
    clock.now = at(2.7)
    # (the last result handled is not the last to end)
    loop.on_results([_result(items[2], "ok", 2.7), _result(items[3], "cancelled", 2.6)])
    assert loop.finished
    writer.close()
    # the live counts (progress line, the run's last line) agree: 3 answered or failed, 1 of
    # them failed; the one cancelled in flight and the one never sent are cancelled, not failed
    counters = loop.counters
    assert (counters.requests_done, counters.requests_failed) == (3, 1)
    assert counters.requests_cancelled == 2

    rows = {r["node_id"]: r for r in load_requests(tmp_path).to_pylist()}
    statuses = [rows[n]["status"] for n in range(5)]
    assert statuses == ["ok", "timeout", "ok", "cancelled", "cancelled"]
    assert rows[4]["dispatched_at"] is None  # never sent
    assert rows[3]["dispatched_at"] is not None  # sent, then cancelled by the stop
    (session,) = load_sessions(tmp_path).to_pylist()
    dispatched = [r for r in rows.values() if r["dispatched_at"] is not None]
    assert session["num_requests"] == len(dispatched) == 4
    assert session["think_time_total"] == pytest.approx(
        sum(r["wait_after_ready"] for r in dispatched)
    )
    assert session["think_time_total"] == pytest.approx(0.1 + 0.2 + 0.3)
    assert session["num_ok"] == statuses.count("ok") == 2
    assert session["num_error"] == statuses.count("error") + statuses.count("timeout") == 1
    assert session["num_cancelled"] == statuses.count("cancelled") == 2
    assert session["num_ok"] + session["num_error"] + session["num_cancelled"] == 5
    assert session["status"] == "error"
    # it ended with its latest row: completed_at, or for a never-sent node its cancellation
    ends = [
        r["completed_at"] if r["dispatched_at"] is not None else r["processed_at"]
        for r in rows.values()
    ]
    assert session["ended_at"] == pytest.approx(max(ends)) == pytest.approx(2.7)
