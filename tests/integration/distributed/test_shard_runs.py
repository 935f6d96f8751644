"""One experiment as 3 shards (no Ray): the engine's ``shard=`` runs against one simulator,
merged by ``merge_shards``, against the same scenario run on one host."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from veeksha.cli import main
from veeksha.distributed.clock import OffsetEstimate
from veeksha.distributed.merge import SHARD_LOST, ShardResult, merge_shards
from veeksha.distributed.partition import ShardSpec
from veeksha.engine.run import run_scenario
from veeksha.evaluate.exit_codes import ExitCode
from veeksha.record.trace import read_trace
from veeksha.scenario.loader import load_scenario_text
from veeksha.scenario.models import Scenario
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess

SHARDS = 3
SCENARIO = """
seed: 11
traffic_scheduler:
  type: rate
  interval_generator: {{type: poisson, arrival_rate: 40}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: fixed, value: 2}}
    request_wait_generator: {{type: fixed, interval: 0.05}}
  channels:
    - type: text
      body_length_generator: {{type: uniform, min: 5, max: 30}}
  output_spec:
    text:
      output_length_generator: {{type: uniform, min: 3, max: 8}}
client: {{api_base: "{base}", model: veeksha-sim}}
runtime: {{max_sessions: 40, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{enabled: true}}
"""


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    with SimulatorProcess(SimulatorConfig(ttft_ms=2, itl_ms=1)) as sim:
        yield load_scenario_text(SCENARIO.format(base=sim.base_url), "test.yaml")


@pytest.fixture(scope="module")
def single(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("single") / "run"
    run_scenario(scenario, run_dir, quiet=True, plots=False)
    return run_dir


@pytest.fixture(scope="module")
def shards(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> list[ShardResult]:
    """The 3 shards, one after another, each starting at an agreed wall instant; each shard's
    clock is treated as set ``its t0 − the driver's t0`` ahead of the driver's, so that all
    three share the driver's timeline (the merge's arithmetic undoes the offset)."""
    root = tmp_path_factory.mktemp("shards")
    results = []
    for index in range(SHARDS):
        start = time.time_ns() + 200_000_000
        run_dir = root / f"shard-{index}"
        run_scenario(
            scenario,
            run_dir,
            quiet=True,
            plots=False,
            shard=ShardSpec(index, SHARDS),
            start_at_wall_ns=start,
        )
        results.append(ShardResult(ShardSpec(index, SHARDS), run_dir, t0_wall_ns=start))
    driver_t0 = results[0].t0_wall_ns
    assert driver_t0 is not None
    for result in results:
        assert result.t0_wall_ns is not None
        offset = OffsetEstimate(result.t0_wall_ns - driver_t0, 40_000, 80_000, 8)
        result.offset_before = result.offset_after = offset
    return results


def _roots(run_dir: Path) -> set[tuple[int, float]]:
    requests = pd.read_parquet(run_dir / "requests.parquet")
    roots = requests[requests.node_id == 0]
    return set(zip(roots.session_id, roots.ready_at.round(9), strict=True))


def test_each_shard_runs_its_own_sessions_at_their_single_host_times(
    shards: list[ShardResult], single: Path
) -> None:
    for result in shards:
        assert result.folder is not None
        sessions = pd.read_parquet(result.folder / "sessions.parquet")
        assert (sessions.session_id % SHARDS == result.spec.index).all()
        assert (sessions.shard == result.spec.index).all()
        summary = json.loads((result.folder / "summary.json").read_text())
        assert summary["run"]["shard"] == {"index": result.spec.index, "count": SHARDS}
        assert summary["run"]["t0_wall_ns"] == result.t0_wall_ns
    assert pd.read_parquet(single / "requests.parquet").shard.isna().all()


def test_merged_folder_is_the_single_host_experiment(
    shards: list[ShardResult], single: Path, scenario: Scenario, tmp_path: Path
) -> None:
    merged = tmp_path / "merged"
    driver_t0 = shards[0].t0_wall_ns
    assert driver_t0 is not None
    report = merge_shards(shards, merged, driver_t0_wall_ns=driver_t0, scenario=scenario)
    assert report.exit_code == ExitCode.OK
    assert report.verdict == "PASS"
    requests = pd.read_parquet(merged / "requests.parquet")
    sessions = pd.read_parquet(merged / "sessions.parquet")
    # every session exactly once, every request once, global and unique ids
    assert sorted(sessions.session_id) == list(range(40))
    assert len(requests) == 80
    assert requests.request_id.is_unique
    assert (requests.status == "ok").all()
    assert (requests.shard == requests.session_id % SHARDS).all()
    # the planned arrivals are the single-host ones, exactly
    assert _roots(merged) == _roots(single)
    # dependency order and think times hold on the merged timeline
    done = requests.set_index(["session_id", "node_id"])
    for row in requests[requests.node_id == 1].itertuples():
        parent = done.loc[(row.session_id, 0)]
        assert row.ready_at == pytest.approx(parent.completed_at + 0.05, abs=1e-6)
        assert row.sent_at >= parent.completed_at + 0.05 - 1e-6
    # rows in a single host's order: by the time the main process handled them
    assert requests.processed_at.is_monotonic_increasing
    trace = read_trace(merged / "trace.jsonl")
    assert len(trace) == 80
    assert {entry.shard for entry in trace} == set(range(SHARDS))
    summary = json.loads((merged / "summary.json").read_text())
    assert summary["health"]["checks"]["clock_sync"] == "PASS"
    assert summary["run"]["distributed"]["shards"] == SHARDS
    assert summary["run"]["distributed"]["sessions_not_run"] == 0
    result = CliRunner().invoke(main, ["report", str(merged), "--no-plots", "--quiet"])
    assert result.exit_code == 0, result.output
    assert json.loads((merged / "summary.json").read_text())["requests"]["total"] == 80


def test_a_lost_shard_gives_rows_not_run_counts_and_exit_3(
    shards: list[ShardResult], scenario: Scenario, tmp_path: Path
) -> None:
    lost = shards[1]
    assert lost.folder is not None
    # what came back of shard 1: only its first sessions' rows, as parts
    partial = tmp_path / "shard-1-partial"
    requests = pd.read_parquet(lost.folder / "requests.parquet")
    sessions = pd.read_parquet(lost.folder / "sessions.parquet")
    kept = sorted(sessions.session_id)[:4]
    (partial / "parts" / "requests").mkdir(parents=True)
    (partial / "parts" / "sessions").mkdir(parents=True)
    requests[requests.session_id.isin(kept)].to_parquet(
        partial / "parts" / "requests" / "part-000001.parquet", index=False
    )
    sessions[sessions.session_id.isin(kept)].to_parquet(
        partial / "parts" / "sessions" / "part-000001.parquet", index=False
    )
    # in flight when it was lost: the next session's second request (its first is a row)
    in_flight_session = sorted(sessions.session_id)[4]
    first = requests[(requests.session_id == in_flight_session) & (requests.node_id == 0)]
    first.to_parquet(partial / "parts" / "requests" / "part-000002.parquet", index=False)
    in_flight = [
        {
            "session_id": int(in_flight_session),
            "node_id": 1,
            "request_id": 10_000,
            "phase": "measured",
            "ready_at": 0.5,
            "dispatched_at": 0.5,
        }
    ]
    broken = ShardResult(
        lost.spec,
        partial,
        lost.offset_before,
        None,
        lost="the actor died (test)",
        in_flight=in_flight,
        t0_wall_ns=lost.t0_wall_ns,
    )
    merged = tmp_path / "merged"
    driver_t0 = shards[0].t0_wall_ns
    assert driver_t0 is not None
    report = merge_shards(
        [shards[0], broken, shards[2]],
        merged,
        driver_t0_wall_ns=driver_t0,
        scenario=scenario,
        plots=False,
    )
    assert report.exit_code == ExitCode.RUN_ABORTED
    assert report.lost_shards == {1: "the actor died (test)"}
    owned = [i for i in range(40) if i % SHARDS == 1]
    assert report.sessions_not_run == len(owned) - 5  # 4 with rows, 1 in flight
    out = pd.read_parquet(merged / "requests.parquet")
    lost_rows = out[out.error_kind == SHARD_LOST]
    assert len(lost_rows) == 1
    row = lost_rows.iloc[0]
    expected = (in_flight_session, 1, "error", 1)
    assert (row.session_id, row.node_id, row.status, row.shard) == expected
    sessions_out = pd.read_parquet(merged / "sessions.parquet")
    incomplete = sessions_out[sessions_out.status == "incomplete"]
    assert list(incomplete.session_id) == [in_flight_session]
    summary = json.loads((merged / "summary.json").read_text())
    distributed = summary["run"]["distributed"]
    assert distributed["lost_shards"] == {"1": "the actor died (test)"}
    assert distributed["sessions_not_run"] == report.sessions_not_run
    assert summary["run"]["interrupted"] is True
    shutil.rmtree(partial)
