"""`traffic_scheduler.turn_timing`: a request log's later turns replayed at their own rows'
times (`timestamps`) or right after the previous answer (`after_answer`, the default), against
the built-in simulator answering in ~0.1 s; the rows say which, and health passes in both."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import assert_healthy, run_as_the_command
from veeksha.scenario.loader import load_scenario_text

SPEEDUP = 2.0
# two chats whose later turns were logged long after the previous answer (trace seconds)
ROWS = [
    ("a", 0.0, 6, 4),
    ("b", 0.4, 5, 4),
    ("a", 1.2, 7, 4),
    ("b", 1.6, 8, 4),
    ("a", 2.4, 9, 4),
    ("b", 2.8, 4, 4),
]


@pytest.mark.parametrize("timing", ["after_answer", "timestamps"])
def test_later_turns_wait_for_their_own_times_only_when_asked(
    tmp_path: Path, start_simulator: StartSimulator, timing: str
) -> None:
    sim = start_simulator(ttft_ms=80, itl_ms=5)
    trace = tmp_path / "log.csv"
    trace.write_text(
        "session_id,timestamp,input_length,output_length\n"
        + "".join(f"{s},{t},{i},{o}\n" for s, t, i, o in ROWS)
    )
    text = f"""
seed: 2
traffic_scheduler: {{type: trace, speedup: {SPEEDUP}, turn_timing: {timing}}}
session_generator: {{type: trace, trace_file: {trace}, flavor: request_log, wrap_mode: false}}
client: {{api_base: {sim.base_url}, model: veeksha-sim}}
runtime: {{max_sessions: 10, benchmark_timeout: 60, num_workers: 1}}
health_checks: {{max_dispatch_lag_p99_ms: 50}}
"""
    run_dir = tmp_path / "run"
    outcome = run_as_the_command(
        load_scenario_text(text, "t.yaml"), run_dir, quiet=True, plots=False
    )
    assert outcome.stop_reason == "completed"
    requests = pd.read_parquet(run_dir / "requests.parquet")
    sessions = pd.read_parquet(run_dir / "sessions.parquet").set_index("session_id")
    assert len(requests) == 6
    assert (requests.status == "ok").all()
    origin = float(sessions.started_at.min())  # where the trace's first row (0.0) lands
    done = requests.set_index(["session_id", "node_id"]).completed_at
    turns = []
    for sid, chat in requests.sort_values("node_id").groupby("session_id"):
        name = "a" if sessions.started_at[sid] == origin else "b"
        times = [t for s, t, _, _ in ROWS if s == name]
        for node, row in zip(range(len(chat)), chat.itertuples(), strict=True):
            mapped = origin + times[node] / SPEEDUP  # t0 + (ts − first ts) / speedup
            parent = done[(sid, node - 1)] if node else None
            turns.append((row, mapped, parent))
    later = [(row, mapped, parent) for row, mapped, parent in turns if parent is not None]
    assert len(later) == 4
    for row, _, parent in later:
        assert row.sent_at >= parent  # never before the answer its prompt holds
    if timing == "timestamps":
        for row, mapped, _ in turns:
            assert row.not_before == pytest.approx(mapped, abs=1e-6)
            assert row.sent_at >= row.not_before
            assert row.ready_at == pytest.approx(mapped, abs=1e-6)  # (held by its time)
    else:
        assert requests.not_before.isna().all()
        for row, mapped, parent in later:  # today's behaviour: right after the answer
            assert row.ready_at == pytest.approx(parent, abs=1e-6)
            assert row.sent_at < mapped - 0.2
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["trace"]["turn_timing"] == timing
    assert_healthy(summary["health"]["checks"], summary["health"])
    health = json.loads((run_dir / "health.json").read_text())
    checks = {c["name"]: c for c in health["checks"]}
    # a turn held by its time is late only by how long after that time it left
    assert checks["dependencies"]["statistics"]["lateness"]["max"] < 0.05
    timeline = checks["arrival_distribution"]["statistics"]
    if timing == "timestamps":
        assert timeline["turns_timed"] == 6
        assert timeline["turns_sent_before_their_time"] == 0
        assert timeline["turns_held_by_their_time"] == 4
    else:
        assert "turns_timed" not in timeline
