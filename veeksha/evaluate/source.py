"""A run's results table read one column at a time: the evaluation's memory does not grow with it.

``ColumnSource`` offers the part of ``pyarrow.Table``'s interface the evaluation uses
(``num_rows``, ``column(name)``, ``source[name]``, ``filter(mask)``) over either a table in memory
or the run folder's Parquet files (requests.parquet, or the ``parts/`` of a killed run). A file
source reads a column from disk each time it is asked for one and keeps nothing: a 3,000,000-row
run holds a few 24 MB columns at a time instead of all 28 (about 1 GB). ``filter`` keeps a row mask
and applies it to every column read. ``batches(name)`` yields a column's values a slice of rows at
a time, for samples too large to hold at once (``veeksha.evaluate.sample``).

A file source's ``schema`` is the given schema's columns that every file holds: a run recorded
by an earlier version lacks the columns added since, and a check that needs one of them looks
for it in ``schema.names``.

A run's ``parts/`` (one file a second per table, read during the run's own evaluation and by
``veeksha report`` on a killed run) would make every column read open every part: the evaluation
reads ~130 columns, so its cost grew with parts × columns (a 180-s run at 400 req/s: 181 parts,
24,000 file opens, ``veeksha report`` 12.5-13.2 CPU-s against 3.4-5.4; an hour: minutes). A source
of more than ``CONSOLIDATE_PARTS`` parts and more than ``SMALL_ROWS`` rows therefore first copies
them, once, a batch of at most ``BATCH_ROWS`` rows at a time (bounded memory), into one scratch
file beside them (``parts/<table>/.evaluate-*.parquet``: no reader of parts globs it; removed
when the last source over it is gone, and with ``parts/`` when the run is finalised); each column
read then opens one file, whatever the run's length. Where it cannot be written (a read-only
folder) the parts are read as they are.

``release_memory()`` hands memory freed between two columns back to the operating system: the
Arrow memory pool (mimalloc or jemalloc) and glibc's malloc both keep freed pages for reuse, which
would otherwise count in the process' RSS after every large column.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import tempfile
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from veeksha.evaluate.stats import integers, scalar
from veeksha.record import kernels as ak
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.parquet import (
    PARTS_DIR,
    REQUESTS_FILE,
    SESSIONS_FILE,
    damaged_file,
    open_parquet,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["ColumnSource", "release_memory", "requests_source", "sessions_source"]

#: Rows per batch of ``ColumnSource.batches``.
BATCH_ROWS = 65_536

#: A file source of at most this many rows keeps the columns it reads: the evaluation asks for
#: each column ~15 times, and at this size opening the file costs more than the column's memory
#: (at most a few MB for all columns together).
SMALL_ROWS = 20_000

#: A file source of more parts than this (and more than ``SMALL_ROWS`` rows) reads them from one
#: scratch copy (see the module docstring).
CONSOLIDATE_PARTS = 8

_SCRATCH_COMPRESSION = "lz4"  # (a scratch copy, read a few hundred times: fast to write and read)


class ColumnSource:
    """A results table whose columns are read on demand (see the module docstring)."""

    def __init__(
        self,
        schema: pa.Schema,
        *,
        files: list[Path] | None = None,
        table: pa.Table | None = None,
        mask: NDArray[np.bool_] | None = None,
        scratch: _Scratch | None = None,
    ) -> None:
        self._files = files or []
        self._scratch = scratch  # the scratch copy the files are, kept while a source uses it
        self._table = table
        self._mask = mask
        # each file's footer, parsed once: a run's parts are read dozens of times
        self._footers: dict[Path, pq.FileMetaData] = {}
        if table is None and mask is None and self._files:
            # a run recorded before a column existed: the columns every file holds
            held = [set(self._footer(path).schema.to_arrow_schema().names) for path in self._files]
            schema = pa.schema([f for f in schema if all(f.name in names for names in held)])
        self.schema = schema
        if mask is not None:
            self.num_rows = int(mask.sum())
        elif table is not None:
            self.num_rows = table.num_rows
        else:
            self.num_rows = sum(self._footer(path).num_rows for path in self._files)
        # the columns read so far, unfiltered (small file sources only; shared by filters)
        self._columns: dict[str, pa.ChunkedArray] | None = (
            {} if mask is None and table is None and self.num_rows <= SMALL_ROWS else None
        )

    @classmethod
    def of(cls, table: pa.Table | ColumnSource) -> ColumnSource:
        """``table`` itself when it is a source, else a source over the table in memory."""
        return table if isinstance(table, ColumnSource) else cls(table.schema, table=table)

    def _read(self, name: str) -> pa.ChunkedArray:
        if self._table is not None:
            return self._table.column(name)
        if self._columns is not None:
            if not self._columns:  # (small: every column in one read of each file)
                self._columns.update(self._read_all())
            col = self._columns.get(name)
            if col is None:
                col = self._columns[name] = self._read_files(name)
            return col
        return self._read_files(name)

    def _read_all(self) -> dict[str, pa.ChunkedArray]:
        """The schema's columns that every file holds, each file opened once."""
        tables = []
        for path in self._files:
            with self._open(path) as file:
                tables.append(file.read(use_threads=False))
        columns: dict[str, pa.ChunkedArray] = {}
        for name in self.schema.names:
            if not all(name in table.schema.names for table in tables):
                continue  # (left to _read_files, as before)
            type_ = self.schema.field(name).type
            chunks: list[pa.Array] = []
            for table in tables:
                col = table.column(name)
                chunks += (col if col.type == type_ else ak.cast(col, type_)).chunks
            columns[name] = pa.chunked_array(chunks, type=type_)
        return columns

    def _read_files(self, name: str) -> pa.ChunkedArray:
        type_ = self.schema.field(name).type
        chunks: list[pa.Array] = []
        for path in self._files:
            with self._open(path) as file:
                col = file.read(columns=[name], use_threads=False).column(0)
            if col.type != type_:
                col = ak.cast(col, type_)
            chunks += col.chunks
        return pa.chunked_array(chunks, type=type_)

    def column(self, name: str) -> pa.ChunkedArray:
        """Column ``name`` of the (filtered) rows."""
        col = self._read(name)
        if self._mask is None:
            return col
        return ak.filter_rows(col, _bool_array(self._mask))

    def __getitem__(self, name: str) -> pa.ChunkedArray:
        return self.column(name)

    def filter(self, mask: pa.Array | pa.ChunkedArray | NDArray[np.bool_]) -> ColumnSource:
        """The rows where ``mask`` (over this source's rows; null counts as false) is true."""
        keep = _to_numpy_mask(mask)
        if self._mask is None:
            combined = keep
        else:
            combined = np.zeros(self._mask.size, dtype=bool)
            combined[np.flatnonzero(self._mask)[keep]] = True
        source = ColumnSource(
            self.schema, files=self._files, table=self._table, mask=combined, scratch=self._scratch
        )
        source._footers = self._footers
        source._columns = self._columns
        return source

    def batches(self, name: str, rows: int | None = None) -> Iterator[pa.Array]:
        """Column ``name`` of the (filtered) rows, about ``rows`` unfiltered rows at a time."""
        start = 0
        for batch in self._raw_batches(name, rows or BATCH_ROWS):
            n = len(batch)
            if self._mask is None:
                yield batch
            else:
                yield ak.filter_rows(batch, _bool_array(self._mask[start : start + n]))
            start += n

    def _raw_batches(self, name: str, rows: int) -> Iterator[pa.Array]:
        if self._table is not None:
            for batch in self._table.select([name]).to_batches(max_chunksize=rows):
                yield batch.column(0)
            return
        if self._columns is not None:  # (small: the whole column, in slices)
            whole = self._read(name).combine_chunks()
            for start in range(0, len(whole), rows):
                yield whole.slice(start, rows)
            return
        type_ = self.schema.field(name).type
        for path in self._files:
            with self._open(path) as file:
                for batch in file.iter_batches(batch_size=rows, columns=[name], use_threads=False):
                    col = batch.column(0)
                    yield col if col.type == type_ else ak.cast(col, type_)

    def _footer(self, path: Path) -> pq.FileMetaData:
        footer = self._footers.get(path)
        if footer is None:
            with pq.ParquetFile(path) as file:
                footer = self._footers[path] = file.metadata
        return footer

    def _open(self, path: Path) -> pq.ParquetFile:
        return open_parquet(path, metadata=self._footer(path))


