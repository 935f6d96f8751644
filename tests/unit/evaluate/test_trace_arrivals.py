"""The trace arrival checks with ``turn_timing: timestamps``: later turns are judged against
their own rows' times too (hand-built rows against a trace the test writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.evaluate.builders import request, requests_table, session, sessions_table
from tests.unit.generate.traces.helpers import trace_scenario, write_csv
from veeksha.evaluate.arrival_checks import ARRIVAL_DISTRIBUTION
from veeksha.evaluate.health import FAIL, PASS, HealthInput
from veeksha.evaluate.stats import measured_rows


def _data(trace: Path, turns: list[tuple[float, float, float]]) -> HealthInput:
    """Two chats starting at 0 and 1 s (speedup 2: the trace's 10 and 12 s); ``turns`` are the
    second turns' (not_before, ready_at, sent_at)."""
    rows: list[dict[str, Any]] = []
    sessions = []
    for sid, (start, (not_before, ready, sent)) in enumerate(zip((0.0, 1.0), turns, strict=True)):
        rows.append(request(sid, 0, ready=start, chunks=(start + 0.05,)) | {"not_before": start})
        child = request(sid, 1, parents=[0], ready=ready, sent=sent, chunks=(sent + 0.05,))
        rows.append(child | {"not_before": not_before})
        sessions.append(session(sid, start, sent + 0.05))
    scenario = trace_scenario(
        trace, traffic_scheduler={"type": "trace", "speedup": 2.0, "turn_timing": "timestamps"}
    )
    table = requests_table(rows)
    return HealthInput(table, measured_rows(table), sessions_table(sessions), scenario, {})


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_csv(
        tmp_path / "t.csv",
        "session_id,timestamp,input_length,output_length",
        ["a,10.0,5,3", "a,11.0,5,3", "b,12.0,5,3", "b,12.5,5,3"],
    )


def test_turns_sent_at_their_own_times_pass(trace: Path) -> None:
    # a's second turn held by its time (0.5 s); b's by its parent's answer (0.3 s after it)
    result = ARRIVAL_DISTRIBUTION(_data(trace, [(0.5, 0.5, 0.5005), (1.25, 1.55, 1.5505)]))
    assert result.status == PASS, result.detail
    assert result.statistics["turns_timed"] == 4
    assert result.statistics["turns_sent_before_their_time"] == 0
    assert result.statistics["turns_held_by_their_time"] == 1
    assert result.statistics["p99_held_turn_deviation_s"] == pytest.approx(0.0005)


def test_a_turn_sent_before_its_own_time_fails(trace: Path) -> None:
    result = ARRIVAL_DISTRIBUTION(_data(trace, [(0.5, 0.3, 0.3), (1.25, 1.55, 1.55)]))
    assert result.status == FAIL
    assert result.statistics["turns_sent_before_their_time"] == 1
    assert "1 of 4 timed turns sent before their own time" in result.detail


def test_a_turn_its_time_held_that_left_late_fails(trace: Path) -> None:
    result = ARRIVAL_DISTRIBUTION(_data(trace, [(0.5, 0.5, 0.55), (1.25, 1.25, 1.2505)]))
    assert result.status == FAIL  # 50 ms after its time, the limit is 5 ms (p99)
    assert result.statistics["turns_held_by_their_time"] == 2
    assert result.statistics["p99_held_turn_deviation_s"] > 0.005


def _distributed(trace: Path, shift_s: float, recorded_shift_s: float) -> HealthInput:
    """The two chats of ``_data`` as a 2-shard merged run: shard 1 (chat b) moved onto the
    driver's clock by ``shift_s``; run_info says ``recorded_shift_s``."""
    rows: list[dict[str, Any]] = []
    sessions = []
    for sid, start in enumerate((0.0, 1.0 + shift_s)):
        sent = start + 0.0002
        root = request(sid, 0, ready=start, sent=sent, chunks=(sent + 0.05,))
        rows.append(root | {"not_before": start, "shard": sid})
        sessions.append(session(sid, start, sent + 0.05) | {"shard": sid})
    scenario = trace_scenario(
        trace, traffic_scheduler={"type": "trace", "speedup": 2.0, "turn_timing": "timestamps"}
    )
    per_shard = [{"index": 0, "shift_s": 0.0}, {"index": 1, "shift_s": recorded_shift_s}]
    table = requests_table(rows)
    run_info = {"distributed": {"per_shard": per_shard}}
    return HealthInput(table, measured_rows(table), sessions_table(sessions), scenario, run_info)


def test_a_shards_clock_shift_is_not_a_planned_start_off_the_trace(trace: Path) -> None:
    # a merged run's planned starts are each shard's, moved by its recorded shift (7 µs here,
    # a Ray run's clock offset change): exactly the trace's once that shift is taken back
    result = ARRIVAL_DISTRIBUTION(_distributed(trace, 7e-6, 7e-6))
    assert result.status == PASS, result.detail
    assert result.statistics["max_planned_deviation_s"] == pytest.approx(0.0, abs=1e-9)
    # a start off by more than its shard's shift is still caught
    result = ARRIVAL_DISTRIBUTION(_distributed(trace, 7e-6, 0.0))
    assert result.status == FAIL
    assert result.statistics["max_planned_deviation_s"] == pytest.approx(7e-6)
