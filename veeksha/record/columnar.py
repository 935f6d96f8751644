"""Rows appended straight into column buffers, and those buffers as typed Arrow tables.

The event loop records one request (or session) per call into a ``RequestColumns`` (or
``SessionColumns``) batch: no dict per row, no transposition later. A row is three ``+=`` of a
tuple onto Python lists laid out row-major: floats (``_REQ_FLOATS``, NaN = null), ints
(``_REQ_INTS``, ``NULL`` = null, booleans as 0/1) and strings (``_REQ_STRS``), plus the two list
columns' values (``parents``, the raw ``chunk_times_ns``) appended flat. ``add_result`` does no
arithmetic: it stores the raw ns instants, and ``to_table`` derives the time and latency columns
from them with numpy (``_derive``). ``to_table`` runs in the writer thread: lists become numpy
matrices (a slice at a time, yielding the GIL in between), columns become Arrow arrays through
``pa.Array.from_buffers``, strings are dictionary-encoded with C-speed passes; no ``pa.array`` on
Python values (pyarrow imports pandas, ~0.3-0.5 CPU-s, on its first such call).

Measured on the shared 2-core machine: ``add_result`` ~3 us a row (a ``request_row`` dict: ~6
us), ``to_table`` a few us a row in the writer thread (the list-to-numpy conversion of ~50 values
dominates).

The values are exactly those of ``veeksha.record.rows.request_row``/``session_row`` (the readable
definition of every column; ``add_row`` takes such a dict), bit for bit: the same float
expressions, evaluated in the same order. The only encoding choice: a NaN in a float column is
stored as null (no column has a legitimate NaN: times, durations and ratios are finite).

Memory: the pending rows of one writer tick (up to ``flush_rows``) live as Python objects in the
lists, ~1-2 kB a row; the writer swaps the batch out every second.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from veeksha.dispatch.messages import Result
from veeksha.dispatch.numbers import raw_text
from veeksha.generate.spec import NodeSpec
from veeksha.record.columns import REQUESTS_SCHEMA, SERVER_TIMING_COLUMNS, SESSIONS_SCHEMA
from veeksha.record.numbers import (
    SLACK,
    TOLERANCE,
    join_notes,
    output_tokens,
    server_timings,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "NULL",
    "RequestColumns",
    "SessionColumns",
    "image_values",
    "reasoning_values",
    "server_timings",
]

NULL = -(2**63)  # null in an int64 slot
_NAN = float("nan")
_NS = 1e9
MAX_ERROR_MESSAGE_CHARS = 2000  # also rows.MAX_ERROR_MESSAGE_CHARS
_SLICE_ROWS = 8192  # rows converted per GIL-holding slice

# Row layouts. Every REQUESTS_SCHEMA column is in exactly one of them, except chunk_times, tbc and
# chunks_coalesced (computed from chunk_times_ns), chunk_stamps_clamped (0 but in the rows
# ``_clamped`` names), connect_time (null but in the rows ``_connects`` names: the few that
# opened a connection, so the common row pays one test for it) and reasoning_tokens,
# reasoning_chunks and answer_ttfc (null but in the rows ``_reasoning`` names: a reasoning
# model's answers, or a server that counts reasoning tokens), images and image_pixels (null but
# in the rows ``_images`` names: a request with images) and abandon_after (null but in the rows
# ``_abandons`` names: a request its user abandons) and output_text (null but in the rows
# ``_texts`` names: every answer's when ``keep_texts``); "parents" and "chunk_times_ns"
# hold the list lengths. add_result's tuple of ints is at 30 values, CPython's limit for a tuple
# display built on the stack (``STACK_USE_GUIDELINE``): from 31 on it is built through a list,
# ~0.4 us more a row.
_REQ_FLOATS = (
    "wait_after_ready",
    "not_before",  # (second: add_result gives it, as the first)
    "ready_at",
    "dispatched_at",
    "received_at",
    "sent_at",
    "first_chunk_at",
    "completed_at",
    "last_byte_at",
    "processed_at",
    "ttfc",
    "tbc_mean",
    "tpot",
    "e2e",
    "normalized_e2e",
    "output_throughput",
    "generator_delay",
    "dispatch_lag",
    *SERVER_TIMING_COLUMNS,
    "queue_wait",  # (last: add_result appends it after the server timings)
)
_RAW = ("ready", "dispatched", "processed", "received", "sent", "first", "completed", "last_byte")
_REQ_STRS = (
    "run_id",
    "phase",
    "model",
    "client",
    "kind",
    "agent",
    "status",
    "error_kind",
    "error_message",
    "server_numbers_rejected",
)
_REQ_INTS = (
    "session_id",
    "node_id",
    "request_id",
    "parents",
    "history_parent",
    "worker_id",
    "target_prompt_tokens",
    "shared_prefix_tokens",
    "prompt_tokens_new",
    "prompt_tokens_total",
    "cached_tokens",
    "requested_output_tokens",
    "output_tokens",
    "usage_reported",
    "server_output_tokens",
    "http_status",
    "retries",
    "chunk_times_ns",
    # add_result rows: the raw instants (ns) their float columns are derived from in bulk
    *_RAW,
    "derived",
    "round",  # (after derived: add_result appends these last)
    "attempt",
    "valid",
)
_SES_FLOATS = ("started_at", "ended_at", "duration", "think_time_total")
_SES_STRS = ("run_id", "phase", "status")
_SES_INTS = ("session_id", "num_nodes", "num_requests", "num_ok", "num_error", "num_cancelled")
_LOW = 1 - TOLERANCE  # of output_plausible (veeksha.record.numbers), inlined in add_result
_HIGH = 1 + TOLERANCE


def _strings(values: list[str | None]) -> pa.Array:
    """A string array of ``values`` (None: null) without ``pa.array`` or Arrow's compute
    functions (whose import the run would pay before t0): each distinct value encoded once
    (``dict.fromkeys``), the rows' bytes joined and their offsets summed in C-speed passes."""
    n = len(values)
    uniques = list(dict.fromkeys(values))
    encoded = [b"" if value is None else value.encode() for value in uniques]
    if len(uniques) == 1:  # the usual case: run_id, model, phase
        offsets = (np.arange(n + 1, dtype=np.int64) * len(encoded[0])).astype(np.int32)
        data = encoded[0] * n
        valid = np.full(n, uniques[0] is not None)
    else:
        index = {value: i for i, value in enumerate(uniques)}
        codes = np.fromiter(map(index.__getitem__, values), dtype=np.int64, count=n)
        lengths = np.array([len(b) for b in encoded], dtype=np.int64)[codes]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        data = b"".join(map(encoded.__getitem__, codes.tolist()))
        valid = np.fromiter((value is not None for value in uniques), bool, len(uniques))[codes]
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(offsets), pa.py_buffer(data), _validity(valid) if n else None
    )