def _file_rows(path: Path) -> int:
    with pq.ParquetFile(path) as file:
        return int(file.metadata.num_rows)


def _bool_array(mask: NDArray[np.bool_]) -> pa.Array:
    bits = np.packbits(mask, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), int(mask.size), [None, pa.py_buffer(bits)])


def _to_numpy_mask(mask: pa.Array | pa.ChunkedArray | NDArray[np.bool_]) -> NDArray[np.bool_]:
    if isinstance(mask, np.ndarray):
        return mask.astype(bool, copy=False)
    return integers(ak.fill_null(mask, scalar(False))) > 0


def _source(run_dir: Path, final: str, name: str, schema: pa.Schema) -> ColumnSource:
    path = run_dir / final
    if path.exists():
        try:
            _file_rows(path)
        except (OSError, pa.ArrowException) as exc:
            raise damaged_file(path, exc) from None
        return ColumnSource(schema, files=[path])
    parts = sorted((run_dir / PARTS_DIR / name).glob("part-*.parquet"))
    readable = []
    for part in parts:
        with contextlib.suppress(OSError, pa.ArrowException):  # the reader logs unreadable parts
            _file_rows(part)
            readable.append(part)
    source = ColumnSource(schema, files=readable)
    if len(readable) <= CONSOLIDATE_PARTS or source.num_rows <= SMALL_ROWS:
        return source
    scratch = _Scratch.write(source, run_dir / PARTS_DIR / name)
    if scratch is None:
        return source
    return ColumnSource(source.schema, files=[scratch.path], scratch=scratch)


