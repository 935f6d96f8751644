"""Hand-built requests/sessions tables for the evaluation tests (times in seconds since t0).

``request`` derives the per-request metric columns exactly as the recorder defines them
(veeksha.record.rows), so the tests state timestamps and know the answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import pyarrow as pa

from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.scenario.models import Scenario


def request(
    session_id: int = 0,
    node_id: int = 0,
    *,
    parents: Sequence[int] = (),
    ready: float | None = 0.0,
    dispatched: float | None = None,
    sent: float | None = None,
    chunks: Sequence[float] = (0.2, 0.3, 0.5),
    completed: float | None = None,
    status: str = "ok",
    output_tokens: int | None = None,
    requested: int | None = None,
    prompt_new: int | None = 20,
    target_prompt: int | None = 20,
    prompt_total: int | None = 20,
    wait: float = 0.0,
    phase: str = "measured",
    error_kind: str = "",
    usage: bool = True,
    request_id: int | None = None,
    worker_id: int | None = 0,
    unsent: bool = False,
) -> dict[str, Any]:
    """One requests.parquet row; defaults: dispatched/sent at ready, done at the last chunk.

    ``unsent``: never dispatched (a cancelled request): no dispatch, send or completion time.
    """
    dispatched = ready if dispatched is None else dispatched
    sent = dispatched if sent is None else sent
    if unsent:
        dispatched = sent = None
    if completed is None and sent is not None:
        completed = chunks[-1] if chunks else sent
    tokens = len(chunks) if output_tokens is None else output_tokens
    row: dict[str, Any] = {
        "run_id": "run",
        "phase": phase,
        "session_id": session_id,
        "node_id": node_id,
        "request_id": request_id if request_id is not None else session_id * 1000 + node_id,
        "parents": list(parents),
        "history_parent": parents[0] if parents else None,
        "worker_id": worker_id,
        "wait_after_ready": wait,
        "ready_at": ready,
        "dispatched_at": dispatched,
        "received_at": sent,
        "sent_at": sent,
        "first_chunk_at": chunks[0] if chunks and sent is not None else None,
        "completed_at": completed,
        "processed_at": completed,
        "chunk_times": list(chunks) if sent is not None else None,
        "chunks_coalesced": sum(a == b for a, b in pairwise(chunks)) if sent is not None else None,
        "target_prompt_tokens": target_prompt,
        "prompt_tokens_new": prompt_new,
        "prompt_tokens_total": prompt_total,
        "requested_output_tokens": tokens if requested is None else requested,
        "output_tokens": tokens if sent is not None else None,
        "usage_reported": usage,
        "status": status,
        "error_kind": error_kind,
        "generator_delay": None if sent is None or ready is None else sent - ready,
        "dispatch_lag": None if dispatched is None or ready is None else dispatched - ready,
    }
    if status == "ok" and sent is not None and completed is not None:
        e2e = completed - sent
        row["e2e"] = e2e
        row["tbc"] = [b - a for a, b in pairwise(chunks)]
        if chunks:
            row["ttfc"] = chunks[0] - sent
            if tokens >= 2:
                row["tpot"] = (completed - chunks[0]) / (tokens - 1)
        if len(chunks) >= 2:
            row["tbc_mean"] = (chunks[-1] - chunks[0]) / (len(chunks) - 1)
        if tokens:
            row["normalized_e2e"] = e2e / tokens
        if e2e > 0:
            row["output_throughput"] = tokens / e2e
    return row


def session(
    session_id: int, started: float, ended: float | None, status: str = "ok", **kw: Any
) -> dict[str, Any]:
    """One sessions.parquet row."""
    row: dict[str, Any] = {
        "run_id": "run",
        "phase": "measured",
        "session_id": session_id,
        "started_at": started,
        "ended_at": ended,
        "duration": None if ended is None else ended - started,
        "num_nodes": 1,
        "num_requests": 1,
        "num_ok": 1 if status == "ok" else 0,
        "num_error": 1 if status == "error" else 0,
        "num_cancelled": 1 if status == "cancelled" else 0,
        "think_time_total": 0.0,
        "status": status,
    }
    return row | kw


def requests_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=REQUESTS_SCHEMA)


def sessions_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=SESSIONS_SCHEMA)


def scenario(**data: Any) -> Scenario:
    """A scenario from plain data (a rate of 10/s poisson unless told otherwise)."""
    base: dict[str, Any] = {
        "traffic_scheduler": {
            "type": "rate",
            "interval_generator": {"type": "poisson", "arrival_rate": 10},
        }
    }
    return Scenario.model_validate(base | data)
