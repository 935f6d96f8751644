"""A shard's files for the merge: their list, their scan, its trace as a stream.

``result_files`` names a shard's requests.parquet or sessions.parquet (or the ``parts/`` of a
lost shard); ``scan_shard`` reads their key and id columns once before the merge: the bounds of
their keys (``kway.Bounds``), the shard's highest session id, and for a lost shard the session
ids it has rows for and which of the requests it reported in flight have rows after all (numpy
arrays and small sets: no Python object per row). ``trace_stream`` is its trace.jsonl as a
``kway.SortedStream``: entries decoded a block of lines at a time, on the driver's timeline.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from veeksha.distributed.kway import Bounds, Keys, SortedStream, primary_bounds
from veeksha.record.parquet import PARTS_DIR
from veeksha.record.trace import TraceEntry

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "BATCH_ROWS",
    "ShardScan",
    "primary_keys",
    "result_files",
    "scan_shard",
    "trace_stream",
]

_log = logging.getLogger(__name__)

#: Rows per batch read from a shard's file (a finalised file's row groups hold up to 65,536).
BATCH_ROWS = 8_192

#: A shard's file is read through a buffer of this many bytes per column, not a column chunk at
#: a time (a reader of every column of requests holds ~60 MB instead of ~135).
_READ_BUFFER = 1 << 16

_IDS: TypeAlias = "NDArray[np.int64]"


def result_files(folder: Path, final: str, name: str) -> list[Path]:
    """A shard's finalised ``final`` file, else its readable parts of table ``name`` in order
    (as ``veeksha.record.reader`` reads them: an unreadable part is skipped and logged)."""
    path = folder / final
    if path.exists():
        return [path]
    readable = []
    for part in sorted((folder / PARTS_DIR / name).glob("part-*.parquet")):
        try:
            with pq.ParquetFile(part):
                readable.append(part)
        except (OSError, pa.ArrowException) as exc:
            _log.warning("skipping unreadable result part %s: %s", part, exc)
    return readable


def primary_keys(column: pa.ChunkedArray | pa.Array) -> Keys:
    """A key column as the merge sorts it: float64, null as +inf."""
    filled = pc.fill_null(pc.cast(column, pa.float64()), np.inf)
    return np.asarray(filled.to_numpy(), dtype=np.float64)


def _moved_keys(column: pa.ChunkedArray | pa.Array, shift_s: float) -> Keys:
    return primary_keys(column if shift_s == 0.0 else pc.add(column, shift_s))


def _batches(files: Sequence[Path], columns: list[str] | None) -> Iterator[pa.Table]:
    for path in files:
        with pq.ParquetFile(path, buffer_size=_READ_BUFFER, pre_buffer=False) as file:
            for batch in file.iter_batches(BATCH_ROWS, columns=columns, use_threads=False):
                yield pa.Table.from_batches([batch])


class _Dispatched(msgspec.Struct):
    dispatched_at: float


#: Bytes of a trace.jsonl read (and decoded) at a time: ~10,000 lines.
TRACE_BLOCK = 1 << 21


def _trace_blocks(path: Path) -> Iterator[bytes]:
    """Whole lines of ``path``, a block at a time (a torn last line is skipped, as
    ``read_trace`` does)."""
    rest = b""
    with path.open("rb") as file:
        while block := file.read(TRACE_BLOCK):
            block = rest + block
            end = block.rfind(b"\n") + 1
            rest = block[end:]
            if end:
                yield block[:end]


def trace_bounds(path: Path, shift_s: float) -> Bounds:
    """The bounds of a shard's trace.jsonl, ``dispatched_at`` moved by ``shift_s``."""
    decoder = msgspec.json.Decoder(_Dispatched)

    def keys() -> Iterator[Keys]:
        for block in _trace_blocks(path):
            times = np.fromiter((e.dispatched_at for e in decoder.decode_lines(block)), np.float64)
            yield times + shift_s

    return primary_bounds(keys())


def trace_stream(
    path: Path, index: int, shift_s: float, *, scan: bool
) -> SortedStream[list[TraceEntry]]:
    """A shard's trace.jsonl entries, on the driver's timeline and naming their shard; ``scan``:
    with its bounds (read first), else taken to be in dispatch order (``kway.OutOfOrderError``
    when not)."""
    bounds = trace_bounds(path, shift_s) if scan else None

    def batches() -> Iterator[tuple[list[TraceEntry], Keys]]:
        decoder = msgspec.json.Decoder(TraceEntry)
        for block in _trace_blocks(path):
            entries = decoder.decode_lines(block)
            for entry in entries:
                entry.dispatched_at += shift_s
                entry.shard = index
            yield entries, np.fromiter((e.dispatched_at for e in entries), np.float64)

    return SortedStream(batches(), bounds)


@dataclass
class ShardScan:
    """What ``scan_shard`` learnt of a shard's files (the session ids: of a lost shard only)."""

    requests: Bounds
    sessions: Bounds
    highest: int  # the highest session id in its rows (-1: none)
    request_sessions: _IDS  # the session ids of its request rows (unique, sorted)
    session_rows: _IDS  # the session ids of its session rows (unique, sorted)
    known: set[tuple[int, int, int]] = field(default_factory=set)  # of ``watched``


def _unique(parts: list[_IDS]) -> _IDS:
    if not parts:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(parts)).astype(np.int64, copy=False)


def _ids(table: pa.Table, name: str) -> _IDS:
    column = table.column(name)
    return np.asarray(
        pc.fill_null(column, 0).to_numpy() if column.null_count else column.to_numpy(),
        dtype=np.int64,
    )


def scan_shard(
    requests: Sequence[Path],
    sessions: Sequence[Path],
    shift_s: float,
    watched: set[tuple[int, int, int]] | None = None,
) -> ShardScan:
    """Read a shard's key and id columns: its streams' bounds, its highest session id and,
    for a lost shard (``watched``: (session, node, attempt) of the requests it reported in
    flight), its session ids with rows and which of ``watched`` have a request row."""
    lost = watched is not None
    request_ids: list[_IDS] = []
    session_ids: list[_IDS] = []
    highest = [-1]
    known: set[tuple[int, int, int]] = set()
    watched_sessions = np.fromiter((w[0] for w in watched or ()), dtype=np.int64)
    columns = ["processed_at", "session_id"]
    if watched:
        columns += ["node_id", "attempt"]

    def seen(ids: _IDS, into: list[_IDS]) -> None:
        if ids.size:
            highest[0] = max(highest[0], int(ids.max()))
            if lost:
                into.append(np.unique(ids))

    def request_keys() -> Iterator[Keys]:
        for table in _batches(requests, columns):
            ids = _ids(table, "session_id")
            seen(ids, request_ids)
            if watched:
                rows = np.flatnonzero(np.isin(ids, watched_sessions))
                if rows.size:
                    nodes = _ids(table, "node_id")[rows]
                    attempts = _ids(table, "attempt")[rows]
                    triples = zip(ids[rows], nodes, attempts, strict=True)
                    known.update((int(s), int(n), int(a)) for s, n, a in triples)
            yield _moved_keys(table.column("processed_at"), shift_s)

    def session_keys() -> Iterator[Keys]:
        for table in _batches(sessions, ["ended_at", "session_id"]):
            seen(_ids(table, "session_id"), session_ids)
            yield _moved_keys(table.column("ended_at"), shift_s)

    request_bounds = primary_bounds(request_keys())
    session_bounds = primary_bounds(session_keys())
    if watched:
        known &= watched
    return ShardScan(
        request_bounds,
        session_bounds,
        highest[0],
        _unique(request_ids),
        _unique(session_ids),
        known,
    )
