"""Embeddings, end to end: a real ``veeksha run`` of an ``openai_embeddings`` client against
the built-in simulator (its /v1/embeddings, prefill-timed), alone and beside a chat client in
one workflow. Every embedding request is answered with a vector and counted by the server in
the prompt's tokens exactly, asks for and gets no output, and times as one whole answer (TTFC =
E2E); the health checks of its counts pass; the chat requests of the same run are
unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario, load_scenario_text

ALONE = """
seed: 8
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  session_graph: {type: single_request}
  channels: [{type: text, body_length_generator: {type: uniform, min: 20, max: 400}}]
client: {type: openai_embeddings, encoding_format: base64}
simulator: {timing: engine, prefill_tokens_per_s: 40000, ttft_ms: 2}
runtime: {max_sessions: 30, benchmark_timeout: 60, num_workers: 1}
"""

WITH_CHAT = """
seed: 8
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 2}
    request_wait_generator: {type: fixed, interval: 0.01}
  channels: [{type: text, body_length_generator: {type: fixed, value: 40}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 6}}}
  client_selection: {type: round_robin}
clients:
  - {name: embed, type: openai_embeddings}
  - {name: chat, type: openai_chat_completions}
simulator: {itl_ms: 1}
runtime: {max_sessions: 10, benchmark_timeout: 60, num_workers: 1}
"""


def _run(text: str, run_dir: Path) -> tuple[pd.DataFrame, dict]:
    outcome = run_as_the_command(load_scenario_text(text, "s.yaml"), run_dir, quiet=True)
    assert not outcome.interrupted
    summary = json.loads((run_dir / "summary.json").read_text())
    return pd.read_parquet(run_dir / "requests.parquet"), summary


def test_every_embedding_is_counted_exactly_and_times_as_one_answer(tmp_path: Path) -> None:
    rows, summary = _run(ALONE, tmp_path / "run")
    assert len(rows) == 30
    assert (rows.status == "ok").all()
    assert (rows.prompt_tokens_total == rows.target_prompt_tokens).all()  # the server's count
    assert (rows.requested_output_tokens == 0).all()
    assert (rows.output_tokens == 0).all()
    assert (rows.ttfc == rows.e2e).all()
    assert rows.tpot.isna().all()
    # the simulator's prefill: 40,000 tokens/s, so a 400-token input takes 10 ms more than 20.
    # The medians of the longest and shortest thirds: a request a loaded machine held up once
    # (a short one's e2e 42 ms in one CI run, where 1 ms is usual) moves neither.
    ranked = rows.sort_values("target_prompt_tokens")
    short, long = ranked.iloc[:10], ranked.iloc[-10:]
    tokens = long.target_prompt_tokens.median() - short.target_prompt_tokens.median()
    assert long.e2e.median() - short.e2e.median() > tokens / 40000 * 0.8
    # (the checks of what an embedding is; the timing ones answer for the machine's load)
    checks = summary["health"]["checks"]
    for name in ("prompt_length", "output_length", "server_numbers", "server_agreement"):
        assert checks[name] == "PASS", (name, summary["health"])
    assert summary["throughput"]["input_tokens"] == rows.prompt_tokens_total.sum()
    assert summary["throughput"]["output_tokens"] == 0
    assert summary["run"]["not_streamed"] == ["default"]
    metrics = pd.read_parquet(tmp_path / "run" / "server_metrics.parquet")
    served = metrics[
        (metrics.metric == "veeksha_sim_requests_total")
        & metrics.labels.str.contains('"endpoint":"embeddings"', regex=False)
    ]
    assert served.sort_values("t").value.iloc[-1] == 30
    # the resolved config.yaml loads again (veeksha report reads it), defaults and all
    again = load_scenario(tmp_path / "run" / "config.yaml")
    assert again.client.type == "openai_embeddings"


def test_an_embeddings_client_and_a_chat_client_serve_one_run(tmp_path: Path) -> None:
    rows, summary = _run(WITH_CHAT, tmp_path / "run")
    assert (rows.status == "ok").all()
    embed, chat = rows[rows.client == "embed"], rows[rows.client == "chat"]
    assert len(embed) == len(chat) == 10
    assert (embed.output_tokens == 0).all()
    assert (embed.requested_output_tokens == 0).all()
    assert (chat.output_tokens == 6).all()
    assert (chat.chunk_times.map(len) >= 1).all()  # (streamed: its chunks timed)
    assert (chat.ttfc <= chat.e2e).all()
    assert summary["health"]["checks"]["output_length"] == "PASS"
