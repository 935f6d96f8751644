"""The streaming merge writes what the in-memory merge wrote (``reference_merge``), file by file,
on shard folders written with the record writers: ties across and within shards, shifted
clocks, an empty shard, a lost shard (parts only, requests in flight, some of whose rows came
after all), files out of their merge order, and batches smaller than a shard."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.unit.distributed import reference_merge
from tests.unit.distributed.merge_outputs import assert_same_merge
from veeksha.distributed import merged_file, shard_rows
from veeksha.distributed.clock import OffsetEstimate
from veeksha.distributed.merge import merge_shards
from veeksha.distributed.results import ShardResult
from veeksha.record.columnar import requests_from_rows, sessions_from_rows
from veeksha.record.columns import REQUESTS_SCHEMA
from veeksha.record.trace import TraceEntry
from veeksha.scenario.loader import load_scenario_text
from veeksha.scenario.models import Scenario
from veeksha.schedule.shards import ShardSpec

S = 1_000_000_000
T0 = 1_800_000_000 * S
SHARDS = 3
SESSIONS = 45

SCENARIO = """
seed: 5
traffic_scheduler: {type: rate, interval_generator: {type: poisson, arrival_rate: 40}}
session_generator:
  type: synthetic
  session_graph: {type: linear, num_request_generator: {type: fixed, value: 2}}
  channels: [{type: text, body_length_generator: {type: uniform, min: 5, max: 30}}]
  output_spec: {text: {output_length_generator: {type: uniform, min: 3, max: 8}}}
client: {api_base: "http://127.0.0.1:9/v1", model: m}
runtime: {max_sessions: 45, num_workers: 1}
evaluators:
  - {type: performance, slos: [{name: t, metric: ttfc, percentile: 0.9, value: 0.5}]}
"""


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return load_scenario_text(SCENARIO, "test.yaml")


def _rows(index: int, rng: np.random.Generator) -> tuple[list[dict[str, Any]], list[dict]]:
    """A shard's request and session rows, times on a 5 ms grid (many ties), requests in the
    order they were handled, sessions in the order they were handled (not by their end)."""
    requests, sessions = [], []
    for session_id in range(index, SESSIONS, SHARDS):
        start = round(float(rng.uniform(0, 0.5)) / 0.005) * 0.005
        t = start
        for node in range(2):
            ready = t
            sent = ready + 0.005 * int(rng.integers(0, 2))
            first = sent + 0.005 * int(rng.integers(1, 5))
            done = first + 0.005 * int(rng.integers(0, 4))
            chunks = [int(first * S), int(done * S)]
            requests.append(
                {
                    "run_id": f"shard-{index}",
                    "phase": "measured",
                    "session_id": session_id,
                    "node_id": node,
                    "request_id": session_id * 2 + node,
                    "client": "default",
                    "model": "m",
                    "kind": "llm",
                    "attempt": 0,
                    "status": "ok",
                    "ready_at": ready,
                    "dispatched_at": ready,
                    "sent_at": sent,
                    "first_chunk_at": first,
                    "completed_at": done,
                    "processed_at": done + 0.005 * int(rng.integers(0, 2)),
                    "ttfc": first - sent,
                    "e2e": done - sent,
                    "prompt_tokens": 10,
                    "output_tokens": 2,
                    "chunk_times_ns": chunks,
                }
            )
            t = done
        sessions.append(
            {
                "run_id": f"shard-{index}",
                "phase": "measured",
                "session_id": session_id,
                "status": "ok",
                "started_at": start,
                "ended_at": t,
                "duration": t - start,
                "num_requests": 2,
                "handled": requests[-1]["processed_at"],
            }
        )
    requests.sort(key=lambda r: (r["processed_at"], -r["request_id"]))  # (ties: ids reversed)
    sessions.sort(key=lambda s: s["handled"])
    return requests, sessions


def _write(table: pa.Table, path: Path, *, plain: bool = False) -> None:
    """``plain``: as another writer (pandas) writes it: no non-null flags, no field metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if plain:
        table = pa.Table.from_arrays(table.columns, names=table.column_names)
    pq.write_table(table.replace_schema_metadata({"t0_wall_ns": str(T0)}), path)