class _Scratch:
    """One file holding a source's parts; deleted when the last source holding it is gone."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._finalizer = weakref.finalize(self, _unlink, path)

    @classmethod
    def write(cls, source: ColumnSource, folder: Path) -> _Scratch | None:
        """``source``'s rows (its schema's columns) in one file in ``folder``, written a batch
        of at most ``BATCH_ROWS`` rows at a time; None if it cannot be written."""
        try:
            fd, name = tempfile.mkstemp(prefix=".evaluate-", suffix=".parquet", dir=folder)
        except OSError:
            return None
        os.close(fd)
        path = Path(name)
        names = source.schema.names
        try:
            with pq.ParquetWriter(path, source.schema, compression=_SCRATCH_COMPRESSION) as out:
                group: list[pa.Table] = []
                rows = 0
                for part in source._files:
                    with source._open(part) as file:
                        table = file.read(columns=names, use_threads=False)
                    table = pa.Table.from_arrays(
                        [
                            col if col.type == field.type else ak.cast(col, field.type)
                            for col, field in zip(table.columns, source.schema, strict=True)
                        ],
                        schema=source.schema,
                    )
                    if group and rows + table.num_rows > BATCH_ROWS:
                        out.write_table(pa.concat_tables(group), row_group_size=BATCH_ROWS)
                        group, rows = [], 0
                    group.append(table)
                    rows += table.num_rows
                if group:
                    out.write_table(pa.concat_tables(group), row_group_size=BATCH_ROWS)
        except (OSError, pa.ArrowException):
            _unlink(path)
            return None
        return cls(path)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def requests_source(run_dir: str | os.PathLike[str]) -> ColumnSource:
    """requests.parquet of ``run_dir`` (or its parts), read a column at a time."""
    return _source(Path(run_dir), REQUESTS_FILE, "requests", REQUESTS_SCHEMA)


def sessions_source(run_dir: str | os.PathLike[str]) -> ColumnSource:
    """sessions.parquet of ``run_dir`` (or its parts), read a column at a time."""
    return _source(Path(run_dir), SESSIONS_FILE, "sessions", SESSIONS_SCHEMA)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def release_memory() -> None:
    """Return the memory freed so far to the operating system (see the module docstring)."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
