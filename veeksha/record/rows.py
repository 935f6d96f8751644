"""Rows of requests.parquet and sessions.parquet, and their per-request metrics. Pure functions.

A ``RequestRecord`` (the node, its main-process timestamps, the worker's ``Result`` or none for
a request cancelled before it was sent) becomes a row dict with ``request_row``: the readable
definition of every column. A run does not build these dicts: the recorder appends the same
values straight into column buffers (``veeksha.record.columnar``, tested to give identical
tables). The per-chunk columns, ``chunk_times``, ``tbc`` and ``chunks_coalesced``, are computed in
bulk when a batch becomes a table (``requests_table``), from the raw ``chunk_times_ns`` a row
carries.

Metric definitions (SCENARIO_REFERENCE.md; seconds; ``sent_at`` = the worker wrote the request):

    ttfc   = first_chunk_at - sent_at
    e2e    = completed_at - sent_at
    tbc    = gaps between consecutive content chunks (a list per request)
    chunks_coalesced = chunks stamped with the same time as the chunk before them (a worker
             stamps every chunk of one socket read with that read's time, so these are the
             chunks that shared a read with an earlier one; each has a tbc gap of 0)
    tpot   = (e2e - ttfc) / (output_tokens - 1)        null for fewer than 2 tokens, or for an
             answer that came in one content chunk (non-streaming): no time between tokens seen
    normalized_e2e    = e2e / output_tokens           null for 0 tokens
    output_throughput = output_tokens / e2e           tokens/s
    generator_delay   = sent_at - ready_at;   dispatch_lag = dispatched_at - ready_at
    connect_time      = the new connection's set-up before sent_at; null: reused, or none
    answer_ttfc       = first answer chunk - sent_at, after a reasoning model's thinking

Latency metrics (ttfc, tbc, tbc_mean, tpot, e2e, normalized_e2e, output_throughput) are defined
for ``status == "ok"`` only; failed rows keep their raw timestamps. A non-streaming answer has
first_chunk_at = completed_at, hence ttfc = e2e, and one chunk, hence no tbc and no tpot (null,
not 0: the time between its tokens was never seen, and a TPOT SLO must not pass on it).

Worked example: sent at 1.0 s, chunks at 1.2, 1.3, 1.5 s, completed at 1.5 s, 3 output tokens:
ttfc 0.2, e2e 0.5, tbc [0.1, 0.2], tbc_mean 0.15, tpot (0.5 - 0.2) / 2 = 0.15,
normalized_e2e 0.5 / 3, output_throughput 6 tokens/s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from veeksha.dispatch.messages import Result
from veeksha.generate.spec import NodeSpec
from veeksha.record.columnar import (
    MAX_ERROR_MESSAGE_CHARS,
    RequestColumns,
    SessionColumns,
    image_values,
    reasoning_values,
    requests_from_rows,
    sessions_from_rows,
)
from veeksha.record.columns import REQUESTS_SCHEMA, SERVER_TIMING_COLUMNS
from veeksha.record.numbers import join_notes, output_tokens, server_timings

__all__ = [
    "MAX_ERROR_MESSAGE_CHARS",
    "RequestRecord",
    "SessionRecord",
    "request_columns",
    "request_row",
    "requests_table",
    "session_row",
    "session_status",
    "sessions_table",
    "warm_up",
]

_NS = 1e9
# Columns request_row leaves to requests_table (computed in bulk from ``chunk_times_ns``).
_LIST_COLUMNS = ("chunk_times", "tbc", "chunks_coalesced")
# What ``request_columns`` takes from each row: the scalar columns and the raw chunk times.
_ROW_KEYS = (*(f.name for f in REQUESTS_SCHEMA if f.name not in _LIST_COLUMNS), "chunk_times_ns")


@dataclass(slots=True)
class RequestRecord:
    """What the engine knows about one request when it is done (answered, failed or cancelled).

    Timestamps are CLOCK_MONOTONIC integer nanoseconds (None: not reached). ``result`` is None
    for a request cancelled before a worker sent it. Token counts are veeksha's own (its
    tokenizer): ``prompt_tokens_total`` and ``output_tokens_counted`` are the fallbacks used when
    the server reports no usage.
    """

    run_id: str
    phase: str
    session_id: int
    request_id: int
    node: NodeSpec
    model: str | None  # (None: a tool row, no request)
    ready_at_ns: int | None = None
    dispatched_at_ns: int | None = None
    processed_at_ns: int | None = None
    result: Result | None = None
    prompt_tokens_new: int | None = None
    prompt_tokens_total: int | None = None
    output_tokens_counted: int | None = None
    cancel_reason: str = "cancelled before it was sent"
    client: str | None = "default"
    queue_wait_ns: int = 0  # ready → its client's slot (rows of dispatched requests)
    attempt: int = 0
    valid: bool | None = None
    # the instant its trace row's own time allowed it (turn_timing: timestamps); None: none
    not_before_ns: int | None = None
    keep_text: bool = False  # output_text: the answer's text (trace_recorder.include_content)


@dataclass(slots=True)
class SessionRecord:
    """One finished (or abandoned) session; ``status`` None derives it from the counts."""

    run_id: str
    phase: str
    session_id: int
    started_at_ns: int | None
    ended_at_ns: int | None
    num_nodes: int
    num_requests: int
    num_ok: int
    num_error: int
    num_cancelled: int
    think_time_total_s: float
    status: str | None = None


def _add_server_timings(row: dict[str, Any], timings: dict[str, Any], e2e_s: float) -> str:
    values, notes = server_timings(timings, e2e_s)
    for column, value in zip(SERVER_TIMING_COLUMNS, values, strict=True):
        if value is not None:
            row[column] = value
    return notes


def request_row(
    rec: RequestRecord, t0_ns: int, count_tokens: Callable[[str], int | None] | None = None
) -> dict[str, Any]:
    """The requests.parquet row of ``rec`` (plus raw ``chunk_times_ns`` for the writer).

    ``count_tokens`` counts the output text when neither the server's usage nor
    ``rec.output_tokens_counted`` gives the output length (so it only runs when needed), or
    when the server's figure is implausible (``veeksha.record.numbers``).
    """
    node = rec.node
    res = rec.result
    ready = rec.ready_at_ns
    dispatched = rec.dispatched_at_ns
    processed = rec.processed_at_ns
    row: dict[str, Any] = {
        "run_id": rec.run_id,
        "shard": None,  # (a shard run sets it for the whole batch: ResultWriter)
        "phase": rec.phase,
        "session_id": rec.session_id,
        "node_id": node.node_id,
        "request_id": rec.request_id,
        "parents": node.parents,
        "history_parent": node.history_parent,
        "model": rec.model,
        "client": rec.client,
        "kind": node.kind,
        "agent": node.agent,
        "round": None if node.round < 0 else node.round,
        "attempt": rec.attempt,
        "valid": rec.valid,
        "queue_wait": None if res is None else (rec.queue_wait_ns or 0) / _NS,
        "wait_after_ready": node.wait_after_ready_s,
        "not_before": None if rec.not_before_ns is None else (rec.not_before_ns - t0_ns) / _NS,
        "ready_at": None if ready is None else (ready - t0_ns) / _NS,
        "dispatched_at": None if dispatched is None else (dispatched - t0_ns) / _NS,
        "processed_at": None if processed is None else (processed - t0_ns) / _NS,
        "dispatch_lag": None if ready is None or dispatched is None else (dispatched - ready) / _NS,
        "target_prompt_tokens": node.prompt_tokens,
        "shared_prefix_tokens": node.shared_prefix_tokens,
        "prompt_tokens_new": rec.prompt_tokens_new,
        "requested_output_tokens": node.max_tokens,
        "images": len(node.images) or None,
        "image_pixels": image_values(node)[1] or None,
        "abandon_after": node.abandon_after_s,
    }
    if res is None:
        row["status"] = "cancelled"
        row["error_kind"] = "cancelled"
        row["error_message"] = rec.cancel_reason
        row["retries"] = 0
        row["prompt_tokens_total"] = rec.prompt_tokens_total
        row["chunk_times_ns"] = None
        return row

    sent = res.sent_at_ns
    completed = res.completed_at_ns
    first = res.first_chunk_at_ns
    chunks = res.chunk_times_ns
    status = res.status
    server_out = res.completion_tokens
    out, row["usage_reported"], note = output_tokens(
        server_out,
        len(chunks),
        node.max_tokens,
        res.output_text,
        rec.output_tokens_counted,
        count_tokens,
        res.reasoning_chunks,
    )
    row["server_output_tokens"] = server_out
    notes = join_notes(res.server_numbers_rejected, note)
    prompt_total = res.prompt_tokens
    row["worker_id"] = res.worker_id if res.worker_id >= 0 else None  # (-1: a tool node)
    row["received_at"] = (res.received_at_ns - t0_ns) / _NS
    row["sent_at"] = (sent - t0_ns) / _NS
    row["first_chunk_at"] = None if first is None else (first - t0_ns) / _NS
    row["completed_at"] = (completed - t0_ns) / _NS
    last_byte = res.last_byte_at_ns
    row["last_byte_at"] = (last_byte - t0_ns) / _NS if last_byte else None
    row["chunk_times_ns"] = chunks
    row["prompt_tokens_total"] = rec.prompt_tokens_total if prompt_total is None else prompt_total
    row["cached_tokens"] = res.cached_tokens
    row["output_tokens"] = out
    row["generator_delay"] = None if ready is None else (sent - ready) / _NS
    row["status"] = status
    row["http_status"] = res.http_status or None
    row["error_kind"] = res.error_kind
    message = res.error_message
    row["error_message"] = (
        message if len(message) <= MAX_ERROR_MESSAGE_CHARS else message[:MAX_ERROR_MESSAGE_CHARS]
    )
    row["retries"] = res.retries
    row["output_text"] = res.output_text if rec.keep_text else None
    row["chunk_stamps_clamped"] = res.chunk_stamps_clamped
    row["connect_time"] = res.connect_ns / _NS if res.connect_ns else None
    row["reasoning_tokens"], row["reasoning_chunks"], row["answer_ttfc"] = reasoning_values(res)
    if res.server_timings:
        note = _add_server_timings(row, res.server_timings, (completed - sent) / _NS)
        notes = join_notes(notes, note)
    row["server_numbers_rejected"] = notes
    if status != "ok":
        return row

    e2e = (completed - sent) / _NS
    row["e2e"] = e2e
    if first is not None:
        row["ttfc"] = (first - sent) / _NS
        if out is not None and out >= 2 and len(chunks) >= 2:  # one chunk: no spacing seen
            row["tpot"] = (completed - first) / _NS / (out - 1)
    if len(chunks) >= 2:
        row["tbc_mean"] = (chunks[-1] - chunks[0]) / _NS / (len(chunks) - 1)
    if out:
        row["normalized_e2e"] = e2e / out
    if out is not None and e2e > 0:
        row["output_throughput"] = out / e2e
    return row


def request_columns(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """``request_row`` dicts transposed into one list per column (pure Python, for tests and
    tools; the run records column-wise from the start, ``veeksha.record.columnar``)."""
    return {name: [row.get(name) for row in rows] for name in _ROW_KEYS}


def requests_table(rows: Sequence[dict[str, Any]], t0_ns: int) -> pa.Table:
    """A batch of ``request_row`` dicts as a table typed by REQUESTS_SCHEMA.

    Computes the per-chunk columns in bulk: ``chunk_times`` and ``chunks_coalesced`` (every row
    that reached a worker) and ``tbc`` (ok rows that reached a worker) from each row's
    ``chunk_times_ns``.
    """
    return requests_from_rows(rows, t0_ns)


def warm_up() -> None:
    """Convert an empty batch of each table once, ahead of a run (loads the conversion code).

    The conversion never calls ``pa.array`` on Python values, so pyarrow does not import pandas.
    """
    RequestColumns().to_table(0)
    SessionColumns().to_table()


def session_status(num_nodes: int, num_ok: int, num_error: int, num_cancelled: int) -> str:
    """ok (every node ok) | error (any failure) | cancelled (stopped, no failure) | incomplete."""
    if num_error:
        return "error"
    if num_cancelled:
        return "cancelled"
    if num_ok >= num_nodes:
        return "ok"
    return "incomplete"


def session_row(rec: SessionRecord, t0_ns: int) -> dict[str, Any]:
    """The sessions.parquet row of ``rec``."""
    started, ended = rec.started_at_ns, rec.ended_at_ns
    status = rec.status or session_status(
        rec.num_nodes, rec.num_ok, rec.num_error, rec.num_cancelled
    )
    return {
        "run_id": rec.run_id,
        "shard": None,  # (a shard run sets it for the whole batch: ResultWriter)
        "phase": rec.phase,
        "session_id": rec.session_id,
        "started_at": None if started is None else (started - t0_ns) / _NS,
        "ended_at": None if ended is None else (ended - t0_ns) / _NS,
        "duration": None if started is None or ended is None else (ended - started) / _NS,
        "num_nodes": rec.num_nodes,
        "num_requests": rec.num_requests,
        "num_ok": rec.num_ok,
        "num_error": rec.num_error,
        "num_cancelled": rec.num_cancelled,
        "think_time_total": rec.think_time_total_s,
        "status": status,
    }


def sessions_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """A batch of ``session_row`` dicts as a table typed by SESSIONS_SCHEMA."""
    return sessions_from_rows(rows)
