"""A run against a reasoning model (the built-in simulator with ``reasoning_tokens``): three-turn
conversations whose every answer thinks for 5 tokens, then answers with 7.

The thinking's chunks are chunks: the first of them is the time to first chunk, each gap is a
TBC gap, and the time to the answer is kept apart (``answer_ttfc``, the read of the sixth
chunk). The next turn sends back the answer and not the thinking: the server's prompt count of
turn n+1 is turn n's prompt, its answer's 7 tokens and the new message, nothing more. The report
shows the answer's TTFC. Before, the thinking's chunks were not chunks at all: TTFC was the
answer's and the whole thinking one gap of TBC."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.robustness.helpers import run_in_process

pytestmark = pytest.mark.timeout(120)

THINKING, ANSWER = 5, 7

SCENARIO = f"""
seed: 11
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.05}}}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: fixed, value: 3}}
    request_wait_generator: {{type: fixed, interval: 0.01}}
    inherit_history: true
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 20}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: {THINKING + ANSWER}}}}}}}
client: {{type: openai_chat_completions, thinking_opened: OPENED}}
simulator: {{reasoning_tokens: {THINKING}, reasoning_field: FIELD, ttft_ms: 5, itl_ms: 2}}
runtime: {{max_sessions: 6, benchmark_timeout: 60, num_workers: 1}}
evaluators:
  - type: performance
    slos: [{{name: answer shown, metric: answer_ttfc, percentile: 0.99, value: 30}}]
"""


@pytest.mark.parametrize("field", ["reasoning", "inline", "template"])
def test_a_reasoning_models_thinking_is_timed_as_chunks_and_not_sent_back(
    tmp_path: Path, field: str
) -> None:
    """``reasoning``: in its own key, counted in the usage; ``inline``: in the content between
    ``<think>`` and ``</think>``, as a server without a reasoning parser sends it (no count);
    ``template``: likewise, but the chat template opened ``<think>`` in the prompt, so the
    stream has only ``</think>`` (``client.thinking_opened``)."""
    path = tmp_path / "reasoning.yaml"
    opened = "true" if field == "template" else "false"
    path.write_text(SCENARIO.replace("FIELD", field).replace("OPENED", opened))
    result = run_in_process(path, tmp_path / "out")
    assert result.code == 0, result.output
    (run_dir,) = (tmp_path / "out").iterdir()
    rows = pq.read_table(run_dir / "requests.parquet").to_pylist()
    assert len(rows) == 18
    for row in rows:
        assert row["status"] == "ok"
        assert row["output_tokens"] == THINKING + ANSWER
        assert row["reasoning_tokens"] == (THINKING if field == "reasoning" else None)
        assert row["reasoning_chunks"] == THINKING
        chunks = row["chunk_times"]
        assert len(chunks) == THINKING + ANSWER  # (one token a chunk, thinking included)
        assert len(row["tbc"]) == len(chunks) - 1
        assert row["ttfc"] == pytest.approx(chunks[0] - row["sent_at"], abs=1e-9)
        assert row["answer_ttfc"] == pytest.approx(chunks[THINKING] - row["sent_at"], abs=1e-9)
        assert row["answer_ttfc"] >= row["ttfc"]  # (equal when both came in one read)
    by_session: dict[int, list[dict[str, object]]] = {}
    for row in sorted(rows, key=lambda r: (r["session_id"], r["node_id"])):
        by_session.setdefault(row["session_id"], []).append(row)
    for turns in by_session.values():
        for before, after in itertools.pairwise(turns):
            # the server's count: the history (the last prompt and its answer), the new message
            assert after["prompt_tokens_total"] == (
                before["prompt_tokens_total"] + ANSWER + after["prompt_tokens_new"]
            )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["latency"]["answer_ttfc"]["count"] == 18
    assert summary["latency"]["ttfc"]["p50"] <= summary["latency"]["answer_ttfc"]["p50"]
    (slo,) = json.loads((run_dir / "slo.json").read_text())["slos"]
    assert (slo["metric"], slo["met"], slo["samples"]) == ("answer_ttfc", True, 18)
    assert slo["observed"] == pytest.approx(summary["latency"]["answer_ttfc"]["p99"])
    assert "answer TTFC p50" in result.output
    assert "answer_ttfc" in result.output
