"""A run's labels from the command line (``--set labels.KEY=VALUE``) reach summary.json's
``run.labels``, and ``veeksha compare`` sets two runs' labels side by side."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.robustness.helpers import run_cli, write_scenario
from veeksha.simulator.process import SimulatorProcess

SCENARIO = """
seed: 3
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator:
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
client: {api_base: API_BASE, model: veeksha-sim}
runtime: {max_sessions: 3, num_workers: 1}
labels: {engine: sim}
"""


def test_labels_reach_the_summary_and_compare(
    fast_simulator: SimulatorProcess, tmp_path: Path
) -> None:
    path = write_scenario(tmp_path, SCENARIO.replace("API_BASE", str(fast_simulator.base_url)))
    runs = []
    for gpu in ("H100", "A100"):
        out = tmp_path / gpu
        result = run_cli(
            "run", str(path), "--set", f"labels.gpu={gpu}", "--output-dir", str(out), "-q",
            "--no-plots",
        )  # fmt: skip
        assert result.code == 0, result.output
        (run_dir,) = out.iterdir()
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["run"]["labels"] == {"engine": "sim", "gpu": gpu}
        runs.append(run_dir)
    assert runs[0].name.split("-")[-1] == runs[1].name.split("-")[-1]  # (one scenario hash)
    compared = run_cli("compare", *map(str, runs), env=None)
    assert compared.code == 0, compared.output
    rows = [" ".join(line.split()) for line in compared.stdout.splitlines()]
    assert "gpu H100 A100" in rows
    assert "engine sim sim" in rows
