"""The server's profiler around a run (``server_profile``): against the built-in simulator,
which answers vLLM's ``POST /start_profile`` and ``/stop_profile`` and counts the generation
requests that came while its profiler ran, every request of the run is inside the profile
(started before the first, stopped after the last), summary.json and run.log say so; a server
without the endpoint is exit 2 before anything is sent; a dry run starts nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.errors import TargetError
from veeksha.scenario.loader import load_scenario_text

SCENARIO = """
seed: 2
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 2}
    request_wait_generator: {type: fixed, interval: 0.01}
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 20, benchmark_timeout: 60, num_workers: 1}
server_profile: {enabled: true, START}
"""


def _last(run_dir: Path, metric: str) -> float:
    metrics = pd.read_parquet(run_dir / "server_metrics.parquet")
    return float(metrics[metrics.metric == metric].sort_values("t").value.iloc[-1])


def test_every_request_of_the_run_is_inside_the_servers_profile(tmp_path: Path) -> None:
    scenario = load_scenario_text(SCENARIO.replace("START", ""), "s.yaml")
    run_dir = tmp_path / "run"
    outcome = run_as_the_command(scenario, run_dir, quiet=True, plots=False)
    assert not outcome.interrupted
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert len(rows) == 40
    assert (rows.status == "ok").all()
    # the watch's last scrape comes after the stop: the counters are final
    assert _last(run_dir, "veeksha_sim_profile_starts_total") == 1
    assert _last(run_dir, "veeksha_sim_profile_stops_total") == 1
    assert _last(run_dir, "veeksha_sim_profiler_active") == 0
    assert _last(run_dir, "veeksha_sim_profiled_requests_total") == 40
    summary = json.loads((run_dir / "summary.json").read_text())
    profile = summary["run"]["server_profile"]
    assert profile["started"] is True
    assert profile["servers"] == [scenario_root(run_dir)]
    assert "error" not in profile
    assert profile["stop_s"] >= 0
    assert "server profile: started on http://127.0.0.1:" in (run_dir / "run.log").read_text()


def scenario_root(run_dir: Path) -> str:
    target = json.loads(json.loads((run_dir / "summary.json").read_text())["run"]["target"])
    return str(target["api_base"]).removesuffix("/v1")


def test_a_server_without_the_endpoint_is_exit_2_before_anything_is_sent(tmp_path: Path) -> None:
    text = SCENARIO.replace("START", "start_path: /no_profiler")
    with pytest.raises(TargetError, match=r"POST http://127\.0\.0\.1:\d+/no_profiler: HTTP 404"):
        run_as_the_command(load_scenario_text(text, "s.yaml"), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / "requests.parquet").exists()


def test_a_dry_run_starts_no_profiler(tmp_path: Path) -> None:
    scenario = load_scenario_text(SCENARIO.replace("START", ""), "s.yaml")
    run_dir = tmp_path / "run"
    run_as_the_command(scenario, run_dir, quiet=True, plots=False, dry_run=True)
    assert (
        "server profile: not started (a dry run sends nothing)" in (run_dir / "run.log").read_text()
    )
    assert "server_profile" not in json.loads((run_dir / "summary.json").read_text())["run"]
