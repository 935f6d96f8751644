"""The merged requests.parquet or sessions.parquet, written in row groups as the merge emits rows.

The rows go to a hidden file beside the final one (``.requests.parquet.merging``), which the
evaluation reads a column at a time. The health verdict is known only after that, and a
Parquet file's key-value metadata lives in its footer (after the row groups, which the footer
locates by their offsets): ``finalise`` writes a new footer, the same row groups with the
run's metadata (``health_verdict``, ``finalized_at``), in place of the old one and renames the
file into place. Nothing is read or written again but the footer. Memory: one row group
(``GROUP_ROWS``) at a time.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from veeksha.evaluate.source import release_memory

__all__ = ["GROUP_ROWS", "MergedFile"]

#: Rows per row group of the merged files (as a single-host run's finalised files).
GROUP_ROWS = 65_536

_COMPRESSION = "zstd"
_MAGIC = b"PAR1"


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
            self._flush(whole=True)

    def _flush(self, *, whole: bool = False) -> None:
        """Write the pending rows (``whole``: whole row groups, the rest stays pending)."""
        assert self._writer is not None
        table = pa.concat_tables(self._pending) if self._pending else None
        self._pending, self._pending_rows = [], 0
        if table is None or not table.num_rows:
            return
        rows = table.num_rows - table.num_rows % GROUP_ROWS if whole else table.num_rows
        self._writer.write_table(table.slice(0, rows), GROUP_ROWS)
        if rows < table.num_rows:
            self._pending, self._pending_rows = [table.slice(rows)], table.num_rows - rows
        del table
        release_memory()  # (what the group and the batches read for it freed)

    def close(self) -> None:
        """The staging file complete: readable, not yet final."""
        if self._writer is None:
            return
        self._flush()
        self._writer.close()
        self._writer = None

    def finalise(self, metadata: dict[str, str]) -> None:
        """The final file: the staging file's row groups under a footer with ``metadata``."""
        self.close()
        with pq.ParquetFile(self.staging) as file:
            old = file.metadata
        footer = io.BytesIO()
        pq.write_metadata(self.schema.with_metadata(metadata), footer, metadata_collector=[old])
        new = footer.getvalue()
        assert new.startswith(_MAGIC)
        assert new.endswith(_MAGIC)
        with self.staging.open("r+b") as out:
            out.seek(-8, io.SEEK_END)
            length = int.from_bytes(out.read(4), "little")
            out.seek(-8 - length, io.SEEK_END)
            out.write(new[len(_MAGIC) :])  # (the file's own magic number stays at its start)
            out.truncate()
        self.staging.replace(self.path)

    def discard(self) -> None:
        """Delete the staging file (after ``finalise``, or when the merge failed)."""
        if self._writer is not None:
            with contextlib.suppress(OSError, pa.ArrowException):
                self._writer.close()
            self._writer = None
        with contextlib.suppress(OSError):
            self.staging.unlink(missing_ok=True)
