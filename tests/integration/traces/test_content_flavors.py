"""The content flavors and the public formats end to end against the built-in simulator: real
dataset text and system messages on the wire, hash-id sharing seen in ``cached_tokens``, rag's
document warm-ups, Mooncake / Azure / BurstGPT files (auto-detected) at their own times, and
malformed files refused with file:line before any run folder exists."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import run_as_the_command
from tests.integration.traces.bad_trace import assert_refused
from veeksha.evaluate.trace_sharing import SharedPrefixes, segments
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

SIM_BLOCK = 16  # the fast simulator's prefix-cache block


def _run(
    tmp: Path,
    sim: SimulatorProcess,
    trace: Path,
    flavor: str,
    extra: str = "",
    scheduler: str = "{type: concurrent, target_concurrent_sessions: 1, rampup_seconds: 0}",
    max_sessions: int = 0,
    tokenizer: str = "builtin",
) -> Path:
    """Run the trace to its end (``max_sessions``: that many measured sessions, wrapping)."""
    wrap = "true" if max_sessions else "false"
    text = f"""
seed: {zlib.crc32(trace.name.encode()) % 1000}
traffic_scheduler: {scheduler}
session_generator: {{type: trace, trace_file: {trace}, flavor: {flavor}, wrap_mode: {wrap}}}
client: {{api_base: {sim.base_url}, model: veeksha-sim, tokenizer: {{type: {tokenizer}}}}}
runtime: {{max_sessions: {max_sessions or 1000}, benchmark_timeout: 60, num_workers: 1}}
output_dir: {tmp}
{extra}
"""
    run_dir = tmp / "run"
    outcome = run_as_the_command(
        load_scenario_text(text, "t.yaml"), run_dir, quiet=True, plots=False
    )
    assert outcome.stop_reason == "completed"
    return run_dir


def _checks(run_dir: Path) -> dict[str, Any]:
    health = json.loads((run_dir / "health.json").read_text())
    return {c["name"]: c for c in health["checks"]}


def test_mooncake_sharing_shows_in_cached_tokens_as_the_hash_ids_imply(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    block = 32  # two simulator blocks per trace block
    ids = [[0, 1, 2], [0, 1, 3], [4], [0, 1, 2, 5], [4, 6], [0, 7], [8, 9]]
    rows = [
        {"timestamp": 100 * i, "input_length": block * len(h), "output_length": 3, "hash_ids": h}
        for i, h in enumerate(ids)
    ]
    trace = tmp_path / "mooncake_trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = _run(tmp_path, fast_simulator, trace, f"{{type: mooncake, block_size: {block}}}")
    requests = pd.read_parquet(run_dir / "requests.parquet").sort_values("session_id")
    assert (requests.status == "ok").all()
    assert list(requests.prompt_tokens_new) == [r["input_length"] for r in rows]
    seen = SharedPrefixes()
    expected = []
    for h in ids:
        prompt = segments(h, block * len(h), block, None)
        shared = min(seen.shared(prompt), block * len(h) - 1)
        expected.append(shared // SIM_BLOCK * SIM_BLOCK)
        seen.add(prompt)
    assert expected == [0, 64, 0, 96, 32, 32, 0]
    assert list(requests.cached_tokens) == expected
    sharing = _checks(run_dir)["prefix_sharing"]
    assert sharing["status"] == "PASS", sharing
    assert sharing["statistics"]["over_implied"] == 0
    assert sharing["statistics"]["hit_ratio"] == pytest.approx(1.0)


def test_shared_prefix_blocks_are_exact_in_a_server_tokenizer(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    # the simulator's subword tokenizer splits most builtin words; the calibrated vocabulary
    # (client.tokenizer: server) makes each block exactly block_size of its tokens, so its
    # prefix cache sees the sharing the hash ids imply
    sim = start_simulator(tokenizer="subword")
    block = 32
    ids = [[0, 1, 2], [0, 1, 3], [4], [0, 1, 2, 5]]
    rows = [{"input_length": block * len(h), "output_length": 2, "hash_ids": h} for h in ids]
    trace = tmp_path / "prefix.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    flavor = f"{{type: shared_prefix, block_size: {block}}}"
    run_dir = _run(tmp_path, sim, trace, flavor, tokenizer="server")
    requests = pd.read_parquet(run_dir / "requests.parquet").sort_values("session_id")
    assert (requests.status == "ok").all()
    # the server's own count (usage) of every prompt is the trace's length
    assert list(requests.prompt_tokens_total) == [r["input_length"] for r in rows]
    assert list(requests.cached_tokens) == [0, 64, 0, 96]


def test_a_sharegpt_dataset_sends_its_own_text_with_live_history(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    conversations = [
        {
            "id": "a",
            "conversations": [
                {"from": "gpt", "value": "a leading greeting"},
                {"from": "system", "value": "answer briefly"},
                {"from": "human", "value": "what is a prefix cache"},
                {"from": "gpt", "value": "it keeps computed blocks"},
                {"from": "human", "value": "and eviction"},
                {"from": "gpt", "value": "least recently used first by default"},
                {"from": "human", "value": "a question nobody answered"},
            ],
        },
        {
            "id": "b",
            "conversations": [
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "hello there"},
            ],
        },
    ]
    trace = tmp_path / "sharegpt.json"
    trace.write_text(json.dumps(conversations, indent=1))
    run_dir = _run(
        tmp_path,
        fast_simulator,
        trace,
        "auto",
        "trace_recorder: {enabled: true, include_content: true}",
    )
    requests = pd.read_parquet(run_dir / "requests.parquet").sort_values(["session_id", "node_id"])
    assert list(requests.prompt_tokens_new) == [5 + 2, 2, 1]  # the system message counts
    assert list(requests.requested_output_tokens) == [4, 6, 2]  # the dataset's replies
    assert list(requests.history_parent.fillna(-1)) == [-1, 0, -1]
    lines = [json.loads(x) for x in (run_dir / "trace.jsonl").read_text().splitlines()]
    sent = {(x["session_id"], x["node_id"]): x["messages"] for x in lines}
    assert sent[(0, 0)] == [["system", "answer briefly"], ["user", "what is a prefix cache"]]
    second = sent[(0, 1)]
    assert second[:2] == sent[(0, 0)]
    assert second[2][0] == "assistant"
    assert second[3] == ["user", "and eviction"]
    assert sent[(1, 0)] == [["user", "hi"]]
    log = (run_dir / "run.log").read_text()
    assert "untimed_content_multi_turn" in log
    assert "flavor detected from the file" in log
    assert "WARNING trace: 2 not replayed: unanswered_turns" in log


@pytest.mark.parametrize("form", ["jsonl", "csv"])
def test_your_own_prompts_are_sent_as_they_are_with_their_lengths(
    tmp_path: Path, fast_simulator: SimulatorProcess, form: str
) -> None:
    """The ``prompts`` flavor (detected by its ``prompt`` column): each row one request of its
    own, its text as written, its output_length (the flavor's default where it has none), a
    system message before it; the server counts exactly those words."""
    rows = [
        {"prompt": "Summarise the causes of the French revolution.", "output_length": 9},
        {"prompt": 'Write a haiku, about autumn:  leaves "falling".'},
        {"prompt": "Name three primes.", "system": "You are terse.", "output_length": 3},
    ]
    if form == "jsonl":
        trace = tmp_path / "mine.jsonl"
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        trace = tmp_path / "mine.csv"  # (empty cells: no output_length, no system)
        trace.write_text(
            "prompt,output_length,system\n"
            '"Summarise the causes of the French revolution.",9,\n'
            '"Write a haiku, about autumn:  leaves ""falling"".",,\n'
            '"Name three primes.",3,You are terse.\n'
        )
    run_dir = _run(
        tmp_path,
        fast_simulator,
        trace,
        "auto",
        "trace_recorder: {enabled: true, include_content: true}",
    )
    requests = pd.read_parquet(run_dir / "requests.parquet").sort_values("session_id")
    assert (requests.status == "ok").all()
    assert list(requests.requested_output_tokens) == [9, 256, 3]
    assert list(requests.output_tokens) == [9, 256, 3]
    words = [len(r["prompt"].split()) + len(r.get("system", "").split()) for r in rows]
    assert list(requests.prompt_tokens_total) == words  # (the simulator counts words)
    assert requests.history_parent.isna().all()
    lines = [json.loads(x) for x in (run_dir / "trace.jsonl").read_text().splitlines()]
    sent = {x["session_id"]: x["messages"] for x in lines}
    assert sent[0] == [["user", rows[0]["prompt"]]]
    assert sent[1] == [["user", rows[1]["prompt"]]]
    assert sent[2] == [["system", "You are terse."], ["user", "Name three primes."]]
    log = (run_dir / "run.log").read_text()
    assert "prompts trace" in log
    assert "flavor detected from the file" in log
    # the default length is the flavor's to set; a text column is a prompt too
    other = tmp_path / "other"
    other.mkdir()
    texts = other / "texts.jsonl"
    texts.write_text('{"text": "one two three"}\n')
    run_dir = _run(other, fast_simulator, texts, "{type: prompts, output_length: 7}")
    (row,) = pd.read_parquet(run_dir / "requests.parquet").itertuples()
    assert (row.status, row.requested_output_tokens, row.prompt_tokens_total) == ("ok", 7, 3)


def test_rag_warms_each_document_up_once_and_counts_the_rows_left_out(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    trace = tmp_path / "rag.csv"
    trace.write_text(
        "doc_id,prompt_text,input_length,output_length\n"
        "manual,how do I reset it,64,3\n"
        "faq,is it free,48,2\n"
        "manual,where is the fuse,64,4\n"
        "rare,who wrote this,40,2\n"
        "faq,can I share it,48,2\n"
    )
    # wrapped: the warm-ups run once, before the first pass, never in a later one
    flavor = "{type: rag, num_documents: 2, block_size: 16}"
    run_dir = _run(tmp_path, fast_simulator, trace, flavor, max_sessions=8)
    requests = pd.read_parquet(run_dir / "requests.parquet").sort_values("session_id")
    assert list(requests.phase) == ["warmup"] * 2 + ["measured"] * 8
    outputs = list(requests.requested_output_tokens)
    assert outputs[:6] == [1, 1, 3, 2, 4, 2]
    assert sorted(outputs[6:]) == [2, 2, 3, 4]  # the second pass: the questions only
    # each question finds its document in the cache (the warm-up put it there)
    questions = requests[requests.phase == "measured"]
    document = {3: 64, 4: 64, 2: 48}  # each question's document, by its output length
    expected = [document[o] for o in questions.requested_output_tokens]
    assert list(questions.cached_tokens) == expected  # the second pass too: same documents
    log = (run_dir / "run.log").read_text()
    assert "6 requests in 6 sessions (4 from the trace's rows and 2 warm-up(s)" in log
    assert "WARNING trace: 1 not replayed: other_documents (rows of 1 document(s) beyond" in log
    assert "most frequent (num_documents)); first lines 5" in log
    assert _checks(run_dir)["prefix_sharing"]["status"] == "PASS"


AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    + "".join(f"2023-11-16 18:15:{46 + i * 0.25:09.6f}0,{20 + i},{2 + i % 3}\n" for i in range(8))
    + "2023-11-16 18:15:48.5000000,30,0\n"
)
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    + "".join(
        f"{5 + i * 0.25},ChatGPT,{20 + i},{2 + i % 3},{22 + i},Conversation log\n" for i in range(8)
    )
    + "7.5,GPT-4,30,0,30,API log\n"
)


@pytest.mark.parametrize(
    ("name", "text", "flavor"),
    [("azure.csv", AZURE, "azure_llm"), ("burst.csv", BURSTGPT, "burstgpt")],
)
def test_a_public_trace_is_detected_and_replayed_at_its_own_times(
    tmp_path: Path, fast_simulator: SimulatorProcess, name: str, text: str, flavor: str
) -> None:
    trace = tmp_path / name
    trace.write_text(text)
    run_dir = _run(tmp_path, fast_simulator, trace, "auto", scheduler="{type: trace, speedup: 2.0}")
    requests = pd.read_parquet(run_dir / "requests.parquet").sort_values("session_id")
    assert list(requests.prompt_tokens_new) == [20 + i for i in range(8)]
    assert list(requests.requested_output_tokens) == [2 + i % 3 for i in range(8)]
    sessions = pd.read_parquet(run_dir / "sessions.parquet").sort_values("session_id")
    assert np.allclose(sessions.started_at, [i * 0.125 for i in range(8)], atol=1e-6)
    # judged against the trace's own times (its PASS also needs a send lag under 5 ms: wall clock)
    timeline = _checks(run_dir)["arrival_distribution"]["statistics"]
    assert timeline["max_planned_deviation_s"] <= 1e-6
    log = (run_dir / "run.log").read_text()
    assert f"{flavor} trace" in log
    assert "flavor detected from the file" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["trace"]["unservable_lines"] == [10]  # the failed request


@pytest.mark.parametrize(
    ("name", "text", "flavor", "needles"),
    [
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [0]}\n',
            "mooncake",
            [":1:", "does not fit 1 hash ids of block_size 512"],
        ),
        (
            "m.jsonl",
            '{"timestamp": 0, "input_length": 6, "output_length": 2, "hash_ids": [0]}\n'
            '{"timestamp": 1, "input_length": 6, "output_length": 2, "hash_ids": [-3]}\n',
            "mooncake",
            [":2:", "block ids are 0 or more"],
        ),
        (
            "c.jsonl",
            '{"conversations": "hello"}\n',
            "untimed_content_multi_turn",
            [":1:", "not a list"],
        ),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,4\nyesterday,3,4\n",
            "auto",
            [":3:", "not a date and time"],
        ),
        ("r.csv", "doc_id,input_length,output_length\nd,3,4\n", "rag", [":1:", "'prompt_text'"]),
        (
            "p.jsonl",
            '{"prompt": "fine"}\n{"prompt": "  "}\n',
            "auto",
            [":2:", "prompt is empty; give each row the text to send"],
        ),
        (
            "p.jsonl",
            '{"prompt": "fine", "output_length": -4}\n',
            "prompts",
            [":1:", "output_length = -4 is negative"],
        ),
        ("p.csv", "output_length\n5\n", "prompts", ["'prompt'"]),
        (
            "p.jsonl",
            '{"prompt": "fine", "output_length": 100000000}\n',
            "prompts",
            [":1:", "output_length = 100000000 is more than 16777216 tokens"],
        ),
        ("p.jsonl", '{"Prompt": "hi"}\n', "auto", [":1:", "no 'prompt' or 'text' in this row"]),
    ],
)
def test_a_malformed_content_or_public_trace_exits_2_with_file_and_line(
    tmp_path: Path, name: str, text: str, flavor: str, needles: list[str]
) -> None:
    assert_refused(tmp_path, name, text, flavor, needles)
