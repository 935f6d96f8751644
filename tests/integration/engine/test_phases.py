"""A multi-phase run against the built-in simulator: warmup, then three open-loop rates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

RATES = {"r10": 10.0, "r20": 20.0, "r40": 40.0}

PHASED = """
seed: 3
traffic_scheduler: {{type: rate, interval_generator: {{type: poisson, arrival_rate: 10}}}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: uniform, min: 1, max: 2}}
    request_wait_generator: {{type: fixed, interval: 0.2}}
  channels: [{{type: text, body_length_generator: {{type: uniform, min: 5, max: 20}}}}]
  output_spec: {{text: {{output_length_generator: {{type: uniform, min: 3, max: 8}}}}}}
client: {{api_base: "{base}", model: veeksha-sim}}
phases:
  - {{name: warmup, duration: 0.5}}
  - {{name: r10, duration: 2.5, arrival_rate: 10}}
  - {{name: r20, duration: 2.5, arrival_rate: 20}}
  - {{name: r40, duration: 2.5, arrival_rate: 40}}
runtime: {{max_sessions: -1, benchmark_timeout: 60, num_workers: 1}}
evaluators:
  - type: performance
    stream_metrics: false
    slos: [{{name: ttfc, metric: ttfc, percentile: 0.99, value: 5}}]
"""


def test_three_phases_in_one_run(tmp_path: Path, fast_simulator: SimulatorProcess) -> None:
    scenario = load_scenario_text(PHASED.format(base=fast_simulator.base_url), "phases.yaml")
    run_dir = tmp_path / "run"
    run_as_the_command(scenario, run_dir, quiet=True, plots=False)
    requests = pd.read_parquet(run_dir / "requests.parquet")
    sessions = pd.read_parquet(run_dir / "sessions.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    windows = summary["run"]["phases"]
    assert [w["name"] for w in windows] == ["warmup", *RATES]
    starts = np.array([w["start"] for w in windows])
    assert np.allclose(starts, [0, 0.5, 3.0, 5.5])  # duration boundaries, no drain
    names = np.array([w["name"] for w in windows])

    def phase_of(t: pd.Series) -> np.ndarray:
        return names[np.searchsorted(starts, t.to_numpy(), side="right") - 1]

    # a session is in the phase its start falls in; a request in the phase of its ready time
    assert (sessions.phase.to_numpy() == phase_of(sessions.started_at)).all()
    assert (requests.phase.to_numpy() == phase_of(requests.ready_at)).all()
    later = requests[requests.node_id > 0]
    assert (later.phase != later.session_id.map(sessions.set_index("session_id").phase)).any()

    # each phase at its own rate, judged by its own arrival check; no gap at the boundaries
    for name, rate in RATES.items():
        section = summary["phases"][name]
        checks = json.loads((run_dir / "health.json").read_text())["checks"]
        (check,) = [c for c in checks if c["name"] == "dispatch_rate"]
        stats = check["statistics"][name]
        assert stats["configured_rate"] == rate
        assert stats["started_relative_error"] <= stats["allowed_relative_error"]
        assert section["health"]["checks"]["dispatch_rate"] == "PASS"
        assert section["requests"]["total"] == int((requests.phase == name).sum())
        assert section["latency"]["ttfc"]["count"] > 0
        assert section["slos"]["results"][0]["name"] == "ttfc"
        assert section["slos"]["all_met"] is True
        assert section["throughput"]["requests_per_s"] > 0
    order = sessions.sort_values("started_at")
    gaps = order.started_at.diff().to_numpy()[1:]
    crossing = phase_of(order.started_at)[1:] != phase_of(order.started_at)[:-1]
    assert crossing.sum() == 3
    # the gap across each boundary: below 8 mean gaps of the slower side (chance ~ e^-8)
    slower = np.array([1 / 10, 1 / 10, 1 / 20])
    assert (gaps[crossing] < 8 * slower).all()
    # the headline leaves the warmup out
    assert summary["requests"]["total"] == int((requests.phase != "warmup").sum())
    assert summary["health"]["checks"]["dispatch_rate"] == "PASS"

    # the plots of a multi-phase run mark its boundaries, on latency over time too
    from veeksha.evaluate.run import evaluate_run
    from veeksha.evaluate.source import requests_source, sessions_source

    evaluation = evaluate_run(
        run_dir, scenario, requests_source(run_dir), sessions_source(run_dir), summary["run"]
    )
    assert run_dir / "plots" / "latency_over_time.png" in evaluation.files
