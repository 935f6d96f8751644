"""Several clients in one run: routing, per-model simulator engines, caps, queue waits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.generate.tokenizer import BUILTIN_VOCAB
from veeksha.scenario.loader import load_scenario_text

TWO_MODELS = """
seed: 3
clients:
  - {name: small, model: m-small, max_in_flight: 2}
  - {name: big, model: m-big, type: openai_completions, max_in_flight: 1}
simulator:
  models:
    m-big: {ttft_ms: 30, itl_ms: 1}
traffic_scheduler: {type: concurrent, target_concurrent_sessions: 6, rampup_seconds: 0}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 3}
    request_wait_generator: {type: fixed, interval: 0}
  channels: [{body_length_generator: {type: fixed, value: 12}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 6}}}
runtime: {max_sessions: 8, benchmark_timeout: 60, num_workers: 1}
"""


@pytest.fixture(scope="module")
def two_models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("clients") / "run"
    run_as_the_command(load_scenario_text(TWO_MODELS, "two.yaml"), run_dir, quiet=True, plots=False)
    return run_dir


@pytest.fixture(scope="module")
def two_models(two_models_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(two_models_dir / "requests.parquet")


def max_overlap(rows: pd.DataFrame) -> int:
    """Most requests on the wire at once, from their sent and completed times."""
    events = sorted(
        [(t, 1) for t in rows.sent_at] + [(t, -1) for t in rows.completed_at],
        key=lambda e: (e[0], e[1]),  # an end before a start at the same instant
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_each_node_goes_to_its_client_and_model(two_models: pd.DataFrame) -> None:
    rows = two_models
    assert (rows.status == "ok").all()
    assert len(rows) == 24
    assert set(zip(rows.client, rows.model, strict=True)) == {
        ("small", "m-small"),
        ("big", "m-big"),
    }
    # round robin: node j of session i goes to client (i + j) mod 2
    expected = ((rows.session_id + rows.node_id) % 2).map({0: "small", 1: "big"})
    assert (rows.client == expected).all()


def test_each_model_is_its_own_engine_in_the_simulator(two_models: pd.DataFrame) -> None:
    rows = two_models
    big, small = rows[rows.client == "big"], rows[rows.client == "small"]
    assert (big.ttfc >= 0.03).all()  # m-big's own timing (simulator.models)
    assert small.ttfc.median() < 0.03  # m-small: the section's (fast) timing


def test_the_simulators_metrics_count_each_model_apart(
    two_models_dir: Path, two_models: pd.DataFrame
) -> None:
    """/metrics of a simulator serving two models: each model's vLLM series, labelled by
    model_name, in one exposition; the last scrape (after the traffic) counts exactly the tokens
    each model generated."""
    samples = pd.read_parquet(two_models_dir / "server_metrics.parquet")
    generated = samples[samples.metric == "vllm:generation_tokens_total"]
    last = generated[generated.t == generated.t.max()]
    per_model = {
        json.loads(labels)["model_name"]: value
        for labels, value in zip(last.labels, last.value, strict=True)
    }
    expected = two_models.groupby("model").server_output_tokens.sum().to_dict()
    assert per_model == {model: float(n) for model, n in expected.items()}


def test_caps_per_client_hold_and_waits_are_recorded(two_models: pd.DataFrame) -> None:
    rows = two_models
    assert max_overlap(rows[rows.client == "big"]) <= 1
    assert max_overlap(rows[rows.client == "small"]) <= 2
    assert (rows.queue_wait >= 0).all()
    assert (rows.queue_wait <= rows.dispatch_lag + 1e-6).all()
    # six sessions start at once against a cap of one: the big client's requests queued
    assert rows[rows.client == "big"].queue_wait.max() > 0.02


def test_a_node_naming_an_unknown_client_exits_2_with_its_line(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(
        TWO_MODELS.replace(
            "session_generator:\n",
            "session_generator:\n  client_selection: {type: weighted, weights: {huge: 1}}\n",
        )
    )
    veeksha = Path(sys.executable).parent / "veeksha"
    proc = subprocess.run(
        [str(veeksha), "run", str(scenario), "--output-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CI": "true"},
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 2
    assert f"{scenario}:11:" in proc.stderr
    assert "unknown client 'huge'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def _bpe_tokenizer_json(folder: Path) -> Path:
    """A small byte-level BPE (words split into several of its tokens, unlike the builtin
    tokenizer's one a word), built here from the builtin vocabulary: never downloaded."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = [" ".join(BUILTIN_VOCAB[i : i + 50]) for i in range(0, len(BUILTIN_VOCAB), 50)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet))
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path


def test_each_clients_prompts_are_written_and_counted_in_its_own_tokenizer(tmp_path: Path) -> None:
    """clients: [a with an hf tokenizer, b without one (builtin)]: a's prompts are written and
    counted in a's tokenizer, b's in the builtin one (was: every prompt in a's, b's too)."""
    from tokenizers import Tokenizer

    path = _bpe_tokenizer_json(tmp_path)
    text = f"""
seed: 5
clients:
  - {{name: a, model: m-a, tokenizer: {{type: hf, path: {path}}}}}
  - {{name: b, model: m-b}}
traffic_scheduler: {{type: concurrent, target_concurrent_sessions: 2, rampup_seconds: 0}}
session_generator:
  session_graph: {{type: single_request}}
  channels: [{{body_length_generator: {{type: uniform, min: 40, max: 80}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 2}}}}}}
trace_recorder: {{include_content: true}}
runtime: {{max_sessions: 6, benchmark_timeout: 60, num_workers: 1}}
"""
    run_dir = tmp_path / "run"
    run_as_the_command(load_scenario_text(text, "tok.yaml"), run_dir, quiet=True, plots=False)
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert (rows.status == "ok").all()
    assert set(rows.client) == {"a", "b"}
    assert (rows.prompt_tokens_new == rows.target_prompt_tokens).all()
    bpe = Tokenizer.from_file(str(path))
    lines = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines()]
    assert len(lines) == len(rows)
    targets = dict(zip(rows.request_id, rows.target_prompt_tokens, strict=True))
    for line in lines:
        prompt = line["messages"][-1][1]
        counted = len(bpe.encode(prompt).ids) if line["client"] == "a" else len(prompt.split())
        assert counted == targets[line["request_id"]], line["client"]
    # the simulator counts in builtin tokens (a word each): fewer than the BPE's for a's
    # prompts, exactly the target for b's
    a, b = rows[rows.client == "a"], rows[rows.client == "b"]
    assert (a.prompt_tokens_total < a.target_prompt_tokens).all()
    assert (b.prompt_tokens_total == b.target_prompt_tokens).all()