def _shard(
    root: Path,
    index: int,
    requests: list[dict[str, Any]],
    sessions: list[dict[str, Any]],
    *,
    parts: bool = False,
    shard_column: bool = True,
    trace_swapped: bool = False,
) -> Path:
    folder = root / f"shard-{index}"
    folder.mkdir(parents=True)
    request_table = requests_from_rows(requests, 0)
    if shard_column:  # (else null, as an older shard wrote it: the merge fills it in)
        position = request_table.column_names.index("shard")
        column = pa.array([index] * len(requests), pa.int32())
        request_table = request_table.set_column(position, REQUESTS_SCHEMA.field("shard"), column)
    session_table = sessions_from_rows(sessions)
    if parts:  # a lost shard: two parts of each, no final file
        half = len(requests) // 2
        _write(request_table.slice(0, half), folder / "parts/requests/part-000001.parquet")
        _write(request_table.slice(half), folder / "parts/requests/part-000002.parquet", plain=True)
        _write(session_table.slice(0, 2), folder / "parts/sessions/part-000001.parquet")
        _write(session_table.slice(2), folder / "parts/sessions/part-000002.parquet", plain=True)
    else:
        _write(request_table, folder / "requests.parquet")
        _write(session_table, folder / "sessions.parquet")
    encoder = msgspec.json.Encoder()
    with (folder / "trace.jsonl").open("wb") as trace:
        dispatched = sorted(requests, key=lambda r: r["dispatched_at"])
        if trace_swapped:  # (a trace out of dispatch order: merged again with its bounds)
            dispatched[1], dispatched[-2] = dispatched[-2], dispatched[1]
        for row in dispatched:
            entry = TraceEntry(
                "measured",
                row["session_id"],
                row["node_id"],
                row["request_id"],
                (),
                None,
                0.0,
                row["dispatched_at"],
            )
            trace.write(encoder.encode(entry) + b"\n")
        trace.write(b'{"phase": "meas')  # (a torn last line: skipped)
    t0 = T0 + index * 7 * S // 1000
    run = {
        "t0_wall_ns": t0,
        "measured_window": [0.0, 3.0],
        "interrupted": parts,
        "stop_reason": "max_sessions",
        "main_cpu_s": 0.5,
        "worker_cpu_s": 0.25,
        "num_workers": 1,
        "target": "http://127.0.0.1:9/v1 (m)",
    }
    (folder / "summary.json").write_text(json.dumps({"run": run}))
    return folder


