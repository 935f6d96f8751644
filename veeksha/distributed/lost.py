"""A lost shard's accounting: rows for its in-flight requests, its sessions not run."""

from __future__ import annotations

from typing import Any

from veeksha.dispatch.messages import SHARD_LOST
from veeksha.distributed.results import ShardResult
from veeksha.scenario.models import Scenario

__all__ = ["SHARD_LOST", "lost_request_rows", "lost_times", "planned_sessions"]

_NS = 1_000_000_000


def lost_times(
    shard: ShardResult, driver_t0_wall_ns: int, now_wall_ns: int, shift_s: float
) -> tuple[float, float | None]:
    """When a lost shard was seen lost (``lost_at_wall_ns``, else ``now_wall_ns``) and when its
    engine last reported itself (its last snapshot, ``reported_at``; None when none came), in
    seconds since the driver's t0 (``shift_s``: the shard's shift onto that timeline). A
    frozen engine's actor goes on answering pulls: only the engine's own report says when it
    last ran."""
    lost_s = ((shard.lost_at_wall_ns or now_wall_ns) - driver_t0_wall_ns) / _NS
    reported = shard.reported_at
    return lost_s, None if reported is None else min(reported + shift_s, lost_s)


def lost_request_rows(
    shard: ShardResult, run_id: str, known: set[tuple[int, int, int]], shift_s: float, at_s: float
) -> list[dict[str, Any]]:
    """One ``shard_lost`` error row per request ``shard`` reported in flight and whose row
    (``known``: (session, node, attempt) of its rows) never came; its times moved by
    ``shift_s``. Completed and processed when it was last known in flight: the snapshot that
    named it (``seen_at``), else its dispatch (a trace line: nothing is known after it), never
    after ``at_s`` (when the driver saw the shard lost, used when neither is known). Not the
    loss itself, seen up to a pull interval later (30 s for a hung shard): that wait is no time
    of the request's, nor of the measured window it would end; and the SLOs judge
    ``completed_at − dispatched_at`` as the least it was in flight (``evaluate.slo``)."""
    rows = []
    for entry in shard.in_flight:
        session_id, node_id = int(entry["session_id"]), int(entry["node_id"])
        attempt = int(entry.get("attempt") or 0)
        if (session_id, node_id, attempt) in known:
            continue  # its row came back after all
        ready = entry.get("ready_at")
        dispatched = entry.get("dispatched_at")
        known_at = [entry.get(k) for k in ("seen_at", "dispatched_at", "ready_at")]
        last = max((float(t) for t in known_at if t is not None), default=None)
        ended = at_s if last is None else min(at_s, last + shift_s)
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
                "completed_at": ended,
                "processed_at": ended,
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
