"""The merge as it was before it streamed (main at 27d8ce3, verbatim below this docstring but for
this paragraph): every shard's tables in memory, concatenated, sorted, evaluated from memory. The
tests prove the streaming merge writes the same files as this one."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from veeksha import __version__
from veeksha.distributed.lost import (
    SHARD_LOST,
    lost_request_rows,
    lost_times,
    planned_sessions,
)
from veeksha.distributed.merge import _server_metrics_info
from veeksha.distributed.results import MergeReport, ShardResult
from veeksha.distributed.timeline import (
    move_phases,
    move_table,
    shard_offset_ns,
    shard_shift_ns,
)
from veeksha.evaluate.exit_codes import run_exit_code
from veeksha.evaluate.outputs import SUMMARY_FILE
from veeksha.evaluate.run import evaluate_run
from veeksha.record.columnar import requests_from_rows, sessions_from_rows
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.parquet import REQUESTS_FILE, SESSIONS_FILE
from veeksha.record.reader import load_requests, load_sessions, read_metadata
from veeksha.record.run_folder import write_config
from veeksha.record.server_metrics import SERVER_METRICS_FILE
from veeksha.record.trace import TraceEntry, read_trace
from veeksha.scenario.loader import scenario_hash
from veeksha.scenario.models import Scenario
from veeksha.schedule.shards import owned_below, owns
from veeksha.timers import WakeUps

__all__ = ["SHARD_LOST", "MergeReport", "ShardResult", "merge_shards", "shard_shift_ns"]

_NS = 1_000_000_000
_TRACE_FILE = "trace.jsonl"
_COMPRESSION = "zstd"


def _summary_run(folder: Path | None) -> dict[str, Any]:
    if folder is None or not (folder / SUMMARY_FILE).exists():
        return {}
    try:
        run = json.loads((folder / SUMMARY_FILE).read_text(encoding="utf-8")).get("run")
    except (OSError, ValueError):
        return {}
    return dict(run) if isinstance(run, dict) else {}


def _has_results(folder: Path | None) -> bool:
    return folder is not None and ((folder / REQUESTS_FILE).exists() or (folder / "parts").is_dir())


def _shard_t0_wall_ns(shard: ShardResult, run: Mapping[str, Any]) -> int | None:
    if shard.t0_wall_ns is not None:
        return shard.t0_wall_ns
    if run.get("t0_wall_ns") is not None:
        return int(run["t0_wall_ns"])
    if _has_results(shard.folder):
        assert shard.folder is not None
        value = read_metadata(shard.folder).get("t0_wall_ns")
        if value:
            return int(value)
    return None


def _as_merged(table: pa.Table, schema: pa.Schema, index: int, run_id: str) -> pa.Table:
    """The merged run's ``run_id`` in every row, and the shard's index where ``shard`` is null
    (an older shard's folder)."""
    position = table.column_names.index("shard")
    filled = pc.fill_null(table.column(position), pa.scalar(index, pa.int32()))
    table = table.set_column(position, schema.field("shard"), filled)
    position = table.column_names.index("run_id")
    run_ids = pa.array([run_id] * table.num_rows, type=pa.string())
    return table.set_column(position, schema.field("run_id"), run_ids)


def _sorted(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``table`` ordered by ``keys`` (ascending, nulls last; stable)."""
    if table.num_rows == 0:
        return table
    columns = [
        pc.fill_null(pc.cast(table.column(key), pa.float64()), np.inf).to_numpy() for key in keys
    ]
    return table.take(pa.array(np.lexsort(columns[::-1])))


def merge_shards(
    shards: Sequence[ShardResult],
    run_dir: Path,
    *,
    driver_t0_wall_ns: int,
    scenario: Scenario,
    plots: bool = True,
    extra_run_info: Mapping[str, Any] | None = None,
) -> MergeReport:
    """Merge the shards' folders into ``run_dir`` and evaluate it (see the module docstring).

    ``driver_t0_wall_ns``: the experiment's t0 on the driver's wall clock; ``extra_run_info``:
    more keys for summary.json's ``run`` (e.g. the driver's set-up time).
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = run_dir.name
    requests_parts: list[pa.Table] = []
    sessions_parts: list[pa.Table] = []
    trace_entries: list[TraceEntry] = []
    lost_rows: list[dict[str, Any]] = []
    incomplete_rows: list[dict[str, Any]] = []
    per_shard: list[dict[str, Any]] = []
    lost: dict[int, str] = {}
    shifts: dict[int, float] = {}
    seen_sessions: set[int] = set()
    started_by: dict[int, set[int]] = {}
    runs: list[dict[str, Any]] = []
    run_shifts: list[float] = []
    interrupted = False
    now_wall = datetime.now(UTC)
    for shard in sorted(shards, key=lambda s: s.spec.index):
        index = shard.spec.index
        run = _summary_run(shard.folder)
        runs.append(run)
        t0_wall = _shard_t0_wall_ns(shard, run)
        offset = shard_offset_ns(shard)
        shift_ns = 0 if t0_wall is None else shard_shift_ns(t0_wall, offset, driver_t0_wall_ns)
        shift_s = shift_ns / _NS
        shifts[index] = shift_s
        run_shifts.append(shift_s)
        started: set[int] = set(
            () if shard.started_sessions is None else shard.started_sessions.tolist()
        )
        known: set[tuple[int, int, int]] = set()
        with_rows: set[int] = set()
        if _has_results(shard.folder):
            assert shard.folder is not None
            requests = _as_merged(load_requests(shard.folder), REQUESTS_SCHEMA, index, run_id)
            sessions = _as_merged(load_sessions(shard.folder), SESSIONS_SCHEMA, index, run_id)
            requests_parts.append(move_table(requests, REQUESTS_SCHEMA, shift_s))
            sessions_parts.append(move_table(sessions, SESSIONS_SCHEMA, shift_s))
            ids = requests.column("session_id").to_pylist()
            known = set(
                zip(
                    ids,
                    requests.column("node_id").to_pylist(),
                    [a or 0 for a in requests.column("attempt").to_pylist()],
                    strict=True,
                )
            )
            started.update(ids)
            with_rows = set(sessions.column("session_id").to_pylist())
            started.update(with_rows)
            trace_path = shard.folder / _TRACE_FILE
            if trace_path.exists():
                for entry in read_trace(trace_path):
                    entry.dispatched_at += shift_s
                    entry.shard = index
                    trace_entries.append(entry)
        if run.get("interrupted"):
            interrupted = True
        info: dict[str, Any] = {
            "index": index,
            "t0_wall_ns": t0_wall,
            "shift_s": shift_s,
            "offset_before": None if shard.offset_before is None else shard.offset_before.to_dict(),
            "offset_after": None if shard.offset_after is None else shard.offset_after.to_dict(),
            "lost": shard.lost,
            "stop_reason": run.get("stop_reason"),
        }
        if shard.lost is not None:
            interrupted = True
            lost[index] = shard.lost
            now_ns = int(now_wall.timestamp() * _NS)
            at_s, reported_s = lost_times(shard, driver_t0_wall_ns, now_ns, shift_s)
            rows = lost_request_rows(shard, run_id, known, shift_s, at_s)
            lost_rows += rows
            in_flight_sessions = {int(e["session_id"]) for e in shard.in_flight}
            started.update(in_flight_sessions)
            phases = {int(e["session_id"]): e.get("phase") or "measured" for e in shard.in_flight}
            for session_id in sorted(started - with_rows):
                incomplete_rows.append(
                    {
                        "run_id": run_id,
                        "phase": phases.get(session_id, "measured"),
                        "session_id": session_id,
                        "status": "incomplete",
                        "shard": index,
                    }
                )
            info["in_flight_rows"] = len(rows)
            info["lost_at_s"] = None if shard.lost_at_wall_ns is None else at_s
            info["last_report_s"] = reported_s
            info["incomplete_sessions"] = len(started - with_rows)
        per_shard.append(info)
        seen_sessions.update(started)
        started_by[index] = started
    planned = planned_sessions(scenario, seen_sessions)
    not_run: dict[int, int] = {}
    for shard in shards:
        if shard.lost is None:
            continue
        index = shard.spec.index
        began = sum(1 for i in started_by[index] if i < planned and owns(shard.spec, i))
        not_run[index] = len(owned_below(shard.spec, planned)) - began
    for info in per_shard:
        if info["index"] in not_run:
            info["sessions_not_run"] = not_run[info["index"]]

    requests_table = _concat(requests_parts, lost_rows, REQUESTS_SCHEMA, requests=True)
    requests_table = _sorted(requests_table, ["processed_at", "completed_at", "request_id"])
    sessions_table = _concat(sessions_parts, incomplete_rows, SESSIONS_SCHEMA, requests=False)
    sessions_table = _sorted(sessions_table, ["ended_at", "session_id"])
    trace_entries.sort(key=lambda e: (e.dispatched_at, e.request_id))

    write_config(run_dir, scenario)
    metrics_shard = _copy_server_metrics(shards, shifts, run_dir)
    if trace_entries:
        encoder = msgspec.json.Encoder()
        with (run_dir / _TRACE_FILE).open("wb") as out:
            for entry in trace_entries:
                out.write(encoder.encode(entry) + b"\n")

    distributed = {
        "shards": len(shards),
        "per_shard": per_shard,
        "lost_shards": {str(k): v for k, v in lost.items()},
        "sessions_not_run": sum(not_run.values()),
        "requests_lost_in_flight": len(lost_rows),
        "sessions_incomplete": len(incomplete_rows),
    }
    run_info = _run_info(run_id, runs, driver_t0_wall_ns, interrupted, lost, run_shifts)
    run_info["server_metrics"] = _server_metrics_info(shards, runs, metrics_shard)
    run_info["distributed"] = distributed
    run_info |= dict(extra_run_info or {})
    evaluation = evaluate_run(
        run_dir, scenario, requests_table, sessions_table, run_info, plots=plots
    )
    metadata = {
        "run_id": run_id,
        "scenario_hash": scenario_hash(scenario),
        "seed": str(scenario.seed),
        "veeksha_version": __version__,
        "t0_wall_time": datetime.fromtimestamp(driver_t0_wall_ns / _NS, UTC).isoformat(),
        "t0_wall_ns": str(driver_t0_wall_ns),
        "target": str(run_info.get("target") or ""),
        "shards": str(len(shards)),
        "finalized_at": datetime.now(UTC).isoformat(),
        "interrupted": str(interrupted).lower(),
        "stop_reason": str(run_info["stop_reason"]),
        "health_verdict": str(evaluation.verdict).lower(),
    }
    _write(requests_table, REQUESTS_SCHEMA, run_dir / REQUESTS_FILE, metadata)
    _write(sessions_table, SESSIONS_SCHEMA, run_dir / SESSIONS_FILE, metadata)
    code = run_exit_code(
        interrupted=interrupted,
        health_failed=str(evaluation.verdict) == "FAIL",
        strict=scenario.health_checks.strict,
        all_slos_met=evaluation.all_slos_met,
    )
    return MergeReport(
        run_dir=run_dir,
        requests=requests_table.num_rows,
        sessions=sessions_table.num_rows,
        lost_shards=lost,
        lost_rows=len(lost_rows),
        incomplete_sessions=len(incomplete_rows),
        sessions_not_run=sum(not_run.values()),
        interrupted=interrupted,
        verdict=str(evaluation.verdict),
        all_slos_met=evaluation.all_slos_met,
        exit_code=code,
        shifts_s=shifts,
    )


def _concat(
    tables: list[pa.Table], rows: list[dict[str, Any]], schema: pa.Schema, *, requests: bool
) -> pa.Table:
    if rows:
        extra = requests_from_rows(rows, 0) if requests else sessions_from_rows(rows)
        # (rows built here carry times already in seconds on the driver's timeline)
        extra = _with_shard_values(extra, schema, [row["shard"] for row in rows])
        tables = [*tables, extra]
    if not tables:
        return schema.empty_table()
    return pa.concat_tables([t.cast(schema) for t in tables])


def _with_shard_values(table: pa.Table, schema: pa.Schema, values: list[int]) -> pa.Table:
    position = table.column_names.index("shard")
    column = pa.array(np.asarray(values, dtype=np.int32), type=pa.int32())
    return table.set_column(position, schema.field("shard"), column)


def _run_info(
    run_id: str,
    runs: list[dict[str, Any]],
    driver_t0_wall_ns: int,
    interrupted: bool,
    lost: Mapping[int, str],
    shifts: Sequence[float],
) -> dict[str, Any]:
    """summary.json's ``run`` of the merged run: the shards' facts combined (``runs`` and
    ``shifts``: each shard's summary ``run`` and shift, in the same order)."""
    finished = [run for run in runs if run]
    windows = [
        (run["measured_window"], shifts[i])
        for i, run in enumerate(runs)
        if run and isinstance(run.get("measured_window"), list)
    ]
    starts = [w[0] + s for w, s in windows if w[0] is not None]
    ends = [w[1] + s for w, s in windows if w[1] is not None]

    def total(key: str) -> float | None:
        values = [run[key] for run in finished if isinstance(run.get(key), int | float)]
        return sum(values) if values else None

    reasons = sorted({str(run.get("stop_reason")) for run in finished if run.get("stop_reason")})
    return {
        "run_id": run_id,
        "t0_wall_time": datetime.fromtimestamp(driver_t0_wall_ns / _NS, UTC).isoformat(),
        "t0_wall_ns": driver_t0_wall_ns,
        "measured_window": [min(starts) if starts else None, max(ends) if ends else None],
        "interrupted": interrupted,
        "stop_reason": "shard_lost" if lost else ",".join(reasons) or "completed",
        "main_cpu_s": total("main_cpu_s"),
        "worker_cpu_s": total("worker_cpu_s"),
        "main_cpu_wait_s": total("main_cpu_wait_s"),
        "worker_cpu_wait_s": total("worker_cpu_wait_s"),
        "num_workers": total("num_workers"),
        # (newer than this copy of the merge: summed as the merge sums them)
        "release_wake_ups": WakeUps.summed(run.get("release_wake_ups") for run in finished),
        "deferred_results": total("deferred_results"),
        "chunk_stamps_clamped": total("chunk_stamps_clamped"),
        "target": next((run.get("target") for run in finished if run.get("target")), None),
        "phases": move_phases(runs, shifts),
    }


def _copy_server_metrics(
    shards: Sequence[ShardResult], shifts: Mapping[int, float], run_dir: Path
) -> int | None:
    """The server's metrics as the first shard that finished scraped them (every shard scrapes
    the same server: one view is the server's), on the driver's timeline."""
    for shard in sorted(shards, key=lambda s: s.spec.index):
        source = None if shard.folder is None else shard.folder / SERVER_METRICS_FILE
        if shard.lost is not None or source is None or not source.exists():
            continue
        with pq.ParquetFile(source) as file:
            table = file.read()
        metadata = {
            k.decode(): v.decode()
            for k, v in (table.schema.metadata or {}).items()
            if not k.startswith(b"ARROW:")
        }
        metadata["server_metrics_shard"] = str(shard.spec.index)
        position = table.column_names.index("t")
        moved = pc.add(table.column(position), shifts[shard.spec.index])
        table = table.set_column(position, table.schema.field("t"), moved)
        _write(table, table.schema, run_dir / SERVER_METRICS_FILE, metadata)
        return shard.spec.index
    return None


def _write(table: pa.Table, schema: pa.Schema, path: Path, metadata: dict[str, str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(
        table.cast(schema).replace_schema_metadata(metadata), tmp, compression=_COMPRESSION
    )
    tmp.replace(path)
