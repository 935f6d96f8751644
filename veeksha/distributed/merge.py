"""The shards' run folders merged into one run folder, as one host would have written it.

Each shard wrote an ordinary run folder (``veeksha run`` with ``shard=``): times in seconds
since *its* t0, read on *its* monotonic clock. The merge moves every time onto the driver's
timeline and writes one folder: requests.parquet, sessions.parquet, trace.jsonl, config.yaml,
server_metrics.parquet (the first finished shard's scrapes: every shard scrapes the same
server), then the same evaluation a single-host run gets (summary.json, health, SLOs,
metrics/, plots/), so ``veeksha report`` works on it.

The arithmetic (ns unless said). A shard's t0 is ``T_k`` on its wall clock
(``run.t0_wall_ns``); its clock reads ``offset_k`` ahead of the driver's
(``veeksha.distributed.clock``), so its t0 is ``T_k − offset_k`` on the driver's wall clock.
A shard time ``t`` (seconds since its t0) is, on the driver's timeline (seconds since the
driver's t0 ``D``):

    t' = t + shift_k,    shift_k = ((T_k − offset_k) − D) / 1e9

``offset_k`` is the mean of the estimates before and after the run when both exist (the
offset at the run's middle if the clocks drift linearly), else the one there is, else 0. When
the driver asked every shard to start at ``D + offset_k`` on its own clock (the usual way),
``shift_k`` is 0 up to the estimate's change over the run. Within a shard nothing moves
relative to anything else: durations (ttfc, e2e, tbc...) are the shard's own.

Rows are ordered as a single-host run writes them (requests and trace by the time the main
process handled them; sessions by their end), ties by ids; each row keeps its shard's
``shard`` column. Session and request ids are global already (``veeksha.schedule.shards``).

A lost shard (``ShardResult.lost``): what its folder holds (its ``parts/``, maybe none) is
kept; each request it last reported in flight and that has no row gets one with
``status = error``, ``error_kind = shard_lost``; each session it started and that has no row
gets one with ``status = incomplete``; its own sessions that never started are counted in
summary.json → ``run.distributed.sessions_not_run``. The run is then interrupted (exit 3).

Memory: the merge streams; it never holds a shard's tables (``veeksha.distributed.kway``).
Before the merge it reads each shard's key and id columns (``shard_rows.scan_shard``): the
bounds of its files' keys, its highest session id and, for a lost shard, the session ids it has
rows for (numpy arrays, 8 bytes a session) and which of its in-flight requests have rows. Then
the shards' trace lines are k-way merged a block at a time, and their requests and sessions by
their keys alone, a batch at a time: a shard's rows are in the order it handled them, which its
times keep under one constant shift (its sessions, ordered by their end but written when
handled, are a few rows out of that order, which the bounds allow for; a trace out of dispatch
order is merged again with its bounds). Each row group of 65,536 merged rows is then gathered a
column at a time from the shards' row groups that hold its rows (``gather``) into a staging file
(``merged_file``), which the evaluation reads a column at a time (``ColumnSource``), as a
single-host run's; the files then get their footer with the verdict. The peak is one merged row
group plus one column of a row group per shard, whatever the run's length: 4 shards × 250,000
requests (16 chunk stamps each) peak at ~0.33 GB, ~0.1 GB of it the process' imports, in the
evaluation (as a single host's of the same rows), where the merge in memory took ~2.3 GB
(BENCHMARKS.md "Distributed merge: memory and time"); the files are the same. A shard file out
of its order costs the keys of the rows between a row and the earliest later row with a smaller
key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from veeksha.distributed.merged_file import MergedFile
from veeksha.distributed.merged_rows import ShardInput, merge_tables, merge_traces
from veeksha.distributed.results import MergeReport, ShardResult
from veeksha.distributed.shard_rows import (
    result_files,
    scan_shard,
)
from veeksha.distributed.timeline import move_phases, shard_offset_ns, shard_shift_ns
from veeksha.evaluate.exit_codes import run_exit_code
from veeksha.evaluate.outputs import SUMMARY_FILE
from veeksha.evaluate.run import evaluate_run
from veeksha.evaluate.source import ColumnSource, release_memory
from veeksha.record.columnar import requests_from_rows, sessions_from_rows
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.parquet import REQUESTS_FILE, SESSIONS_FILE
from veeksha.record.reader import read_metadata
from veeksha.record.run_folder import write_config
from veeksha.record.server_metrics import SERVER_METRICS_FILE
from veeksha.scenario.loader import scenario_hash
from veeksha.scenario.models import Scenario
from veeksha.schedule.shards import owned_below
from veeksha.timers import WakeUps

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["SHARD_LOST", "MergeReport", "ShardResult", "merge_shards", "shard_shift_ns"]

_log = logging.getLogger(__name__)
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
    inputs: list[ShardInput] = []
    lost_rows: list[dict[str, Any]] = []
    incomplete_rows: list[dict[str, Any]] = []
    per_shard: list[dict[str, Any]] = []
    lost: dict[int, str] = {}
    shifts: dict[int, float] = {}
    highest = -1  # the highest session index any shard started
    started_by: dict[int, NDArray[np.int64]] = {}
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
        started_parts = [
            np.zeros(0, np.int64) if shard.started_sessions is None else shard.started_sessions
        ]
        with_rows = np.zeros(0, dtype=np.int64)
        known: set[tuple[int, int, int]] = set()
        if _has_results(shard.folder):
            assert shard.folder is not None
            shard_input = ShardInput(
                index,
                shift_s,
                result_files(shard.folder, REQUESTS_FILE, "requests"),
                result_files(shard.folder, SESSIONS_FILE, "sessions"),
                shard.folder / _TRACE_FILE,
            )
            watched = _in_flight_keys(shard) if shard.lost is not None else None
            scan = scan_shard(shard_input.requests, shard_input.sessions, shift_s, watched)
            shard_input.scan = scan
            inputs.append(shard_input)
            known = scan.known
            with_rows = scan.session_rows
            started_parts += [scan.request_sessions, with_rows]
            if scan.highest >= 0:
                started_parts.append(np.asarray([scan.highest], dtype=np.int64))
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
            in_flight_sessions = [int(e["session_id"]) for e in shard.in_flight]
            started_parts.append(np.asarray(in_flight_sessions, dtype=np.int64))
            phases = {int(e["session_id"]): e.get("phase") or "measured" for e in shard.in_flight}
            started = np.unique(np.concatenate(started_parts))
            without_rows = np.setdiff1d(started, with_rows, assume_unique=True)
            for session_id in without_rows.tolist():
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
            info["incomplete_sessions"] = int(without_rows.size)
            started_by[index] = started
        per_shard.append(info)
        highest = max([highest, *(int(part.max()) for part in started_parts if part.size)])
    planned = planned_sessions(scenario, set() if highest < 0 else {highest})
    not_run: dict[int, int] = {}
    for shard in shards:
        if shard.lost is None:
            continue
        index = shard.spec.index
        began = started_by[index]
        began = began[(began < planned) & (began % shard.spec.count == shard.spec.index)]
        not_run[index] = len(owned_below(shard.spec, planned)) - int(began.size)
    for info in per_shard:
        if info["index"] in not_run:
            info["sessions_not_run"] = not_run[info["index"]]

    write_config(run_dir, scenario)
    metrics_shard = _copy_server_metrics(shards, shifts, run_dir)
    merge_traces(inputs, run_dir / _TRACE_FILE)
    release_memory()  # (the trace's entries: Python objects, freed in between)
    requests_file = MergedFile(run_dir / REQUESTS_FILE, REQUESTS_SCHEMA)
    sessions_file = MergedFile(run_dir / SESSIONS_FILE, SESSIONS_SCHEMA)
    try:
        lost_table = _rows_table(lost_rows, REQUESTS_SCHEMA, requests=True)
        merge_tables(inputs, run_id, lost_table, requests_file, sessions=False)
        incomplete_table = _rows_table(incomplete_rows, SESSIONS_SCHEMA, requests=False)
        merge_tables(inputs, run_id, incomplete_table, sessions_file, sessions=True)
        requests_file.close()
        sessions_file.close()
        release_memory()

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
        if scenario.labels:  # (the experiment's labels, as a single host's run has them)
            run_info["labels"] = dict(scenario.labels)
        prefixes = {run["request_id_prefix"] for run in runs if "request_id_prefix" in run}
        if prefixes:  # (every shard's: the run's name)
            run_info["request_id_prefix"] = min(prefixes)
        run_info |= dict(extra_run_info or {})
        # read a column at a time from the merged files: bounded memory at any run size
        evaluation = evaluate_run(
            run_dir,
            scenario,
            ColumnSource(REQUESTS_SCHEMA, files=[requests_file.staging]),
            ColumnSource(SESSIONS_SCHEMA, files=[sessions_file.staging]),
            run_info,
            plots=plots,
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
        requests_file.finalise(metadata)
        sessions_file.finalise(metadata)
    finally:
        requests_file.discard()
        sessions_file.discard()
    code = run_exit_code(
        interrupted=interrupted,
        health_failed=str(evaluation.verdict) == "FAIL",
        strict=scenario.health_checks.strict,
        all_slos_met=evaluation.all_slos_met,
    )
    return MergeReport(
        run_dir=run_dir,
        requests=requests_file.rows,
        sessions=sessions_file.rows,
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


def _in_flight_keys(shard: ShardResult) -> set[tuple[int, int, int]]:
    return {
        (int(e["session_id"]), int(e["node_id"]), int(e.get("attempt") or 0))
        for e in shard.in_flight
    }


def _rows_table(rows: list[dict[str, Any]], schema: pa.Schema, *, requests: bool) -> pa.Table:
    """The rows the merge makes (a lost shard's), typed; their times are on the driver's
    timeline already."""
    if not rows:
        return schema.empty_table()
    table = requests_from_rows(rows, 0) if requests else sessions_from_rows(rows)
    position = table.column_names.index("shard")
    column = pa.array(np.asarray([row["shard"] for row in rows], dtype=np.int32), type=pa.int32())
    return table.set_column(position, schema.field("shard"), column).cast(schema)


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
    the same server: one view is the server's), on the driver's timeline; that shard's index
    (None: no finished shard has them)."""
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


def _server_metrics_info(
    shards: Sequence[ShardResult], runs: Sequence[dict[str, Any]], copied: int | None
) -> dict[str, Any] | None:
    """summary.json's ``run.server_metrics`` of the merged run: the account of the scraper of
    the shard whose scrapes server_metrics.parquet holds (``copied``), else of the first shard
    that has one (a scraper that wrote nothing says why), else None; ``shard`` names it."""
    indexes = sorted(shard.spec.index for shard in shards)  # (``runs`` is in this order)
    by_index = dict(zip(indexes, runs, strict=True))
    order = ([] if copied is None else [copied]) + sorted(by_index)
    for index in order:
        info = (by_index[index] or {}).get("server_metrics")
        if isinstance(info, dict):
            return {**info, "shard": index}
    return None


def _write(table: pa.Table, schema: pa.Schema, path: Path, metadata: dict[str, str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(
        table.cast(schema).replace_schema_metadata(metadata), tmp, compression=_COMPRESSION
    )
    tmp.replace(path)
