"""The merged rows: the shards' requests, sessions and trace lines k-way merged
(``veeksha.distributed.kway``) into the merged run's files, in the order a single host writes
them (see ``veeksha.distributed.merge``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np
import pyarrow as pa

from veeksha.distributed import merged_file
from veeksha.distributed.gather import ROW, SOURCE, TableSource, gather, order_stream
from veeksha.distributed.kway import (
    OutOfOrderError,
    Rows,
    SortedStream,
    merge_streams,
    primary_bounds,
)
from veeksha.distributed.merged_file import MergedFile
from veeksha.distributed.shard_rows import ShardScan, primary_keys, trace_stream
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.trace import TraceEntry

__all__ = ["ShardInput", "merge_tables", "merge_traces", "sorted_table"]

_log = logging.getLogger(__name__)


@dataclass
class ShardInput:
    """A shard whose folder holds results: its files and their scan."""

    index: int
    shift_s: float
    requests: list[Path]
    sessions: list[Path]
    trace: Path
    scan: ShardScan | None = None


def sorted_table(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """``table`` ordered by ``keys`` (ascending, nulls last; stable)."""
    if table.num_rows == 0:
        return table
    columns = [primary_keys(table.column(key)) for key in keys]
    return table.take(pa.array(np.lexsort(columns[::-1])))


def _table_rows(keys: Sequence[str]) -> Rows[pa.Table]:
    return Rows(
        length=lambda table: table.num_rows,
        concat=pa.concat_tables,
        slice=lambda table, start, stop: table.slice(start, stop - start),
        select=lambda table, mask: table.filter(pa.array(mask, type=pa.bool_())),
        sort=lambda table: sorted_table(table, keys),
    )


def merge_tables(
    inputs: Sequence[ShardInput],
    run_id: str,
    made: pa.Table,
    out: MergedFile,
    *,
    sessions: bool,
) -> None:
    """The shards' request (or session) rows, then the rows the merge made (``made``), in the
    merged run's order, into ``out``: the order from the keys (``kway``), then each row group
    gathered a column at a time (``gather``)."""
    schema, keys = (
        (SESSIONS_SCHEMA, _SESSION_KEYS) if sessions else (REQUESTS_SCHEMA, _REQUEST_KEYS)
    )
    sources: list[TableSource] = []
    streams = []
    for shard in inputs:
        assert shard.scan is not None
        source = TableSource(
            schema,
            files=shard.sessions if sessions else shard.requests,
            index=shard.index,
            run_id=run_id,
            shift_s=shard.shift_s,
        )
        bounds = shard.scan.sessions if sessions else shard.scan.requests
        streams.append(order_stream(source, keys, len(sources), bounds))
        sources.append(source)
    if made.num_rows:
        source = TableSource(schema, table=made)
        bounds = primary_bounds(iter([primary_keys(made.column(keys[0]))]))
        streams.append(order_stream(source, keys, len(sources), bounds))
        sources.append(source)
    pending: list[pa.Table] = []

    def emit(order: pa.Table) -> None:
        pending.append(order.select([SOURCE, ROW]))
        rows = sum(t.num_rows for t in pending)
        group = merged_file.GROUP_ROWS
        if rows < group:
            return
        whole = pa.concat_tables(pending)
        cut = rows - rows % group
        for start in range(0, cut, group):
            out.add(gather(sources, schema, whole.slice(start, group)))
        pending[:] = [whole.slice(cut)] if cut < rows else []

    try:
        merge_streams(streams, _table_rows(keys), emit)
        if pending:
            out.add(gather(sources, schema, pa.concat_tables(pending)))
    finally:
        for source in sources:
            source.close()


def merge_traces(inputs: Sequence[ShardInput], path: Path) -> None:
    """The shards' trace.jsonl lines in dispatch order (ties: by request id, then by shard),
    each naming its shard, into ``path`` (not written when no shard has a trace).

    A shard writes its trace in dispatch order: it is merged as such, and again with each
    file's bounds (read first) if one was not."""
    traces = [shard for shard in inputs if shard.trace.exists()]
    for scan in (False, True):
        streams = [
            trace_stream(shard.trace, shard.index, shard.shift_s, scan=scan) for shard in traces
        ]
        try:
            _write_trace(streams, path)
        except OutOfOrderError as exc:
            # (expected: a shard's file is in hand-over order, up to the hand-over lead ahead)
            _log.info("a shard's trace.jsonl is not in dispatch order (%s): merged again", exc)
            continue
        return


def _write_trace(streams: Sequence[SortedStream[list[TraceEntry]]], path: Path) -> None:
    encoder = msgspec.json.Encoder()
    out: list[BinaryIO] = []  # (opened at the first line: no line, no file)

    def write(entries: list[TraceEntry]) -> None:
        if not out:
            out.append(path.open("wb"))
        out[0].write(encoder.encode_lines(entries))

    try:
        merge_streams(streams, _TRACE_ROWS, write)
    finally:
        if out:
            out[0].close()


_TRACE_ROWS: Rows[list[TraceEntry]] = Rows(
    length=len,
    concat=lambda parts: [entry for part in parts for entry in part],
    slice=lambda entries, start, stop: entries[start:stop],
    select=lambda entries, mask: [entries[i] for i in np.flatnonzero(mask).tolist()],
    sort=lambda entries: sorted(entries, key=attrgetter("dispatched_at", "request_id")),
)

_REQUEST_KEYS = ("processed_at", "completed_at", "request_id")
_SESSION_KEYS = ("ended_at", "session_id")