def _sparse(values: dict[int, int | None], n: int, empty: int = 0) -> pa.Array:
    """An int32 column of ``n`` ``empty`` values (``NULL``: nulls) but for ``values`` (row →
    value; None: null)."""
    column = np.full(n, empty, dtype=np.int64)
    for row, value in values.items():
        column[row] = NULL if value is None else value
    return _ints(column, pa.int32())


def image_values(node: NodeSpec) -> tuple[int, int]:
    """A node's ``images`` and ``image_pixels`` (its own message's images)."""
    return len(node.images), sum(width * height for width, height, _ in node.images)


def reasoning_values(res: Result) -> tuple[int | None, int | None, float | None]:
    """A result's ``reasoning_tokens``, ``reasoning_chunks`` (null when it did not think) and
    ``answer_ttfc`` (its first answer chunk after the thinking, from ``sent_at``; an ok answer's
    only)."""
    chunks = res.reasoning_chunks or None
    answer = res.first_answer_at_ns
    ttfc = (answer - res.sent_at_ns) / _NS if answer and res.status == "ok" else None
    return res.reasoning_tokens, chunks, ttfc


def _sparse_floats(values: dict[int, float], n: int) -> pa.Array:
    """A float64 column of ``n`` nulls but for ``values`` (row → value)."""
    column = np.full(n, _NAN)
    for row, value in values.items():
        column[row] = value
    return _floats(column)


def _constant(value: int | None, n: int) -> pa.Array:
    """The ``shard`` column: ``value`` (int32) in every row, or nulls."""
    if value is None:
        return pa.nulls(n, pa.int32())
    return pa.array(np.full(n, value, dtype=np.int32), type=pa.int32())


