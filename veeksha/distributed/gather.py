"""The merged rows of a row group gathered a column at a time from the shards' files.

The k-way merge orders the rows by their keys alone (``order_stream``: a shard's key columns, a
batch at a time, with each row's shard and row number); each row group of the merged file is
then a list of (shard, row) pairs, and ``TableSource.column`` reads one column of those rows from
a shard: the row groups of its files that hold them, that column only, moved onto the driver's
timeline. A merge of k shards then holds one merged row group and one column of one row group
per shard, instead of k readers of every column at once (~50 MB each for a shard's requests:
the decoders of 57 columns).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from veeksha.distributed import shard_rows
from veeksha.distributed.kway import Bounds, Keys, SortedStream
from veeksha.distributed.shard_rows import primary_keys
from veeksha.distributed.timeline import move_table

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["ROW", "SOURCE", "TableSource", "gather", "order_stream"]

#: Columns of the merge's key tables: the source (its position in the merge) and the row's
#: number in it.
SOURCE = "__source"
ROW = "__row"

_READ_BUFFER = 1 << 16

#: Files of a source kept open between reads.
_OPEN_FILES = 64


class TableSource:
    """A shard's rows of one table (its files, in order, as one sequence of rows), or the rows
    the merge made (``table``), read a column of some rows at a time."""

    def __init__(
        self,
        schema: pa.Schema,
        *,
        files: Sequence[Path] = (),
        table: pa.Table | None = None,
        index: int = 0,
        run_id: str = "",
        shift_s: float = 0.0,
    ) -> None:
        self.schema = schema
        self._files = list(files)
        self._table = table
        self._index, self._run_id, self._shift_s = index, run_id, shift_s
        self._footers = []
        # the files read last (a lost shard's parts: a merged row group's rows span many)
        self._opened: OrderedDict[int, pq.ParquetFile] = OrderedDict()
        starts: list[int] = []
        places: list[tuple[int, int]] = []  # (file, row group) of each row group
        rows = 0
        for position, path in enumerate(self._files):
            with pq.ParquetFile(path) as file:
                footer = file.metadata
            self._footers.append(footer)
            for group in range(footer.num_row_groups):
                starts.append(rows)
                places.append((position, group))
                rows += footer.row_group(group).num_rows
        self._starts = np.asarray([*starts, rows], dtype=np.int64)
        self._places = places
        self.num_rows = rows if table is None else table.num_rows

    def keys(self, names: Sequence[str], source: int) -> Iterator[tuple[pa.Table, Keys]]:
        """The key columns ``names`` of every row, a batch at a time, with ``SOURCE`` and
        ``ROW``; and each batch's primary keys (``names[0]``)."""
        # (one plain schema for every source's keys: a part written by another writer may
        # differ in nullability or field metadata, and the merge concatenates them)
        schema = pa.schema(
            [pa.field(name, self.schema.field(name).type) for name in names]
            + [pa.field(SOURCE, pa.int32()), pa.field(ROW, pa.int64())]
        )
        start = 0
        for batch in self._key_batches(list(names)):
            n = batch.num_rows
            columns = [batch.column(name) for name in names]
            columns = [
                c if c.type == f.type else c.cast(f.type)
                for c, f in zip(columns, schema, strict=False)
            ]
            columns += [
                pa.array(np.full(n, source, dtype=np.int32)),
                pa.array(np.arange(start, start + n)),
            ]
            start += n
            keyed = pa.Table.from_arrays(columns, schema=schema)
            yield keyed, primary_keys(keyed.column(0))

    def _key_batches(self, names: list[str]) -> Iterator[pa.Table]:
        if self._table is not None:
            if self._table.num_rows:
                yield self._table.select(names)
            return
        for path, footer in zip(self._files, self._footers, strict=True):
            with self._open(path, footer) as file:
                for batch in file.iter_batches(
                    shard_rows.BATCH_ROWS, columns=names, use_threads=False
                ):
                    table = pa.Table.from_batches([batch])
                    yield move_table(table, self.schema, self._shift_s)

    def _open(self, path: Path, footer: pq.FileMetaData) -> pq.ParquetFile:
        return pq.ParquetFile(path, metadata=footer, buffer_size=_READ_BUFFER, pre_buffer=False)

    def _file(self, position: int) -> pq.ParquetFile:
        file = self._opened.get(position)
        if file is None:
            if len(self._opened) >= _OPEN_FILES:
                self._opened.popitem(last=False)[1].close()
            file = self._opened[position] = self._open(
                self._files[position], self._footers[position]
            )
        self._opened.move_to_end(position)
        return file

    def close(self) -> None:
        """Close the files kept open (reading again opens them again)."""
        while self._opened:
            self._opened.popitem()[1].close()

    def column(self, name: str, rows: NDArray[np.int64]) -> pa.Array:
        """Column ``name`` of ``rows`` (row numbers, in the order wanted) as the merged run
        holds it: the merged run's ``run_id``, the shard's index where ``shard`` is null, times
        moved onto the driver's timeline, the schema's type."""
        field = self.schema.field(name)
        if self._table is not None:
            return self._table.column(name).take(pa.array(rows)).combine_chunks()
        if name == "run_id":
            return pa.array([self._run_id] * rows.size, type=field.type)
        first = int(np.searchsorted(self._starts, rows.min(), side="right")) - 1
        last = int(np.searchsorted(self._starts, rows.max(), side="right")) - 1
        chunks: list[pa.Array] = []
        for position in sorted({self._places[g][0] for g in range(first, last + 1)}):
            groups = [g for p, g in self._places[first : last + 1] if p == position]
            file = self._file(position)
            col = file.read_row_groups(groups, columns=[name], use_threads=False).column(0)
            chunks += col.chunks
        held = pa.chunked_array(chunks, type=chunks[0].type if chunks else field.type)
        taken = held.take(pa.array(rows - self._starts[first])).combine_chunks()
        if name == "shard":
            taken = pc.fill_null(taken, pa.scalar(self._index, pa.int32()))
        moved = move_table(pa.table({name: taken}), self.schema, self._shift_s).column(0)
        array = moved.combine_chunks()
        return array if array.type == field.type else array.cast(field.type)


def order_stream(
    source: TableSource, keys: Sequence[str], position: int, bounds: Bounds
) -> SortedStream[pa.Table]:
    """The k-way merge's stream of a source's keys (``position``: its place in the merge)."""
    return SortedStream(source.keys(keys, position), bounds)


def gather(sources: Sequence[TableSource], schema: pa.Schema, order: pa.Table) -> pa.Table:
    """The rows ``order`` names (``SOURCE``, ``ROW``: in the merged order), a column at a time."""
    which = order.column(SOURCE).to_numpy()
    rows = order.column(ROW).to_numpy()
    parts = [(k, np.flatnonzero(which == k)) for k in range(len(sources))]
    parts = [(k, where) for k, where in parts if where.size]
    back = None
    if len(parts) > 1:  # the pieces are concatenated by source: put them back in order
        back = pa.array(np.argsort(np.concatenate([where for _, where in parts]), kind="stable"))
    columns = []
    for field in schema:
        pieces = [sources[k].column(field.name, rows[where]) for k, where in parts]
        if not pieces:
            columns.append(pa.nulls(0, field.type))
        elif back is None:
            columns.append(pieces[0])
        else:
            columns.append(pa.concat_arrays(pieces).take(back))
    return pa.Table.from_arrays(columns, schema=schema)