def _shards(root: Path, *, unsorted: bool) -> list[ShardResult]:
    rng = np.random.default_rng(3)
    results = []
    for index in range(SHARDS):
        requests, sessions = _rows(index, rng)
        if index == 1:  # an empty shard: its files hold no row
            requests, sessions = [], []
        if unsorted and index == 0:  # rows out of the merge's order in a shard's file
            requests[3], requests[10] = requests[10], requests[3]
            requests.append(requests.pop(0))
        lost = index == 2
        in_flight: list[dict[str, Any]] = []
        if lost:  # its last rows never came; one in-flight request's row came after all; it
            # never started its sessions from 30 on
            requests = [r for r in requests if r["session_id"] < 30]
            sessions = [s for s in sessions if s["session_id"] < 30]
            gone = requests[-4:]
            requests = requests[:-4]
            sessions = [
                s for s in sessions if s["session_id"] not in {r["session_id"] for r in gone}
            ]
            in_flight = [
                {
                    "session_id": r["session_id"],
                    "node_id": r["node_id"],
                    "request_id": r["request_id"],
                    "ready_at": r["ready_at"],
                    "dispatched_at": r["dispatched_at"],
                    "client": "default",
                    "model": "m",
                }
                for r in [*gone, requests[-1]]
            ]
        folder = _shard(
            root,
            index,
            requests,
            sessions,
            parts=lost,
            shard_column=index != 0,
            trace_swapped=unsorted and index == 0,
        )
        t0 = T0 + index * 7 * S // 1000
        offset = OffsetEstimate(index * 7 * S // 1000 + 1_234_567, 40_000, 80_000, 8)
        results.append(
            ShardResult(
                ShardSpec(index, SHARDS),
                folder,
                offset_before=offset,
                lost="node died (test)" if lost else None,
                in_flight=in_flight,
                started_sessions=np.arange(index, 30, SHARDS) if lost else None,
                t0_wall_ns=t0,
                lost_at_wall_ns=T0 + 3 * S if lost else None,
            )
        )
    return results


@pytest.mark.parametrize(
    ("batch", "group", "unsorted"), [(16_384, 65_536, False), (4, 7, False), (3, 5, True)]
)
def test_the_streaming_merge_writes_what_the_in_memory_merge_wrote(
    scenario: Scenario,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    batch: int,
    group: int,
    unsorted: bool,
) -> None:
    caplog.set_level(logging.INFO, logger="veeksha.distributed.merged_rows")
    shards = _shards(tmp_path / "shards", unsorted=unsorted)
    expected = reference_merge.merge_shards(
        shards, tmp_path / "a" / "run", driver_t0_wall_ns=T0, scenario=scenario, plots=False
    )
    monkeypatch.setattr(shard_rows, "BATCH_ROWS", batch)
    monkeypatch.setattr(merged_file, "GROUP_ROWS", group)
    if batch < 100:  # a few trace lines a block, a line across two reads
        monkeypatch.setattr(shard_rows, "TRACE_BLOCK", 300)
    report = merge_shards(
        shards, tmp_path / "b" / "run", driver_t0_wall_ns=T0, scenario=scenario, plots=False
    )
    assert_same_merge(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert (report.requests, report.sessions) == (expected.requests, expected.sessions)
    assert report.lost_rows == expected.lost_rows == 4  # (the fifth's row came)
    assert report.incomplete_sessions == expected.incomplete_sessions > 0
    assert report.sessions_not_run == expected.sessions_not_run > 0
    assert (report.exit_code, report.verdict) == (expected.exit_code, expected.verdict)
    trace = (tmp_path / "b" / "run" / "trace.jsonl").read_bytes().splitlines()
    assert len(trace) == 2 * (SESSIONS - 15 - 5) - 4
    times = [msgspec.json.decode(line)["dispatched_at"] for line in trace]
    assert times == sorted(times)
    assert ("not in dispatch order" in caplog.text) == unsorted
    if group < 65_536:
        with pq.ParquetFile(tmp_path / "b" / "run" / "requests.parquet") as file:
            assert file.metadata.num_row_groups > 1


def test_no_shard_with_rows_writes_empty_tables(scenario: Scenario, tmp_path: Path) -> None:
    shards = [ShardResult(ShardSpec(i, 2), None, lost="never started") for i in range(2)]
    for name, merge in (("a", reference_merge.merge_shards), ("b", merge_shards)):
        merge(shards, tmp_path / name / "run", driver_t0_wall_ns=T0, scenario=scenario, plots=False)
    assert_same_merge(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert pq.read_table(tmp_path / "b" / "run" / "requests.parquet").num_rows == 0


def test_the_merged_files_say_why_the_run_stopped(scenario: Scenario, tmp_path: Path) -> None:
    # as a single host's files do (their metadata's stop_reason is summary.json's)
    shards = _shards(tmp_path / "shards", unsorted=False)
    merge_shards(shards, tmp_path / "run", driver_t0_wall_ns=T0, scenario=scenario, plots=False)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["run"]["stop_reason"] == "shard_lost"
    for name in ("requests.parquet", "sessions.parquet"):
        metadata = pq.read_schema(tmp_path / "run" / name).metadata
        assert metadata[b"stop_reason"] == b"shard_lost", name
        assert metadata[b"interrupted"] == b"true", name
