"""``run_scenario(..., evaluate=False)`` (a distributed shard's way): the rows, trace.jsonl and
summary.json's ``run`` are written; no metrics, health checks, SLOs or plots."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from veeksha.engine.run import run_scenario
from veeksha.scenario.loader import load_scenario_text

_SCENARIO = """
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator: {type: synthetic, session_graph: {type: single_request}}
runtime: {max_sessions: 3, warmup_sessions: 1, num_workers: 1}
"""

_EVALUATION_FILES = {"health.json", "health.txt", "slo.json", "metrics", "plots"}


def test_a_run_without_evaluation_writes_its_rows_and_run_facts_only(tmp_path: Path) -> None:
    scenario = load_scenario_text(_SCENARIO, "s.yaml")
    # (the evaluated run draws no plots: none is read; the skipped one is asked for them, and
    # must still draw none)
    evaluated = run_scenario(
        scenario, tmp_path / "evaluated", quiet=True, dry_run=True, plots=False
    )
    skipped = run_scenario(scenario, tmp_path / "skipped", quiet=True, dry_run=True, evaluate=False)

    # the same run evaluated writes what the skipped one must not (the names are right)
    assert {"health.json", "slo.json", "metrics"} <= {p.name for p in evaluated.run_dir.iterdir()}
    assert evaluated.verdict is not None

    folder = skipped.run_dir
    assert not _EVALUATION_FILES & {p.name for p in folder.iterdir()}
    assert skipped.verdict is None
    assert skipped.all_slos_met is None
    assert (skipped.requests, skipped.sessions, skipped.stop_reason) == (4, 4, "completed")
    assert pq.read_table(folder / "requests.parquet").num_rows == 4
    assert pq.read_table(folder / "sessions.parquet").num_rows == 4
    assert len((folder / "trace.jsonl").read_text(encoding="utf-8").splitlines()) == 4

    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert summary["evaluation"] == "skipped"
    assert set(summary) == {"run", "evaluation"}
    run = summary["run"]
    # what merge_shards reads from a shard's summary.json
    reference = json.loads((evaluated.run_dir / "summary.json").read_text(encoding="utf-8"))["run"]
    assert set(run) == set(reference)
    assert run["t0_wall_ns"] > 0
    assert run["stop_reason"] == "completed"
    assert run["measured_window"][0] is not None
    assert run["measured_window"][1] is not None
    assert [window["name"] for window in run["phases"]] == ["warmup", "measured"]
