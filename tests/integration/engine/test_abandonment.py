"""Abandoned requests, end to end: a real ``veeksha run`` of 3-turn chats against the built-in
simulator (answers of ~0.3 s), where each request's user abandons it 0.1 s after it was sent
with probability 0.35. The requests abandoned are exactly those the seed chose (the first chosen
turn of each session; the turns after it are cancelled, never sent), each one dropped no sooner
than 0.1 s after it was sent and before its answer ended; the server saw each of them go (its
aborts); the sessions, summary.json, run.log and the report say so."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
from rich.console import Console

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.evaluate.report import render_summary
from veeksha.generate.abandonment import Abandoner
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.scenario.loader import load_scenario_text

SESSIONS = 16
TURNS = 3
AFTER_S = 0.1
OUTPUT_TOKENS = 25

SCENARIO = f"""
seed: 5
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.04}}}}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {{type: fixed, value: {TURNS}}}
    request_wait_generator: {{type: fixed, interval: 0.01}}
  channels:
    - {{type: text, body_length_generator: {{type: fixed, value: 20}}}}
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: {OUTPUT_TOKENS}}}}}}}
abandonment:
  probability: 0.35
  after_generator: {{type: fixed, interval: {AFTER_S}}}
simulator: {{ttft_ms: 20, itl_ms: 10}}
runtime: {{max_sessions: {SESSIONS}, benchmark_timeout: 60, num_workers: 2}}
"""


def _chosen(scenario_text: str) -> dict[int, int | None]:
    """Each session's first turn the seed abandons (None: none), from the draws alone: a linear
    session's choice depends only on the seed, its id and its node count."""
    scenario = load_scenario_text(scenario_text, "s.yaml")
    abandon = Abandoner(scenario.abandonment, scenario.seed)
    chosen: dict[int, int | None] = {}
    for session in range(SESSIONS):
        nodes = [NodeSpec(i, (i - 1,) if i else (), None, 0.0, "", 0, 1) for i in range(TURNS)]
        marked = abandon(SessionSpec(session, nodes)).nodes
        first = [i for i, node in enumerate(marked) if node.abandon_after_s is not None]
        chosen[session] = first[0] if first else None
    return chosen


def _run(run_dir: Path) -> pd.DataFrame:
    outcome = run_as_the_command(load_scenario_text(SCENARIO, "s.yaml"), run_dir, quiet=True)
    assert not outcome.interrupted
    return pd.read_parquet(run_dir / "requests.parquet")


def _last_counter(run_dir: Path, metric: str, label: str) -> float:
    metrics = pd.read_parquet(run_dir / "server_metrics.parquet")
    rows = metrics[(metrics.metric == metric) & metrics.labels.str.contains(label, regex=False)]
    return float(rows.sort_values("t").value.iloc[-1])


def test_the_chosen_requests_are_abandoned_after_their_delay(tmp_path: Path) -> None:
    chosen = _chosen(SCENARIO)
    abandoning = {s for s, turn in chosen.items() if turn is not None}
    assert 4 <= len(abandoning) <= SESSIONS - 4  # (the seed gives both kinds of session)

    run_dir = tmp_path / "run"
    rows = _run(run_dir)
    by_node = rows.set_index(["session_id", "node_id"]).sort_index()
    for session, turn in chosen.items():
        for node in range(TURNS):
            status = by_node.loc[(session, node), "status"]
            if turn is None or node < turn:
                assert status == "ok", (session, node)
            elif node == turn:
                assert status == "abandoned", (session, node)
            else:
                assert status == "cancelled", (session, node)
                message = by_node.loc[(session, node), "error_message"]
                assert "its user abandoned another request of its session" in message

    abandoned = rows[rows.status == "abandoned"]
    assert len(abandoned) == len(abandoning)
    assert (abandoned.abandon_after == AFTER_S).all()
    held = abandoned.completed_at - abandoned.sent_at
    assert (held >= AFTER_S).all(), held.tolist()  # never before its time
    assert (abandoned.error_kind == "abandoned").all()
    assert abandoned.error_message.str.contains(f"{AFTER_S:g} s after it was sent").all()
    # cut short: its first chunks came (TTFT 20 ms), not the whole answer (~0.27 s)
    chunks = abandoned.chunk_times.map(len)
    assert ((chunks > 0) & (chunks < OUTPUT_TOKENS)).all(), chunks.tolist()
    assert abandoned.ttfc.isna().all()  # (latencies are the ok rows')

    # the server saw each one go: its aborted requests, and every other one answered in full
    aborted = _last_counter(run_dir, "vllm:request_success_total", '"finished_reason":"abort"')
    finished = _last_counter(run_dir, "vllm:request_success_total", '"finished_reason":"length"')
    assert aborted == len(abandoned)
    assert finished == (rows.status == "ok").sum()

    sessions = pd.read_parquet(run_dir / "sessions.parquet").set_index("session_id")
    for session, turn in chosen.items():
        assert sessions.loc[session, "status"] == ("ok" if turn is None else "abandoned")
        assert sessions.loc[session, "num_error"] == 0

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["requests"]["abandoned"] == len(abandoned)
    assert summary["errors"]["failed"] == 0
    assert summary["errors"]["abandonment_rate"] == len(abandoned) / len(rows)
    assert summary["sessions"]["abandoned"] == len(abandoning)
    section = summary["abandonment"]
    assert (section["chosen"], section["abandoned"]) == (len(abandoned), len(abandoned))
    assert section["answered_first"] == 0  # (every answer takes longer than the delay)
    assert section["lateness"]["count"] == len(abandoned)
    assert section["lateness"]["min"] >= 0
    assert section["lateness"]["max"] == (held - AFTER_S).max()
    log = (run_dir / "run.log").read_text()
    assert f"(0 failed, {len(abandoned)} abandoned)" in log
    out = io.StringIO()
    render_summary(Console(file=out, width=80, color_system=None), summary)
    assert re.search(rf"│ abandoned +│ {len(abandoned)} \(", out.getvalue()), out.getvalue()
