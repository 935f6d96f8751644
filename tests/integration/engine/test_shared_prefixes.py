"""Several shared prefixes against a server's prefix cache: 40 first requests, each opening with
one of 4 prefixes of 64 tokens (``shared_prefix_count``, ``shared_prefix_tokens``). The
simulator's cache (16-token blocks) finds each prefix cached from its second use on: every
request but each prefix's first has exactly its 64 prefix tokens cached, and those first uses
are 4, one per prefix."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario_text

SCENARIO = """
seed: 21
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  session_graph: {type: single_request}
  channels:
    - type: text
      body_length_generator: {type: fixed, value: 100}
      shared_prefix_tokens: 64
      shared_prefix_count: 4
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
client: {type: openai_completions, api_base: API_BASE, model: veeksha-sim}
runtime: {max_sessions: 40, num_workers: 1}
"""


def test_each_prefix_is_cached_from_its_second_use(
    start_simulator: StartSimulator, tmp_path: Path
) -> None:
    sim = start_simulator(prefix_cache_tokens=100_000, prefix_cache_block_size=16)
    run_dir = tmp_path / "run"
    text = SCENARIO.replace("API_BASE", str(sim.base_url))
    run_as_the_command(load_scenario_text(text, "s.yaml"), run_dir, quiet=True, plots=False)
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert (rows.status == "ok").all()
    assert (rows.shared_prefix_tokens == 64).all()
    assert Counter(rows.cached_tokens.tolist()) == {0: 4, 64: 36}
