"""A run stops for its failures: against the built-in simulator failing requests on purpose
(its ``faults``), ``runtime.max_error_rate`` stops an open-loop run once more than its share of
the last ``error_rate_window`` requests failed, and ``runtime.max_errors`` once that many did.
The run keeps every row it has, says why in run.log and on stderr, and ends as aborted (exit 3,
``stop_reason: errors``); a run whose failures stay under the limits runs to its end (and its
``timeslices`` hold every one of its requests)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.engine.outcome import exit_code_for
from veeksha.scenario.loader import load_scenario_text

SCENARIO = """
seed: 3
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.005}}
session_generator:
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 400, benchmark_timeout: 60, num_workers: 1, RUNTIME}
simulator: {faults: {http_500_rate: RATE}}
evaluators: [{type: performance, timeslice_seconds: 0.5}]
"""


def _run(tmp_path: Path, runtime: str, rate: float) -> tuple[int, pd.DataFrame, dict, str]:
    text = SCENARIO.replace("RUNTIME", runtime).replace("RATE", str(rate))
    scenario = load_scenario_text(text, "s.yaml")
    run_dir = tmp_path / "run"
    outcome = run_as_the_command(scenario, run_dir, quiet=True, plots=False)
    rows = pd.read_parquet(run_dir / "requests.parquet")
    summary = json.loads((run_dir / "summary.json").read_text())
    return int(exit_code_for(outcome, scenario)), rows, summary, (run_dir / "run.log").read_text()


def test_a_run_stops_once_its_failure_share_passes_the_limit(tmp_path: Path) -> None:
    code, rows, summary, log = _run(
        tmp_path, "max_error_rate: 0.3, error_rate_window: 40", rate=0.6
    )
    assert code == 3
    assert summary["run"]["stop_reason"] == "errors"
    assert summary["run"]["interrupted"] is True
    assert "of the last 40 requests failed (runtime.max_error_rate: 0.3)" in log
    sent = rows[rows.status != "cancelled"]
    assert 40 <= len(sent) < 250  # stopped early, every row it had kept
    assert (sent.status.isin(["ok", "error"])).all()
    # where it stopped, the last 40 that had ended held more than 12 failures
    ended = sent.sort_values("completed_at")
    assert (ended.status == "error").rolling(40).sum().max() > 12


def test_a_run_stops_at_its_nth_failure_and_not_before(tmp_path: Path) -> None:
    code, rows, summary, log = _run(tmp_path, "max_errors: 5", rate=1.0)
    assert code == 3
    assert summary["run"]["stop_reason"] == "errors"
    assert "5 requests failed (runtime.max_errors: 5)" in log
    failed = rows[rows.status == "error"]
    assert len(failed) >= 5  # (those in flight at the stop fail too)
    assert rows.status.isin(["error", "cancelled"]).all()
    # the stop: when the main process handled the fifth failure. Nothing became due after it
    # but what was handed over ahead (20 ms), and every arrival due before it has its row. (A
    # count of rows bounds nothing: on a loaded machine 223 were in flight when the fifth
    # failure's Result came back.)
    stop = failed.processed_at.sort_values().iloc[4]
    assert rows.ready_at.max() <= stop + 0.05
    assert len(rows) >= int(stop / 0.005)  # (an arrival every 5 ms from t0)


def test_failures_under_the_limits_do_not_stop_the_run(tmp_path: Path) -> None:
    runtime = "max_errors: 1000, max_error_rate: 0.9, error_rate_window: 50"
    code, rows, summary, _ = _run(tmp_path, runtime, rate=0.1)
    assert code == 0
    assert summary["run"]["stop_reason"] == "completed"
    assert len(rows) == 400
    assert 0 < (rows.status == "error").sum() < 100
    # (the same run's time slices: every request in one, the CSV as summary.json)
    slices = summary["timeslices"]["slices"]
    assert 3 <= len(slices) <= 10  # (2 s of arrivals, and what a loaded machine adds)
    assert sum(s["ok"] for s in slices) == (rows.status == "ok").sum()
    assert sum(s["failed"] for s in slices) == (rows.status == "error").sum()
    assert slices[0]["start"] == summary["throughput"]["window_start"]
    assert slices[-1]["end"] == summary["throughput"]["window_end"]
    table = pd.read_csv(tmp_path / "run" / "metrics" / "timeslices.csv")
    assert table.ok.tolist() == [s["ok"] for s in slices]
    assert table.ttfc_p99.tolist() == pytest.approx([s["ttfc_p99"] for s in slices])
