"""The traffic loop fed by a trace on a fake clock: arrivals at the trace's scaled times, the
end of a trace that does not wrap, and the next pass of one that does."""

from __future__ import annotations

from pathlib import Path

from tests.unit.engine.test_loop import Harness
from tests.unit.generate.traces.helpers import trace_scenario, write_csv
from veeksha.engine.loop import LoopSettings
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import open_trace

MS = 1_000_000


def _trace(tmp_path: Path, wrap: bool):  # type: ignore[no-untyped-def]
    path = write_csv(
        tmp_path / "t.csv",
        "timestamp,input_length,output_length",
        ["50.0,3,1", "50.2,4,1", "50.2,5,1", "51.0,6,1", "52.0,7,1"],
    )
    return open_trace(
        trace_scenario(
            path,
            generator={"wrap_mode": wrap},
            traffic_scheduler={"type": "trace", "speedup": 2.0},
        )
    )


def _harness(trace, max_sessions: int) -> Harness:  # type: ignore[no-untyped-def]
    sessions = trace.sessions(0, BuiltinTokenizer())
    settings = LoopSettings(
        cancel_on_failure=True,
        max_sessions=max_sessions,
        rate_gaps=trace.timeline().sample,
        session_limit=None if trace.wrap else trace.hi - trace.lo,
    )
    return Harness(settings, sessions.session)


def test_sessions_start_at_the_traces_scaled_times_and_the_trace_ends(tmp_path: Path) -> None:
    h = _harness(_trace(tmp_path, wrap=False), max_sessions=100)
    h.start()
    h.timers.advance(60_000 * MS)
    starts = [req.ready_at_ns for req, _ in h.rec.dispatched]
    assert starts == [0, 100 * MS, 100 * MS, 500 * MS, 1000 * MS]
    assert [item.max_tokens for item in h.items] == [1] * 5
    assert not h.loop.finished  # answers pending
    for item in h.items:
        h.complete(item, h.clock.now)
    assert h.loop.finished
    assert h.loop.stop_reason == "completed"
    assert h.loop.counters.sessions_started == 5


def test_a_wrapping_trace_repeats_its_slots_after_one_mean_gap(tmp_path: Path) -> None:
    h = _harness(_trace(tmp_path, wrap=True), max_sessions=7)
    h.start()
    h.timers.advance(60_000 * MS)
    starts = [req.ready_at_ns for req, _ in h.rec.dispatched]
    # pass 2 begins one mean gap (2 s / 4 gaps = 0.5 s, scaled: 0.25 s) after the last arrival
    assert starts == [0, 100 * MS, 100 * MS, 500 * MS, 1000 * MS, 1250 * MS, 1350 * MS]
    assert sorted(req.session.session_id for req, _ in h.rec.dispatched) == list(range(7))