def _matrix(
    values: Sequence[Any], width: int, dtype: type, pause: Callable[[], None] | None
) -> NDArray[Any]:
    """A row-major list of ``width`` slots per row as an (n, width) numpy array, converted a
    slice at a time with ``pause()`` in between (the conversion holds the GIL)."""
    n = len(values) // width
    out: NDArray[Any] = np.empty((n, width), dtype=dtype)
    flat = out.reshape(-1)
    step = _SLICE_ROWS * width
    for start in range(0, len(values), step):
        flat[start : start + step] = values[start : start + step]
        if pause is not None:
            pause()
    return out


def _validity(valid: NDArray[np.bool_]) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _floats(values: NDArray[np.float64]) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        pa.float64(), len(values), [_validity(~np.isnan(values)), pa.py_buffer(values)]
    )


def _ints(values: NDArray[np.int64], type_: pa.DataType) -> pa.Array:
    valid = values != NULL
    dtype = np.int64 if type_ == pa.int64() else np.int32
    data = np.where(valid, values, 0).astype(dtype)
    return pa.Array.from_buffers(type_, len(data), [_validity(valid), pa.py_buffer(data)])


def _bools(values: NDArray[np.int64]) -> pa.Array:
    bits = pa.py_buffer(np.packbits(values == 1, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(values), [_validity(values != NULL), bits])


def _list(
    lengths: NDArray[np.int64], values: pa.Array, valid: NDArray[np.bool_] | None = None
) -> pa.Array:
    """A list array of ``values`` cut by ``lengths`` (NULL length: a null list)."""
    if valid is None:
        valid = lengths != NULL
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(np.where(lengths != NULL, lengths, 0), out=offsets[1:])
    return pa.Array.from_buffers(
        pa.list_(values.type),
        len(lengths),
        [_validity(valid), pa.py_buffer(offsets)],
        children=[values],
    )


def _f(value: float | None) -> float:
    return _NAN if value is None else value


def _i(value: int | None) -> int:
    return NULL if value is None else int(value)


class RequestColumns:
    """A batch of requests.parquet rows, appended column-wise (see the module docstring).

    Not thread-safe: one thread appends; hand the whole batch to another thread (e.g. swap it
    for a fresh one under a lock) before ``to_table``.
    """

    __slots__ = (
        "_abandons",
        "_chunks",
        "_clamped",
        "_connects",
        "_floats",
        "_images",
        "_ints",
        "_parents",
        "_reasoning",
        "_strs",
        "_texts",
        "keep_texts",
        "rows",
        "shard",
    )

    def __init__(self, shard: int | None = None, keep_texts: bool = False) -> None:
        self.shard = shard  # every row's ``shard`` column (None: a single-host run)
        # output_text: each answer's text kept (trace_recorder.include_content), else null
        self.keep_texts = keep_texts
        self._texts: dict[int, str] = {}  # row → output_text where not null
        self._floats: list[float] = []  # _REQ_FLOATS per row, NaN = null
        self._ints: list[int] = []  # _REQ_INTS per row, NULL = null
        self._strs: list[str | None] = []  # _REQ_STRS per row
        self._parents: list[int] = []  # every row's parents, flat
        self._chunks: list[int] = []  # every row's chunk_times_ns, flat
        self._clamped: dict[int, int | None] = {}  # row → chunk_stamps_clamped where not 0
        self._connects: dict[int, float] = {}  # row → connect_time where not null
        self._abandons: dict[int, float] = {}  # row → abandon_after where not null
        # row → (reasoning_tokens, reasoning_chunks, answer_ttfc) where one is not null
        self._reasoning: dict[int, tuple[int | None, int | None, float | None]] = {}
        self._images: dict[int, tuple[int, int]] = {}  # row → (images, pixels) where some
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add_result(
        self,
        run_id: str,
        phase: str,
        session_id: int,
        request_id: int,
        node: NodeSpec,
        model: str | None,
        ready: int | None,
        dispatched: int | None,
        processed: int | None,
        res: Result,
        prompt_tokens_new: int | None,
        prompt_tokens_total: int | None,
        t0_ns: int,
        output_tokens_counted: int | None = None,
        count_tokens: Callable[[str], int | None] | None = None,
        client: str | None = "default",
        queue_wait_ns: int = 0,
        attempt: int = 0,
        valid: bool | None = None,
        not_before: int | None = None,
    ) -> None:
        """One answered or failed request: ``rows.request_row`` of the same ``RequestRecord``
        (``not_before``: its ``not_before_ns``)."""
        sent = res.sent_at_ns
        completed = res.completed_at_ns
        first = res.first_chunk_at_ns
        chunks = res.chunk_times_ns
        status = res.status
        server_out = out = res.completion_tokens
        notes = res.server_numbers_rejected
        n = len(chunks)
        requested = node.max_tokens
        if out is not None and (
            _LOW * n - SLACK <= out <= _HIGH * (requested if requested > n else n) + SLACK
        ):  # (output_plausible, inlined)
            usage = True
        else:
            out, usage, note = output_tokens(
                out,
                n,
                requested,
                res.output_text,
                output_tokens_counted,
                count_tokens,
                res.reasoning_chunks,
            )
            if note:
                notes = join_notes(notes, note)
        prompt_total = res.prompt_tokens
        if prompt_total is None:
            prompt_total = prompt_tokens_total
        message = res.error_message
        if len(message) > MAX_ERROR_MESSAGE_CHARS:
            message = message[:MAX_ERROR_MESSAGE_CHARS]
        timings = res.server_timings
        held = _NAN if not_before is None else (not_before - t0_ns) / _NS
        if timings:
            values, note = server_timings(timings, (completed - sent) / _NS)
            if note:
                notes = join_notes(notes, note)
            self._floats += (node.wait_after_ready_s, held, *_DERIVED_NAN, *map(_f, values))
        else:
            self._floats += (node.wait_after_ready_s, held, *_DERIVED_NAN, *_NO_SERVER_TIMINGS)
        self._floats.append(queue_wait_ns / _NS)
        parents = node.parents
        history = node.history_parent
        cached = res.cached_tokens
        self._ints += (
            session_id,
            node.node_id,
            request_id,
            len(parents),
            NULL if history is None else history,
            res.worker_id if res.worker_id >= 0 else NULL,
            node.prompt_tokens,
            node.shared_prefix_tokens,
            NULL if prompt_tokens_new is None else prompt_tokens_new,
            NULL if prompt_total is None else prompt_total,
            NULL if cached is None else cached,
            node.max_tokens,
            NULL if out is None else out,
            usage,
            NULL if server_out is None else server_out,
            res.http_status or NULL,
            res.retries,
            len(chunks),
            NULL if ready is None else ready,
            NULL if dispatched is None else dispatched,
            NULL if processed is None else processed,
            res.received_at_ns,
            sent,
            NULL if first is None else first,
            completed,
            res.last_byte_at_ns or NULL,
            1,
            NULL if node.round < 0 else node.round,
            attempt,
            NULL if valid is None else int(valid),
        )
        self._strs += (
            run_id,
            phase,
            model,
            client,
            node.kind,
            node.agent,
            status,
            res.error_kind,
            message,
            notes,
        )
        if parents:
            self._parents += parents
        self._chunks += chunks
        if res.chunk_stamps_clamped:  # (a wall-clock step: rare)
            self._clamped[self.rows] = res.chunk_stamps_clamped
        if res.connect_ns:  # (a new connection: the few requests no idle one was there for)
            self._connects[self.rows] = res.connect_ns / _NS
        if res.reasoning_chunks or res.reasoning_tokens is not None:
            self._reasoning[self.rows] = reasoning_values(res)
        if node.images:
            self._images[self.rows] = image_values(node)
        if node.abandon_after_s is not None:
            self._abandons[self.rows] = node.abandon_after_s
        if self.keep_texts:
            self._texts[self.rows] = res.output_text
        self.rows += 1

    def add_cancelled(
        self,
        run_id: str,
        phase: str,
        session_id: int,
        request_id: int,
        node: NodeSpec,
        model: str | None,
        ready: int | None,
        processed: int | None,
        prompt_tokens_new: int | None,
        prompt_tokens_total: int | None,
        reason: str,
        t0_ns: int,
        client: str | None = "default",
        attempt: int = 0,
        not_before: int | None = None,
    ) -> None:
        """One request cancelled before a worker sent it (``request_row`` with no result)."""
        self.add_row(
            {
                "run_id": run_id,
                "phase": phase,
                "session_id": session_id,
                "node_id": node.node_id,
                "request_id": request_id,
                "parents": node.parents,
                "history_parent": node.history_parent,
                "model": model,
                "client": client,
                "kind": node.kind,
                "agent": node.agent,
                "round": None if node.round < 0 else node.round,
                "attempt": attempt,
                "wait_after_ready": node.wait_after_ready_s,
                "not_before": None if not_before is None else (not_before - t0_ns) / _NS,
                "ready_at": None if ready is None else (ready - t0_ns) / _NS,
                "processed_at": None if processed is None else (processed - t0_ns) / _NS,
                "target_prompt_tokens": node.prompt_tokens,
                "shared_prefix_tokens": node.shared_prefix_tokens,
                "prompt_tokens_new": prompt_tokens_new,
                "requested_output_tokens": node.max_tokens,
                "images": len(node.images) or None,
                "image_pixels": image_values(node)[1] or None,
                "abandon_after": node.abandon_after_s,
                "status": "cancelled",
                "error_kind": "cancelled",
                "error_message": reason,
                "retries": 0,
                "prompt_tokens_total": prompt_tokens_total,
                "chunk_times_ns": None,
            }
        )

    def add_row(self, row: Mapping[str, Any]) -> None:
        """One ``rows.request_row`` dict (missing keys are nulls)."""
        get = row.get
        self._floats += [_f(get(name)) for name in _REQ_FLOATS]
        ints = []
        for name in _REQ_INTS:
            value = get(name)
            if name in ("parents", "chunk_times_ns"):
                ints.append(NULL if value is None else len(value))
            elif name in _RAW or name == "derived":
                ints.append(NULL if name in _RAW else 0)  # the dict gives the floats
            else:
                ints.append(_i(value))
        self._ints += ints
        self._strs += [get(name) for name in _REQ_STRS]
        parents, chunks = get("parents"), get("chunk_times_ns")
        if parents:
            self._parents += parents
        if chunks:
            self._chunks += chunks
        clamped = get("chunk_stamps_clamped")
        if clamped != 0:  # (None: null)
            self._clamped[self.rows] = clamped
        connect = get("connect_time")
        if connect is not None:
            self._connects[self.rows] = connect
        thought = (get("reasoning_tokens"), get("reasoning_chunks"), get("answer_ttfc"))
        if thought != (None, None, None):
            self._reasoning[self.rows] = thought
        images = get("images")
        if images:
            self._images[self.rows] = (images, get("image_pixels") or 0)
        abandon = get("abandon_after")
        if abandon is not None:
            self._abandons[self.rows] = abandon
        text = get("output_text")
        if text is not None:
            self._texts[self.rows] = text
        self.rows += 1

    def to_table(self, t0_ns: int, pause: Callable[[], None] | None = None) -> pa.Table:
        """The batch as a table typed by REQUESTS_SCHEMA (``chunk_times``/``tbc`` computed).

        ``pause`` is called between the slices of the conversion (e.g. ``time.sleep(0)`` to let
        another thread take the GIL).
        """
        floats, misfits = _checked(self._floats, _REQ_FLOATS, np.float64, pause)
        ints, int_misfits = _checked(self._ints, _REQ_INTS, np.int64, pause)
        misfits += int_misfits + _int32_misfits(ints)
        flat = _matrix(self._chunks, 1, np.int64, pause).reshape(-1)
        columns: dict[str, pa.Array] = {}
        width = len(_REQ_STRS)
        for j, name in enumerate(_REQ_STRS):
            strings = self._strs[j::width]
            if misfits and name == "server_numbers_rejected":
                strings = _noted(strings, misfits)
            columns[name] = _strings(strings)
        _derive(floats, ints, flat, _equals(columns["status"], "ok"), t0_ns)
        for j, name in enumerate(_REQ_FLOATS):
            columns[name] = _floats(floats[:, j])
        for j, name in enumerate(_REQ_INTS):
            values = np.ascontiguousarray(ints[:, j])
            if name in _RAW or name == "derived":
                continue
            if name in ("usage_reported", "valid"):
                columns[name] = _bools(values)
            elif name == "parents":
                parents = np.array(self._parents, dtype=np.int64)
                columns[name] = _list(values, _ints(parents, pa.int32()))
            elif name == "chunk_times_ns":
                chunk_columns = _chunk_columns(values, flat, columns["status"], t0_ns)
                columns["chunk_times"], columns["tbc"], columns["chunks_coalesced"] = chunk_columns
            else:
                columns[name] = _ints(values, REQUESTS_SCHEMA.field(name).type)
        columns["chunk_stamps_clamped"] = _sparse(self._clamped, self.rows)
        columns["connect_time"] = _sparse_floats(self._connects, self.rows)
        columns["abandon_after"] = _sparse_floats(self._abandons, self.rows)
        texts = self._texts
        columns["output_text"] = (
            _strings([texts.get(row) for row in range(self.rows)])
            if texts
            else pa.nulls(self.rows, pa.string())
        )
        tokens: dict[int, int | None] = {}
        chunks: dict[int, int | None] = {}
        answers: dict[int, float] = {}
        for row, (token_count, chunk_count, answer) in self._reasoning.items():
            if token_count is not None:
                tokens[row] = token_count
            if chunk_count is not None:
                chunks[row] = chunk_count
            if answer is not None:
                answers[row] = answer
        columns["reasoning_tokens"] = _sparse(tokens, self.rows, NULL)
        columns["reasoning_chunks"] = _sparse(chunks, self.rows, NULL)
        columns["answer_ttfc"] = _sparse_floats(answers, self.rows)
        counts = np.full(self.rows, NULL, dtype=np.int64)
        pixels = np.full(self.rows, NULL, dtype=np.int64)
        for row, (count, area) in self._images.items():
            counts[row], pixels[row] = count, area
        columns["images"] = _ints(counts, pa.int32())
        columns["image_pixels"] = _ints(pixels, pa.int64())
        columns["shard"] = _constant(self.shard, self.rows)
        return pa.Table.from_arrays(
            [columns[f.name] for f in REQUESTS_SCHEMA], schema=REQUESTS_SCHEMA
        )


_FLOAT = {name: j for j, name in enumerate(_REQ_FLOATS)}
_INT = {name: j for j, name in enumerate(_REQ_INTS)}
# the int32 columns among _REQ_INTS (a value outside int32 would wrap around in the cast)
_INT32 = np.array(
    [
        j
        for j, name in enumerate(_REQ_INTS)
        if name in REQUESTS_SCHEMA.names and REQUESTS_SCHEMA.field(name).type == pa.int32()
    ]
)


def _checked(
    values: list[Any], names: Sequence[str], dtype: type, pause: Callable[[], None] | None
) -> tuple[NDArray[Any], list[tuple[int, str, Any]]]:
    """``_matrix`` of a row layout, and the values that did not fit ``dtype`` (row, column,
    value), stored as null: a value past int64 or float64 (a server's number that got this
    far) costs its cell, never the batch."""
    width = len(names)
    try:
        return _matrix(values, width, dtype, pause), []
    except (OverflowError, TypeError, ValueError):
        pass
    null: Any = NULL if dtype is np.int64 else _NAN
    misfits = []
    clean = list(values)
    for i, value in enumerate(clean):
        try:
            dtype(value)
        except (OverflowError, TypeError, ValueError):
            misfits.append((i // width, names[i % width], value))
            clean[i] = null
    return _matrix(clean, width, dtype, pause), misfits


def _int32_misfits(ints: NDArray[np.int64]) -> list[tuple[int, str, Any]]:
    """The values of int32 columns outside int32 (row, column, value), set to null in place."""
    block = ints[:, _INT32]
    bad = (block != NULL) & ((block < -(2**31)) | (block >= 2**31))
    if not bad.any():
        return []
    misfits = []
    for row, k in zip(*np.nonzero(bad), strict=True):
        j = int(_INT32[k])
        misfits.append((int(row), _REQ_INTS[j], int(ints[row, j])))
        ints[row, j] = NULL
    return misfits


def _noted(notes: list[str | None], misfits: list[tuple[int, str, Any]]) -> list[str | None]:
    """``notes`` (a batch's server_numbers_rejected) with a note for each misfit."""
    notes = list(notes)
    for row, name, value in misfits:
        note = f"{name}={raw_text(value)} (does not fit the column)"
        notes[row] = join_notes(notes[row] or "", note)
    return notes


# the float columns add_result leaves to _derive (NaN placeholders), in _REQ_FLOATS order
_DERIVED_NAN = (_NAN,) * (len(_REQ_FLOATS) - 3 - len(SERVER_TIMING_COLUMNS))
_NO_SERVER_TIMINGS = (_NAN,) * len(SERVER_TIMING_COLUMNS)


def _derive(
    floats: NDArray[np.float64],
    ints: NDArray[np.int64],
    flat: NDArray[np.int64],
    ok: NDArray[np.bool_],
    t0_ns: int,
) -> None:
    """Fill, in place, the float columns of ``add_result`` rows from their raw instants.

    The same expressions as ``rows.request_row``, evaluated in the same order on the same
    float64 values, hence the same bits: ``(a - b) / 1e9`` is an exact int64 difference
    converted to float64 and divided, as in Python.
    """
    rows = np.flatnonzero(ints[:, _INT["derived"]] == 1)
    if not len(rows):
        return
    raw = {name: ints[rows, _INT[name]] for name in _RAW}
    known = {name: values != NULL for name, values in raw.items()}
    ok = ok[rows]

    def put(column: str, mask: NDArray[np.bool_], values: NDArray[np.float64]) -> None:
        out = floats[rows, _FLOAT[column]]
        out[mask] = values[mask]
        floats[rows, _FLOAT[column]] = out

    def since_t0(name: str) -> NDArray[np.float64]:
        return (raw[name] - t0_ns) / _NS

    for name in _RAW:
        put(f"{name}_at" if name != "first" else "first_chunk_at", known[name], since_t0(name))
    sent, completed, first, ready = raw["sent"], raw["completed"], raw["first"], raw["ready"]
    put("generator_delay", known["ready"], (sent - ready) / _NS)
    put("dispatch_lag", known["ready"] & known["dispatched"], (raw["dispatched"] - ready) / _NS)
    out = ints[rows, _INT["output_tokens"]]
    has_out = out != NULL
    e2e = (completed - sent) / _NS
    put("e2e", ok, e2e)
    with_first = ok & known["first"]
    put("ttfc", with_first, (first - sent) / _NS)
    with np.errstate(divide="ignore", invalid="ignore"):
        counts = np.where(
            ints[:, _INT["chunk_times_ns"]] == NULL, 0, ints[:, _INT["chunk_times_ns"]]
        )
        ends = np.cumsum(counts)
        n_chunks = counts[rows]
        many = ok & (n_chunks >= 2)
        put(  # one chunk (non-streaming): no time between tokens seen, no tpot
            "tpot",
            with_first & has_out & (out >= 2) & many,
            (completed - first) / _NS / (out - 1).astype(np.float64),
        )
        put("normalized_e2e", ok & has_out & (out != 0), e2e / out.astype(np.float64))
        put("output_throughput", ok & has_out & (e2e > 0), out.astype(np.float64) / e2e)
        last = (
            flat[np.where(many, ends[rows] - 1, 0)] if len(flat) else np.zeros(len(rows), np.int64)
        )
        head = flat[np.where(many, ends[rows] - n_chunks, 0)] if len(flat) else last
        put("tbc_mean", many, (last - head) / _NS / (n_chunks - 1).astype(np.float64))


def _chunk_columns(
    lengths: NDArray[np.int64], flat: NDArray[np.int64], status: pa.Array, t0_ns: int
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``chunk_times`` (rows that reached a worker), ``tbc`` (ok rows among them) and
    ``chunks_coalesced`` (rows that reached a worker: their gaps of exactly 0 ns, i.e. chunks
    stamped with the time of the read before, which a worker does only for chunks of one read)."""
    reached = lengths != NULL
    counts = np.where(reached, lengths, 0)
    chunk_times = _list(lengths, _floats((flat - t0_ns) / _NS))
    steps = np.diff(flat)
    gaps = steps / _NS
    if len(gaps):
        keep = np.ones(len(gaps), dtype=bool)
        boundaries = np.cumsum(counts)[:-1]  # index of each row's first chunk (rows 1..n-1)
        keep[boundaries[(boundaries >= 1) & (boundaries <= len(gaps))] - 1] = False
        gaps = gaps[keep]
        steps = steps[keep]
    gap_counts = np.maximum(counts - 1, 0)
    tbc = _list(gap_counts, _floats(gaps), reached & _equals(status, "ok"))
    rows = np.repeat(np.arange(len(counts)), gap_counts)
    same = np.bincount(rows[steps == 0], minlength=len(counts))
    coalesced = _ints(np.where(reached, same, NULL), pa.int32())
    return chunk_times, tbc, coalesced


def _equals(strings: pa.Array, value: str) -> NDArray[np.bool_]:
    """Element-wise ``strings == value`` of a string array (nulls: False), numpy only."""
    n = len(strings)
    validity, offsets_buf, data_buf = strings.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32, count=n + 1 + strings.offset)[
        strings.offset :
    ]
    lengths = np.diff(offsets)
    target = value.encode()
    result = lengths == len(target)
    if target and result.any():
        data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0)
        starts = offsets[:-1][result]
        match = np.ones(len(starts), dtype=bool)
        for k, byte in enumerate(target):
            match &= data[starts + k] == byte
        result[result] = match
    if validity is not None:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        result &= bits[strings.offset : strings.offset + n].astype(bool)
    return result


class SessionColumns:
    """A batch of sessions.parquet rows (see ``RequestColumns``)."""

    __slots__ = ("_floats", "_ints", "_strs", "rows", "shard")

    def __init__(self, shard: int | None = None) -> None:
        self.shard = shard  # every row's ``shard`` column (None: a single-host run)
        self._floats: list[float] = []
        self._ints: list[int] = []
        self._strs: list[str | None] = []
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(
        self,
        run_id: str,
        phase: str,
        session_id: int,
        started: int | None,
        ended: int | None,
        num_nodes: int,
        num_requests: int,
        num_ok: int,
        num_error: int,
        num_cancelled: int,
        think_time_total_s: float,
        status: str,
        t0_ns: int,
    ) -> None:
        """One session: ``rows.session_row`` of the same ``SessionRecord`` (status resolved)."""
        self._floats += (
            _NAN if started is None else (started - t0_ns) / _NS,
            _NAN if ended is None else (ended - t0_ns) / _NS,
            _NAN if started is None or ended is None else (ended - started) / _NS,
            think_time_total_s,
        )
        self._ints += (session_id, num_nodes, num_requests, num_ok, num_error, num_cancelled)
        self._strs += (run_id, phase, status)
        self.rows += 1

    def add_row(self, row: Mapping[str, Any]) -> None:
        """One ``rows.session_row`` dict (missing keys are nulls)."""
        get = row.get
        self._floats += [_f(get(name)) for name in _SES_FLOATS]
        self._ints += [_i(get(name)) for name in _SES_INTS]
        self._strs += [get(name) for name in _SES_STRS]
        self.rows += 1

    def to_table(self, pause: Callable[[], None] | None = None) -> pa.Table:
        """The batch as a table typed by SESSIONS_SCHEMA."""
        floats = _matrix(self._floats, len(_SES_FLOATS), np.float64, pause)
        ints = _matrix(self._ints, len(_SES_INTS), np.int64, pause)
        columns: dict[str, pa.Array] = {}
        for j, name in enumerate(_SES_FLOATS):
            columns[name] = _floats(floats[:, j])
        for j, name in enumerate(_SES_INTS):
            values = np.ascontiguousarray(ints[:, j])
            columns[name] = _ints(values, SESSIONS_SCHEMA.field(name).type)
        width = len(_SES_STRS)
        for j, name in enumerate(_SES_STRS):
            columns[name] = _strings(self._strs[j::width])
        columns["shard"] = _constant(self.shard, self.rows)
        return pa.Table.from_arrays(
            [columns[f.name] for f in SESSIONS_SCHEMA], schema=SESSIONS_SCHEMA
        )


def requests_from_rows(rows: Sequence[Mapping[str, Any]], t0_ns: int) -> pa.Table:
    """``request_row`` dicts as a typed table."""
    batch = RequestColumns()
    for row in rows:
        batch.add_row(row)
    return batch.to_table(t0_ns)


def sessions_from_rows(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """``session_row`` dicts as a typed table."""
    batch = SessionColumns()
    for row in rows:
        batch.add_row(row)
    return batch.to_table()
