"""Speculative decoding as the server counts it: against a simulator that drafts (``spec_tokens``
3, each draft token accepted with chance 0.7 while the ones before it were), summary.json's
``server`` section holds vLLM's spec_decode counters' increase over the run, exactly what the
server counted, the acceptance rate and length read from them as ``vllm bench serve`` reads
them, and the report and ``compare`` show both."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import run_as_the_command
from veeksha.cli import main
from veeksha.net import fetch
from veeksha.scenario.loader import load_scenario_text

SCENARIO = """
seed: 9
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator:
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: uniform, min: 32, max: 96}}}
client: {api_base: API_BASE, model: veeksha-sim}
runtime: {max_sessions: 40, num_workers: 1}
server_metrics: {interval: 0.2}
"""


def test_the_acceptance_is_the_servers_own_count(
    start_simulator: StartSimulator, tmp_path: Path
) -> None:
    sim = start_simulator(spec_tokens=3, spec_acceptance=0.7)
    run_dir = tmp_path / "run"
    text = SCENARIO.replace("API_BASE", str(sim.base_url))
    run_as_the_command(load_scenario_text(text, "s.yaml"), run_dir, quiet=True, plots=False)
    counted = {
        (sample.name, sample.labels.get("position")): sample.value
        for family in text_string_to_metric_families(
            fetch("GET", f"{sim.root_url}/metrics").body.decode()
        )
        for sample in family.samples
        if sample.name.startswith("vllm:spec_decode")
    }
    server = json.loads((run_dir / "summary.json").read_text())["server"]
    spec = server["spec_decode"]
    # (a fresh server: what it counted is what the run added)
    drafts = counted["vllm:spec_decode_num_drafts_total", None]
    tokens = counted["vllm:spec_decode_num_draft_tokens_total", None]
    accepted = counted["vllm:spec_decode_num_accepted_tokens_total", None]
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (
        drafts,
        tokens,
        accepted,
    )
    assert tokens == 3 * drafts > 0
    assert spec["acceptance_rate"] == server["spec_acceptance_rate"] == accepted / tokens
    assert spec["acceptance_length"] == server["spec_acceptance_length"] == 1 + accepted / drafts
    per_position = [
        counted["vllm:spec_decode_num_accepted_tokens_per_pos_total", str(i)] / drafts
        for i in range(3)
    ]
    assert spec["per_position"] == per_position
    assert per_position[0] > per_position[1] > per_position[2]  # (each needs the ones before)
    assert json.loads((run_dir / "summary.json").read_text())["requests"]["ok"] == 40
    # 0.7 + 0.7² + 0.7³ of 3 draft tokens accepted, less what answers' ends cut
    assert spec["acceptance_rate"] == pytest.approx((0.7 + 0.49 + 0.343) / 3, abs=0.06)

    report = CliRunner().invoke(main, ["report", str(run_dir), "--no-plots"], env={"COLUMNS": "80"})
    assert report.exit_code == 0, report.output
    assert "spec-decode acceptance rate" in report.output
    assert "spec-decode acceptance length" in report.output
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    compared = CliRunner().invoke(main, ["compare", str(run_dir), str(copy)], env={"COLUMNS": "80"})
    assert compared.exit_code == 0, compared.output
    assert "spec-decode acceptance rate" in compared.output


def test_a_server_that_does_not_draft_has_no_spec_decode(
    start_simulator: StartSimulator, tmp_path: Path
) -> None:
    sim = start_simulator()
    run_dir = tmp_path / "run"
    text = SCENARIO.replace("API_BASE", str(sim.base_url)).replace(
        "max_sessions: 40", "max_sessions: 5"
    )
    run_as_the_command(load_scenario_text(text, "s.yaml"), run_dir, quiet=True, plots=False)
    server = json.loads((run_dir / "summary.json").read_text())["server"]
    assert "spec_decode" not in server
    assert "spec_acceptance_rate" not in server
