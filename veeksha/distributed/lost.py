"""A lost shard's accounting: rows for its in-flight requests, its sessions not run."""

from __future__ import annotations

from typing import Any

from veeksha.distributed.results import ShardResult
from veeksha.scenario.models import Scenario

__all__ = ["SHARD_LOST", "lost_request_rows", "planned_sessions"]

#: error_kind of the rows of requests in flight on a shard that was lost.
SHARD_LOST = "shard_lost"


def lost_request_rows(
    shard: ShardResult, run_id: str, known: set[tuple[int, int, int]], shift_s: float, at_s: float
) -> list[dict[str, Any]]:
    """One ``shard_lost`` error row per request ``shard`` reported in flight and whose row
    (``known``: (session, node, attempt) of its rows) never came; its times moved by
    ``shift_s``, completed and processed at ``at_s`` (when the driver saw it lost)."""
    rows = []
    for entry in shard.in_flight:
        session_id, node_id = int(entry["session_id"]), int(entry["node_id"])
        attempt = int(entry.get("attempt") or 0)
        if (session_id, node_id, attempt) in known:
            continue  # its row came back after all
        ready = entry.get("ready_at")
        dispatched = entry.get("dispatched_at")
        rows.append(
            {
                "run_id": run_id,
                "phase": entry.get("phase") or "measured",
                "session_id": session_id,
                "node_id": node_id,
                "request_id": entry.get("request_id"),
                "worker_id": entry.get("worker_id"),
                "model": entry.get("model"),
                "client": entry.get("client", "default"),
                "kind": "llm",
                "agent": entry.get("agent"),  # (an agent_rounds node's trace line names them)
                "round": entry.get("round"),
                "attempt": attempt,
                "ready_at": None if ready is None else float(ready) + shift_s,
                "dispatched_at": None if dispatched is None else float(dispatched) + shift_s,
                "completed_at": at_s,
                "processed_at": at_s,
                "status": "error",
                "error_kind": SHARD_LOST,
                "error_message": f"shard {shard.spec.index} was lost: {shard.lost}",
                "shard": shard.spec.index,
            }
        )
    return rows


def planned_sessions(scenario: Scenario, seen: set[int]) -> int:
    """How many global session indexes the experiment started (for ``sessions_not_run``): the
    scenario's count when nothing but the count bounds it, else one past the highest seen."""
    runtime = scenario.runtime
    highest = max(seen) + 1 if seen else 0
    bounded_by_time = (
        runtime.benchmark_timeout > 0
        or runtime.warmup_seconds > 0
        or bool(scenario.phases)
        or runtime.max_sessions < 0
    )
    if bounded_by_time:
        return highest
    return max(highest, runtime.max_sessions + runtime.warmup_sessions)
