"""Builders of records for the record tests (times in seconds, converted to ns)."""

from __future__ import annotations

from typing import Any

from veeksha.dispatch.messages import Result
from veeksha.generate.spec import NodeSpec
from veeksha.record.rows import RequestRecord

S = 1_000_000_000
T0 = 5 * S  # a non-zero t0, so that conversions are exercised


def ns(seconds: float) -> int:
    """Seconds since T0 → absolute monotonic ns."""
    return T0 + round(seconds * S)


def make_node(node_id: int = 1, **kw: Any) -> NodeSpec:
    fields: dict[str, Any] = {
        "node_id": node_id,
        "parents": (0,) if node_id else (),
        "history_parent": 0 if node_id else None,
        "wait_after_ready_s": 0.25,
        "prompt": "hello",
        "prompt_tokens": 20,
        "max_tokens": 3,
    }
    fields.update(kw)
    return NodeSpec(**fields)


def make_result(
    *,
    sent: float = 1.0,
    chunks: tuple[float, ...] = (1.2, 1.3, 1.5),
    completed: float = 1.5,
    status: str = "ok",
    tokens: int | None = 3,
    last_byte: float | str | None = "completed",
    **kw: Any,
) -> Result:
    """A Result; its last byte came at ``completed`` unless ``last_byte`` says (None: none)."""
    if last_byte == "completed":
        last_byte = completed
    assert not isinstance(last_byte, str)
    return Result(
        request_id=kw.pop("request_id", 7),
        worker_id=kw.pop("worker_id", 2),
        status=status,
        received_at_ns=ns(sent - 0.05),
        sent_at_ns=ns(sent),
        completed_at_ns=ns(completed),
        first_chunk_at_ns=ns(chunks[0]) if chunks else None,
        chunk_times_ns=[ns(c) for c in chunks],
        completion_tokens=tokens,
        last_byte_at_ns=0 if last_byte is None else ns(last_byte),
        **kw,
    )


def make_record(result: Result | None, request_id: int = 7, **kw: Any) -> RequestRecord:
    fields: dict[str, Any] = {
        "run_id": "run-1",
        "phase": "measured",
        "session_id": 3,
        "request_id": request_id,
        "node": make_node(),
        "model": "m",
        "ready_at_ns": ns(0.5),
        "dispatched_at_ns": ns(0.8),
        "processed_at_ns": ns(2.0),
        "result": result,
        "prompt_tokens_new": 20,
        "prompt_tokens_total": 60,
    }
    fields.update(kw)
    return RequestRecord(**fields)


def make_metadata() -> dict[str, str]:
    return {"run_id": "run-1", "scenario_hash": "abc123", "seed": "42", "t0_monotonic_ns": str(T0)}
