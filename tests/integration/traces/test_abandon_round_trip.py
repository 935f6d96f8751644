"""A recorded abandonment replays as itself, end to end: a real ``veeksha run`` of 2-turn chats
against the built-in simulator (answers of ~0.27 s) whose users abandon a share of the requests
0.1 s after sending them, then a replay of its trace.jsonl with no ``abandonment`` section: the
same requests are abandoned, each no sooner than 0.1 s after it was sent, and the replay's own
trace.jsonl marks them again."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario_text

SESSIONS = 8
AFTER_S = 0.1

RECORDING = f"""
seed: 3
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.04}}}}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {{type: fixed, value: 2}}
    request_wait_generator: {{type: fixed, interval: 0.01}}
  channels:
    - {{type: text, body_length_generator: {{type: fixed, value: 20}}}}
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 25}}}}}}
abandonment:
  probability: 0.4
  after_generator: {{type: fixed, interval: {AFTER_S}}}
simulator: {{ttft_ms: 20, itl_ms: 10}}
runtime: {{max_sessions: {SESSIONS}, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{enabled: true}}
"""

REPLAY = f"""
seed: 3
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.04}}}}
session_generator:
  type: trace
  trace_file: TRACE
  flavor: {{type: timed_synthetic_session}}
  wrap_mode: false
simulator: {{ttft_ms: 20, itl_ms: 10}}
runtime: {{max_sessions: {SESSIONS}, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{enabled: true}}
"""


def _run(text: str, run_dir: Path) -> tuple[pd.DataFrame, dict[tuple[int, int], float]]:
    """The run's requests by (session, node), and the abandon_after of its trace.jsonl lines."""
    outcome = run_as_the_command(
        load_scenario_text(text, "s.yaml"), run_dir, quiet=True, plots=False
    )
    assert not outcome.interrupted
    requests = pd.read_parquet(run_dir / "requests.parquet")
    lines = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]
    marks = {
        (line["session_id"], line["node_id"]): line["abandon_after"]
        for line in lines
        if "abandon_after" in line
    }
    return requests.set_index(["session_id", "node_id"]).sort_index(), marks


def _abandoned(rows: pd.DataFrame) -> set[tuple[int, int]]:
    return set(rows.index[rows.status == "abandoned"])


def test_the_replay_abandons_the_recorded_requests(tmp_path: Path) -> None:
    recorded, marks = _run(RECORDING, tmp_path / "run")
    abandoned = _abandoned(recorded)
    assert 1 <= len(abandoned) < SESSIONS  # (the seed abandons some requests, not all)
    assert {node for _, node in abandoned} == {0, 1}  # (first turns and second turns)
    assert set(marks) == abandoned  # (every answer takes longer than the delay)
    assert set(marks.values()) == {AFTER_S}

    replay = REPLAY.replace("TRACE", str(tmp_path / "run" / "trace.jsonl"))
    replayed, marked_again = _run(replay, tmp_path / "replay")
    # (a session's turn after its abandoned one was cancelled, never sent: not in the trace)
    sent = recorded[recorded.status != "cancelled"]
    assert list(replayed.index) == list(sent.index)
    assert _abandoned(replayed) == abandoned
    assert (replayed.status[replayed.status != "abandoned"] == "ok").all()
    gone = replayed[replayed.status == "abandoned"]
    held = gone.completed_at - gone.sent_at
    assert (held >= AFTER_S).all(), held.tolist()
    assert marked_again == marks
