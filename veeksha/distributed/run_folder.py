"""What a distributed run's driver writes into the run folder once the shards have ended: the
merged, evaluated results (``merge.merge_shards``), ``shards.json`` (where each shard ran, its
clock offsets, its pulls, how it ended), a run.log made of every shard's own, and the report a
single-host run prints."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veeksha.record.reader import pending_work

if TYPE_CHECKING:
    from veeksha.distributed.driver import ShardState
    from veeksha.distributed.results import ShardResult

__all__ = ["SHARDS_DIR", "SHARDS_FILE", "merge_and_evaluate", "shard_result"]

SHARDS_DIR = "shards"
SHARDS_FILE = "shards.json"


def merge_and_evaluate(
    scenario: Any,
    run_dir: Path,
    shards: Sequence[ShardState],
    t0_wall_ns: int,
    interrupted: bool,
    setup_s: float,
    *,
    quiet: bool,
    plots: bool,
    cache_reset: dict[str, Any] | None = None,
    driver_lines: Sequence[str] = (),
) -> int:
    """Merge the copies into ``run_dir`` (evaluated there), print the report, the exit code.
    ``cache_reset``: what the driver's ``prefix_cache_reset`` did (summary.json's run);
    ``driver_lines``: the driver's own run.log lines, written before the shards'."""
    from veeksha.distributed.merge import merge_shards

    results = [shard_result(shard) for shard in shards]
    _write_shards_file(run_dir, shards, t0_wall_ns, setup_s)
    ray_info = {
        "backend": "ray",
        "setup_s": round(setup_s, 3),
        "nodes": [shard.node_id for shard in shards],
    }
    report = merge_shards(
        results,
        run_dir,
        driver_t0_wall_ns=t0_wall_ns,
        scenario=scenario,
        plots=plots,
        extra_run_info={"ray": ray_info}
        if cache_reset is None
        else {"ray": ray_info, "prefix_cache_reset": cache_reset},
    )
    _write_run_log(run_dir, shards, driver_lines)
    lost = [shard for shard in shards if shard.lost is not None]
    if not lost:  # a lost shard's copy stays beside the merged files, for inspection
        shutil.rmtree(run_dir / SHARDS_DIR, ignore_errors=True)
    if not quiet:
        _render(run_dir)
    if interrupted or report.interrupted:
        reasons = [f"shard {s.index} lost ({s.lost})" for s in lost]
        reasons += [
            str(shard.copy.outcome["error"])
            for shard in shards
            if shard.lost is None and shard.copy.outcome and shard.copy.outcome.get("error")
        ]  # (a lost shard's reason says it)
        why = "; ".join(reasons) or "the run was interrupted"
        sys.stderr.write(f"error: {why}\nresults collected so far: {run_dir}\n")
    if interrupted:  # (Ctrl-C reached the driver after every shard had ended)
        from veeksha.evaluate.exit_codes import ExitCode

        return int(ExitCode.RUN_ABORTED)
    return int(report.exit_code)


def _write_run_log(
    run_dir: Path, shards: Sequence[ShardState], driver_lines: Sequence[str] = ()
) -> None:
    """run.log: the driver's lines prefixed with ``[driver]``, then each shard's own run.log,
    its lines prefixed with ``[shard k]``, in order."""
    with (run_dir / "run.log").open("a", encoding="utf-8") as out:
        for line in driver_lines:
            out.write(f"[driver] {line}\n")
        for shard in shards:
            log = shard.copy.folder / "run.log"
            if shard.lost is not None:
                out.write(f"[shard {shard.index}] lost: {shard.lost}\n")
            if log.exists():
                for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                    out.write(f"[shard {shard.index}] {line}\n")


def _render(run_dir: Path) -> None:
    """The end-of-run report a single-host run prints, from the merged folder's files."""
    from rich.console import Console

    from veeksha.evaluate.report import render_summary

    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    health = json.loads((run_dir / "health.json").read_text(encoding="utf-8"))
    render_summary(Console(stderr=True), summary, health)


def _write_shards_file(
    run_dir: Path, shards: Sequence[ShardState], t0_wall_ns: int, setup_s: float
) -> None:
    """``shards.json``: where each shard ran, its clock offsets, how it ended."""

    def offset(estimate: Any) -> Any:
        return None if estimate is None else estimate.to_dict()

    document = {
        "backend": "ray",
        "t0_wall_ns": t0_wall_ns,
        "setup_s": round(setup_s, 3),
        "shards": [
            {
                "index": shard.index,
                "node_id": shard.node_id,
                "lost": shard.lost,
                "pulls": shard.copy.pulls,
                "chunks": shard.copy.chunks,
                "last_snapshot": shard.copy.snapshot is not None,
                "offset_before": offset(shard.offset_before),
                "offset_after": offset(shard.offset_after),
                "outcome": shard.copy.outcome,
            }
            for shard in shards
        ],
    }
    (run_dir / SHARDS_FILE).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def shard_result(shard: ShardState) -> ShardResult:
    """What the merge takes of one shard: its copy, offsets and, when it was lost, its account.

    A lost shard's account is its engine's last snapshot (in flight, sessions started, t0), up
    to a snapshot interval older than the pulled trace, plus the pulled trace lines without a
    row that the snapshot does not name (dispatched after it was taken, or answered with a row
    that never came back): every request it dispatched gets a row. Without a snapshot, its
    trace lines without a row. A finished shard's folder holds it all.
    """
    from veeksha.distributed.merge import ShardResult

    known: dict[str, Any] = {
        "offset_before": shard.offset_before,
        "offset_after": shard.offset_after,
        "lost": shard.lost,
        "lost_at_wall_ns": shard.lost_at_wall_ns,
    }
    if shard.lost is None:  # its rows say it all: its trace is not read (a line per request)
        return ShardResult(spec=shard.spec, folder=shard.copy.folder, **known)
    import numpy as np

    traced, traced_sessions = pending_work(shard.copy.folder)
    if shard.copy.snapshot is None:
        return ShardResult(
            spec=shard.spec,
            folder=shard.copy.folder,
            in_flight=traced,
            started_sessions=traced_sessions,
            **known,
        )
    result = ShardResult.from_snapshot(shard.spec, shard.copy.folder, shard.copy.snapshot, **known)
    named = {_request_key(entry) for entry in result.in_flight}
    result.in_flight += [e for e in traced if _request_key(e) not in named]
    if result.started_sessions is not None:
        result.started_sessions = np.union1d(result.started_sessions, traced_sessions)
    return result


def _request_key(entry: dict[str, Any]) -> tuple[int, int, int]:
    """A request of a shard's account: (session, node, attempt)."""
    return int(entry["session_id"]), int(entry["node_id"]), int(entry.get("attempt") or 0)
