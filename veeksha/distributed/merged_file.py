"""The merged requests.parquet or sessions.parquet, written in row groups as the merge emits rows.

The rows go to a hidden file beside the final one (``.requests.parquet.merging``), which the
evaluation reads a column at a time; the health verdict is known only after it, so
``finalise`` then copies the file row group by row group into the final file with the run's
metadata (``health_verdict``, ``finalized_at``) and deletes the hidden one, as a single-host run
merges its parts after its evaluation. Memory: one row group (``GROUP_ROWS``) at a time.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["GROUP_ROWS", "MergedFile"]

#: Rows per row group of the merged files (as a single-host run's finalised files).
GROUP_ROWS = 65_536

_COMPRESSION = "zstd"


class MergedFile:
    """The merged rows of one table (``schema``), in the order they are added."""

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        self.staging = path.with_name(f".{path.name}.merging")
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(
            self.staging, schema, compression=_COMPRESSION
        )

    def add(self, table: pa.Table) -> None:
        """Rows that come next in the merged order."""
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        assert self._writer is not None
        if self._pending_rows:
            self._writer.write_table(pa.concat_tables(self._pending), GROUP_ROWS)
        self._pending, self._pending_rows = [], 0

    def close(self) -> None:
        """The staging file complete: readable, not yet final."""
        if self._writer is None:
            return
        self._flush()
        self._writer.close()
        self._writer = None

    def finalise(self, metadata: dict[str, str]) -> None:
        """The final file: the staging file's rows with ``metadata``; the staging file goes."""
        self.close()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            with (
                pq.ParquetFile(self.staging) as source,
                pq.ParquetWriter(
                    tmp, self.schema.with_metadata(metadata), compression=_COMPRESSION
                ) as out,
            ):
                for group in range(source.num_row_groups):
                    table = source.read_row_group(group, use_threads=False)
                    out.write_table(table.replace_schema_metadata(metadata), GROUP_ROWS)
                    del table
            tmp.replace(self.path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        self.discard()

    def discard(self) -> None:
        """Delete the staging file (after ``finalise``, or when the merge failed)."""
        if self._writer is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._writer.close()
            self._writer = None
        with contextlib.suppress(OSError):
            self.staging.unlink(missing_ok=True)
