"""The ``normal`` and ``choice`` length generators in a whole run against the simulator: each
prompt is as long as drawn (the simulator's usage agrees), and the answers' lengths are the
choice's values, by their weights; the same seed draws the same lengths."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario_text

pytestmark = pytest.mark.timeout(120)

SCENARIO = """
seed: {seed}
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.005}}}}
session_generator:
  session_graph: {{type: linear, num_request_generator: {{type: fixed, value: 1}}}}
  channels:
    - type: text
      body_length_generator: {{type: normal, mean: 60, std: 15, min: 20, max: 90}}
  output_spec:
    text:
      output_length_generator: {{type: choice, values: [2, 12], weights: [75, 25]}}
runtime: {{max_sessions: 200, benchmark_timeout: 60, num_workers: 1}}
"""


def _rows(tmp_path: Path, seed: int, name: str) -> pd.DataFrame:
    scenario = load_scenario_text(SCENARIO.format(seed=seed), "s.yaml")
    run_as_the_command(scenario, tmp_path / name, quiet=True, plots=False)
    return pd.read_parquet(tmp_path / name / "requests.parquet").sort_values("session_id")


def test_normal_prompts_and_a_choice_of_output_lengths(tmp_path: Path) -> None:
    rows = _rows(tmp_path, 5, "a")
    assert len(rows) == 200
    assert (rows.status == "ok").all()
    prompts = rows.target_prompt_tokens
    assert prompts.between(20, 90).all()
    assert stats.ttest_1samp(prompts, 60).pvalue > 0.001
    assert 10 < prompts.std() < 20
    assert (rows.prompt_tokens_total == prompts).all()  # (the simulator counts them so)
    outputs = rows.requested_output_tokens
    assert set(outputs) == {2, 12}
    short = int((outputs == 2).sum())
    assert stats.binomtest(short, 200, 0.75).pvalue > 0.001
    assert (rows.output_tokens == outputs).all()
    again = _rows(tmp_path, 5, "b")
    assert again.target_prompt_tokens.tolist() == prompts.tolist()
    assert again.requested_output_tokens.tolist() == outputs.tolist()


def test_length_pairs_size_each_request_as_one_of_its_pairs(tmp_path: Path) -> None:
    """``length_pairs`` in a run: each request's prompt and answer lengths are one pair, as the
    server counted them, each pair with its share of the requests."""
    text = """
seed: 2
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.004}}
session_generator:
  session_graph: {type: linear, num_request_generator: {type: fixed, value: 2}}
  length_pairs:
    - {input: 40, output: 3, weight: 70}
    - {input: 300, output: 20, weight: 30}
runtime: {max_sessions: 100, benchmark_timeout: 60, num_workers: 1}
"""
    run_as_the_command(load_scenario_text(text, "s.yaml"), tmp_path / "p", quiet=True, plots=False)
    rows = pd.read_parquet(tmp_path / "p" / "requests.parquet")
    assert len(rows) == 200
    assert (rows.status == "ok").all()
    pairs = list(zip(rows.prompt_tokens_new, rows.output_tokens, strict=True))
    assert set(pairs) == {(40, 3), (300, 20)}
    assert stats.binomtest(pairs.count((40, 3)), 200, 0.7).pvalue > 0.001
    assert (rows.requested_output_tokens == rows.output_tokens).all()
