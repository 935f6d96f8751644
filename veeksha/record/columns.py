"""Output columns of a run: the single source of truth for requests.parquet and sessions.parquet.

Every column is a pyarrow field carrying two metadata entries, ``unit`` and ``description``; the
Parquet files keep them, and ``docs/output.md`` is generated from them (``render_markdown``;
regenerate with ``python -m veeksha.record.columns docs/output.md``).

Times are float seconds since the run's t0 (its CLOCK_MONOTONIC origin, whose wall-clock time is in
the file metadata); durations are float seconds. A null means "not reached" or "not defined" (e.g.
TPOT of a one-token answer), never zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa

__all__ = [
    "DOC_BEGIN",
    "DOC_END",
    "REQUESTS_SCHEMA",
    "SERVER_TIMING_COLUMNS",
    "SESSIONS_SCHEMA",
    "column_unit",
    "render_markdown",
    "update_doc",
]


def _col(
    name: str, type_: pa.DataType, unit: str, description: str, *, nullable: bool = True
) -> pa.Field:
    return pa.field(
        name, type_, nullable=nullable, metadata={"unit": unit, "description": description}
    )


_S = "s"
_T0 = "s since t0"
_TOK = "tokens"
_F64 = pa.float64()
_I32 = pa.int32()
_I64 = pa.int64()
_STR = pa.string()

# Server-side timings (from the response's ``timings`` object, e.g. the built-in simulator's):
# column name → keys accepted in that object, in seconds or with a ``_s``/``_ms``/``_ns`` suffix;
# without a ttft key, server_ttft = first_token_ns - arrival_ns (the simulator's instants).
SERVER_TIMING_COLUMNS: dict[str, tuple[str, ...]] = {
    "server_queue_time": ("queue_time", "queue_wait", "queue"),
    "server_prefill_time": ("prefill_time", "prefill"),
    "server_ttft": ("ttft", "time_to_first_token"),
    "server_decode_time": ("decode_time", "decode"),
}

_SHARD = _col(
    "shard",
    _I32,
    "",
    "index of the shard (host) that ran it in a distributed run (docs/distributed.md); null"
    " on a single-host run",
)

REQUESTS_SCHEMA = pa.schema(
    [
        _col("run_id", _STR, "", "identifier of the run (its folder name)", nullable=False),
        _col(
            "phase",
            _STR,
            "",
            "warmup | measured, or the name of a `phases:` phase: the phase in force at the"
            " request's ready_at (a cancelled, never-sent node: its session's); warmup rows"
            " are excluded from metrics",
            nullable=False,
        ),
        _col("session_id", _I64, "", "session this request belongs to", nullable=False),
        _col("node_id", _I32, "", "node of the session graph (topological index)", nullable=False),
        _col("request_id", _I64, "", "unique id of the request within the run", nullable=False),
        _col("parents", pa.list_(_I32), "", "node ids this request waited for (empty for roots)"),
        _col(
            "history_parent", _I32, "", "node whose conversation precedes this prompt; null: none"
        ),
        _col("worker_id", _I32, "", "worker process that sent it; null when never dispatched"),
        _col("model", _STR, "", "model name sent in the request; null for a tool row"),
        _col(
            "client",
            _STR,
            "",
            "name of the client (target) that sent it: clients[].name, or default; null for"
            " a tool row (no request went to any client)",
        ),
        _col(
            "kind",
            _STR,
            "",
            "llm (a request) | tool (no request: a tool call's latency; left out of metrics)",
        ),
        _col("agent", _STR, "", "the speaking agent (agent_rounds graphs); null otherwise"),
        _col("round", _I32, "", "the agent round (agent_rounds graphs); null otherwise"),
        _col(
            "attempt",
            _I32,
            "",
            "0: the node's first request; n: its n-th re-prompt (its answer failed validation)",
        ),
        _col(
            "valid",
            pa.bool_(),
            "",
            "the answer passed the node's validation; null: no validation, or no answer",
        ),
        _col("wait_after_ready", _F64, _S, "configured think time after the parents completed"),
        _col(
            "not_before",
            _F64,
            _T0,
            "its trace row's own timestamp mapped onto the run (`traffic_scheduler.turn_timing:"
            " timestamps`: its session's start + (row time − session's first row time) /"
            " speedup): it was not ready before it; null: no such time (any other run)",
        ),
        _col("ready_at", _F64, _T0, "dependencies and think time satisfied"),
        _col(
            "dispatched_at",
            _F64,
            _T0,
            "main process handed the request to a worker (handed over ahead of its ready time: "
            "the worker released it)",
        ),
        _col(
            "received_at",
            _F64,
            _T0,
            "worker received it from the main process (handed over ahead: its release)",
        ),
        _col("sent_at", _F64, _T0, "worker wrote the HTTP request"),
        _col(
            "first_chunk_at", _F64, _T0, "first content chunk arrived (non-streaming: completion)"
        ),
        _col(
            "completed_at",
            _F64,
            _T0,
            "the request ended: ok, its last byte; else when veeksha saw it end (timeout: the "
            "give-up; error: the reset, the end of the error body, ...; cancelled: its "
            "cancellation)",
        ),
        _col(
            "last_byte_at",
            _F64,
            _T0,
            "last read that carried response bytes (head or body); null: none came",
        ),
        _col("processed_at", _F64, _T0, "main process handled the result"),
        _col(
            "chunk_times",
            pa.list_(_F64),
            _T0,
            "arrival time of every content chunk: the time of the socket read that brought it "
            "(the chunks of one read share it): with `runtime.chunk_timestamps: kernel` the "
            "kernel's receipt of that read's last segment, with `read` when the worker read it "
            "(`run.chunk_timestamps` in summary.json)",
        ),
        _col(
            "chunks_coalesced",
            _I32,
            "",
            "content chunks that arrived in the same read as the chunk before them (their "
            "chunk_times are equal, their tbc gap 0); null when never sent to a worker",
        ),
        _col(
            "chunk_stamps_clamped",
            _I32,
            "",
            "reads of its response whose kernel time (`runtime.chunk_timestamps: kernel`) fell "
            "outside [sent_at, the read's own time] (the wall clock stepped) and was clamped "
            "into it: those reads' times were substituted, not observed (run.log warns; "
            "`run.chunk_stamps_clamped` sums them); 0 with `read` stamps; null when never sent "
            "to a worker",
        ),
        _col("target_prompt_tokens", _I32, _TOK, "requested length of the new prompt part"),
        _col(
            "images",
            _I32,
            "",
            "images in the new user message (the image channel), sent as data: URLs before its"
            " text; a conversation's later turns send them again in their history, not counted"
            " here; null when none",
        ),
        _col(
            "image_pixels",
            pa.int64(),
            "",
            "pixels (width × height) of those images, summed; null when none",
        ),
        _col(
            "shared_prefix_tokens",
            _I32,
            _TOK,
            "tokens of the new part taken from the shared prefix",
        ),
        _col(
            "prompt_tokens_new",
            _I32,
            _TOK,
            "actual new prompt part (veeksha's tokenizer; prompts from a vocabulary, builtin or "
            "a calibrated server's, count their target)",
        ),
        _col(
            "prompt_tokens_total",
            _I32,
            _TOK,
            "whole prompt, history included (server usage, else veeksha's count)",
        ),
        _col(
            "cached_tokens",
            _I32,
            _TOK,
            "prompt tokens served from the server's prefix cache (usage)",
        ),
        _col("requested_output_tokens", _I32, _TOK, "output length requested (max tokens)"),
        _col(
            "output_tokens",
            _I32,
            _TOK,
            "output received: the server's usage when plausible, else veeksha's count "
            "(docs/metrics.md, server numbers)",
        ),
        _col(
            "usage_reported",
            pa.bool_(),
            "",
            "output_tokens is the server's usage figure",
        ),
        _col(
            "server_output_tokens",
            _I32,
            _TOK,
            "usage.completion_tokens as the server reported it; null when absent or not a count "
            "in [0, 2^31)",
        ),
        _col(
            "reasoning_tokens",
            _I32,
            _TOK,
            "of output_tokens, a reasoning model's thinking: usage.completion_tokens_details."
            "reasoning_tokens as the server reported it; null when absent",
        ),
        _col(
            "ttfc",
            _F64,
            _S,
            "time to first chunk: first_chunk_at - sent_at (ok rows); a reasoning model's first "
            "chunk of thinking counts, as its first generated token (answer_ttfc: its answer's)",
        ),
        _col(
            "answer_ttfc",
            _F64,
            _S,
            "time to the first answer chunk after a reasoning model's thinking (delta.content "
            "after delta.reasoning_content or delta.reasoning, or after a <think>...</think> "
            "block the content opened with), from sent_at (ok rows); null when the response "
            "streamed no thinking, or no answer",
        ),
        _col("tbc", pa.list_(_F64), _S, "gaps between consecutive chunks (ok rows)"),
        _col("tbc_mean", _F64, _S, "mean of tbc; null with fewer than two chunks"),
        _col(
            "reasoning_chunks",
            _I32,
            "",
            "chunks of a reasoning model's thinking (delta.reasoning_content or delta.reasoning,"
            " or inside a <think>...</think> block the content opened with; among chunk_times"
            " and tbc, not in the answer's text); null when none",
        ),
        _col(
            "tpot",
            _F64,
            _S,
            "(e2e - ttfc) / (output_tokens - 1); null below two tokens or chunks (non-streaming)",
        ),
        _col("e2e", _F64, _S, "end to end latency: completed_at - sent_at (ok rows)"),
        _col("normalized_e2e", _F64, "s/token", "e2e / output_tokens; null for zero tokens"),
        _col("output_throughput", _F64, "tokens/s", "output_tokens / e2e of this request"),
        _col(
            "generator_delay",
            _F64,
            _S,
            "sent_at - ready_at: veeksha's own scheduling + IPC delay, and any wait for a slot "
            "(queue_wait) or a new connection (connect_time), which generator_saturation takes "
            "away",
        ),
        _col(
            "dispatch_lag",
            _F64,
            _S,
            "dispatched_at - ready_at: the dispatcher's lateness (main loop, or the worker's "
            "release timer), queue_wait included",
        ),
        _col(
            "queue_wait",
            _F64,
            _S,
            "ready_at to the moment its client's in-flight slot was free (client max_in_flight);"
            " 0 when it never waited for one, null when never dispatched",
        ),
        _col(
            "connect_time",
            _F64,
            _S,
            "set-up of the new connection the worker opened for it before writing it (no idle "
            "kept-alive one): name resolution, TCP connect and, on https, the TLS handshake; it "
            "lies before sent_at (in generator_delay, not in ttfc or e2e); null when it went out "
            "on a reused connection or was never sent (a later attempt's new connection, a "
            "re-send or a 429/503 retry, is inside its latencies, not here)",
        ),
        _col(
            "abandon_after",
            _F64,
            _S,
            "the delay after sent_at at which its user abandons it (the scenario's "
            "abandonment; status abandoned when its answer had not ended by then); null when "
            "its user waits for the answer",
        ),
        _col("status", _STR, "", "ok | error | timeout | cancelled | abandoned", nullable=False),
        _col(
            "http_status",
            _I32,
            "",
            "HTTP status code of the last attempt (after `retries`); null when it got no response",
        ),
        _col(
            "error_kind",
            _STR,
            "",
            "empty when ok; else e.g. http_5xx, timeout, client_limit, worker_lost, shard_lost,"
            " cancelled",
        ),
        _col(
            "error_message",
            _STR,
            "",
            "human-readable cause of the failure (from a worker: at most 320 characters, the API "
            "key masked as *** before the cut); empty when ok. A node cancelled before it was "
            "sent says why: `cancelled before it was sent: the run stopped (<stop_reason>)` "
            "(timeout, interrupted...: summary.json `run.stop_reason`) or `cancelled before it "
            "was sent: another request of its session failed (cancel_session_on_failure: true)` "
            "(docs/reliability.md); a request cut in flight by the stop (its grace ran out, a "
            "second Ctrl-C) says `cancelled in flight: the run stopped (<stop_reason>) before it "
            "ended`, what it received kept in its row",
        ),
        _col(
            "output_text",
            _STR,
            "",
            "the answer's text as it came (a reasoning model's thinking apart; a tool node: its "
            "result; a failed request: what came before the failure), with "
            "trace_recorder.include_content only; null without it, and for a request that was "
            "not sent",
        ),
        _col(
            "retries",
            _I32,
            "",
            "re-sends before this outcome: client.max_retries' (HTTP 429/503), and the one"
            " re-send of a request whose reused keep-alive connection closed before any"
            " response byte",
        ),
        _col("server_queue_time", _F64, _S, "server-reported time waiting for a batch slot"),
        _col("server_prefill_time", _F64, _S, "server-reported prefill duration"),
        _col("server_ttft", _F64, _S, "server-reported time to first token"),
        _col("server_decode_time", _F64, _S, "server-reported decode duration"),
        _col(
            "server_numbers_rejected",
            _STR,
            "",
            "the server's numbers veeksha did not take, as field=raw (why); ...; empty when it "
            "took them all",
        ),
        _SHARD,
    ]
)

SESSIONS_SCHEMA = pa.schema(
    [
        _col("run_id", _STR, "", "identifier of the run (its folder name)", nullable=False),
        _col(
            "phase",
            _STR,
            "",
            "warmup | measured, or a `phases:` phase's name (the phase the session started in)",
            nullable=False,
        ),
        _col("session_id", _I64, "", "session id (matches requests.session_id)", nullable=False),
        _col("started_at", _F64, _T0, "the session arrived (its roots became ready)"),
        _col(
            "ended_at",
            _F64,
            _T0,
            "its last request ended (completed_at; never sent: when it was cancelled); null: "
            "never ended",
        ),
        _col("duration", _F64, _S, "ended_at - started_at, think times included"),
        _col("num_nodes", _I32, "", "requests in the session graph"),
        _col(
            "num_requests",
            _I32,
            "",
            "requests dispatched to a worker (rows with dispatched_at), whatever their outcome",
        ),
        _col(
            "num_ok",
            _I32,
            "",
            "nodes whose request ended ok (a re-prompted node: its last attempt)",
        ),
        _col("num_error", _I32, "", "nodes whose request ended error or timeout"),
        _col(
            "num_cancelled",
            _I32,
            "",
            "nodes cancelled (never sent, or cancelled in flight by the run's end)",
        ),
        _col(
            "think_time_total",
            _F64,
            _S,
            "sum of wait_after_ready over its dispatched nodes (a re-prompt waits none)",
        ),
        _col("status", _STR, "", "ok | error | abandoned | cancelled | incomplete", nullable=False),
        _SHARD,
    ]
)


def column_unit(schema: pa.Schema, name: str) -> str:
    """The unit of column ``name`` ('' when unitless)."""
    meta = schema.field(name).metadata or {}
    return meta.get(b"unit", b"").decode()


DOC_BEGIN = "<!-- BEGIN GENERATED COLUMNS (python -m veeksha.record.columns docs/output.md) -->"
DOC_END = "<!-- END GENERATED COLUMNS -->"


def _type_name(type_: pa.DataType) -> str:
    if pa.types.is_list(type_):
        return f"list<{_type_name(type_.value_type)}>"
    return {"double": "float64", "bool": "boolean"}.get(str(type_), str(type_))


def _table(title: str, schema: pa.Schema) -> list[str]:
    lines = [
        f"### `{title}`",
        "",
        "| column | type | unit | null | description |",
        "|---|---|---|---|---|",
    ]
    for field in schema:
        meta = field.metadata or {}
        unit = meta.get(b"unit", b"").decode() or "-"
        desc = meta.get(b"description", b"").decode().replace("|", "\\|")
        null = "yes" if field.nullable else "no"
        lines.append(f"| `{field.name}` | `{_type_name(field.type)}` | {unit} | {null} | {desc} |")
    return lines


def render_markdown() -> str:
    """The generated column reference of docs/output.md, markers included."""
    lines = [DOC_BEGIN, ""]
    lines += _table("requests.parquet", REQUESTS_SCHEMA)
    lines.append("")
    lines += _table("sessions.parquet", SESSIONS_SCHEMA)
    lines += ["", DOC_END]
    return "\n".join(lines)


def update_doc(path: Path) -> bool:
    """Rewrite the generated block of ``path`` (between the markers); True if it changed."""
    text = path.read_text(encoding="utf-8")
    start, end = text.index(DOC_BEGIN), text.index(DOC_END) + len(DOC_END)
    new = text[:start] + render_markdown() + text[end:]
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    for arg in sys.argv[1:]:
        update_doc(Path(arg))
