"""Incremental, crash-safe Parquet results: requests.parquet and sessions.parquet.

Vocabulary:

- *row*: one request or session. The event loop appends it into the writer's current column
  batch (``veeksha.record.columnar``): ``ResultWriter.requests``/``sessions`` give that batch to
  a ``with writer.lock:`` block (the recorder's hot path, no dict per row); ``add_request`` and
  ``add_session`` take a ``veeksha.record.rows`` dict instead. No I/O on the event loop.
- *tick*: the single writer thread wakes every ``flush_interval_s`` (1 s), or sooner when
  ``flush_rows`` rows are waiting (``row_added``), or when asked (``flush``/``close``). It swaps
  the current batches for empty ones under ``lock`` and converts them with numpy and
  ``pa.Array.from_buffers``: no Python code per row; converting the rows' ~50 Python values to
  numpy costs a few µs a row (measured 3-6 on a busy 2-core machine), in slices of 8,192 rows
  with the GIL released in between.
- *part*: what one tick writes for one table: a complete small Parquet file,
  ``<run_dir>/parts/requests/part-000001.parquet``, written as ``.part-000001.parquet.tmp`` and
  renamed, so a part is either whole or absent. A SIGKILL loses at most the rows of the last tick.
  Parts have no dictionary pages (the same data read back; the tick's fixed CPU is lower).
- *finalise*: ``close`` merges the parts (in order, into row groups of about 64k rows) into
  ``<run_dir>/requests.parquet`` and ``sessions.parquet`` with the run metadata, then deletes
  ``parts/``. Until then, ``veeksha.record.reader`` reads the parts.

Every part and final file carries the schema of ``veeksha.record.columns`` (with units) and the
run's key-value metadata (``METADATA_KEYS``; ``close`` adds e.g. the health verdict and
``interrupted``). A write error stops the writer thread, keeps the parts already written and is
raised as ``RunAbortedError`` by the next ``add_*``/``flush``/``close`` (and passed to
``on_error`` from the writer thread, e.g. to wake the event loop). A failure that is not an
``OSError`` (a batch that cannot be converted: a bug, since a value that does not fit its column
is stored as null, ``veeksha.record.columnar``) says so instead of blaming the disk, and does not
stop ``close`` from merging the parts already written (``io_error`` tells the two apart).

Example::

    writer = ResultWriter(run_dir, run_metadata(run_id=..., ...), trace=trace_writer)
    with writer.lock:                                   # on the event loop, per request
        writer.requests.add_result(...)                 # (or writer.add_request(row_dict))
    writer.row_added()
    writer.flush()                                      # before evaluating the parts
    writer.close({"health_verdict": "pass", "interrupted": "false"})
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from veeksha import __version__
from veeksha.errors import ConfigurationError, RunAbortedError
from veeksha.record.columnar import RequestColumns, SessionColumns
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.trace import TraceWriter

__all__ = [
    "METADATA_KEYS",
    "PARTS_DIR",
    "REQUESTS_FILE",
    "SESSIONS_FILE",
    "ResultWriter",
    "open_parquet",
    "read_table",
    "run_metadata",
]

REQUESTS_FILE = "requests.parquet"
SESSIONS_FILE = "sessions.parquet"
PARTS_DIR = "parts"
_COMPRESSION = "zstd"
_MERGE_ROWS = 65_536

# Key-value metadata of every Parquet file of a run (all values are strings).
METADATA_KEYS = {
    "run_id": "identifier of the run (its folder name)",
    "scenario_hash": "hash of the resolved scenario",
    "seed": "root seed",
    "veeksha_version": "version of veeksha that wrote the run",
    "t0_wall_time": "wall-clock time of t0, ISO 8601 UTC",
    "t0_monotonic_ns": "CLOCK_MONOTONIC of t0 in ns (times in the files are seconds since t0)",
    "t0_wall_ns": "wall-clock time of t0, ns since the epoch (``time.time_ns()``)",
    "shard": "a distributed run's shard: index/count (absent on a single host)",
    "shards": "a merged distributed run: how many shards ran it (it has no t0_monotonic_ns)",
    "target": "what was benchmarked (api base and model, or the built-in simulator)",
    "finalized_at": "wall-clock time the files were finalised (absent in parts)",
    "interrupted": "true when the run was stopped early (signal, write error)",
    "stop_reason": "why the run stopped (summary.json run.stop_reason: completed, ...)",
    "health_verdict": "overall health-check verdict (pass | fail)",
}


def run_metadata(
    *,
    run_id: str,
    scenario_hash: str,
    seed: int,
    t0_ns: int,
    t0_wall: datetime,
    target: str,
    t0_wall_ns: int | None = None,
    shard: tuple[int, int] | None = None,
) -> dict[str, str]:
    """The metadata a run starts with (the writer's ``metadata`` argument)."""
    extra = {} if t0_wall_ns is None else {"t0_wall_ns": str(t0_wall_ns)}
    if shard is not None:
        extra["shard"] = f"{shard[0]}/{shard[1]}"
    return extra | {
        "run_id": run_id,
        "scenario_hash": scenario_hash,
        "seed": str(seed),
        "veeksha_version": __version__,
        "t0_wall_time": t0_wall.astimezone(UTC).isoformat(),
        "t0_monotonic_ns": str(t0_ns),
        "target": target,
    }


class _Table:
    """One output table: its parts folder and part counter, batches that failed to write."""

    def __init__(self, name: str, schema: pa.Schema, parts: Path, final: Path) -> None:
        self.name = name
        self.schema = schema
        self.parts = parts
        self.final = final
        self.unwritten: list[RequestColumns | SessionColumns] = []  # kept after a write error
        self.next_part = 1

    def part_paths(self) -> list[Path]:
        return sorted(self.parts.glob("part-*.parquet"))


class ResultWriter:
    """Writes a run's request and session rows to Parquet from one background thread.

    ``add_request``/``add_session`` are safe to call from the event loop while the thread runs;
    ``flush`` and ``close`` block until the thread has written everything added before them.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        metadata: dict[str, str],
        *,
        t0_ns: int | None = None,
        trace: TraceWriter | None = None,
        shard: int | None = None,
        keep_texts: bool = False,
        flush_interval_s: float = 1.0,
        flush_rows: int = 50_000,
        on_error: Callable[[RunAbortedError], None] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self._metadata = {str(key): str(value) for key, value in metadata.items()}
        if t0_ns is None:
            t0_ns = int(self._metadata.get("t0_monotonic_ns", "0"))
        self._t0_ns = t0_ns
        parts = self.run_dir / PARTS_DIR
        self._requests = _Table(
            "requests", REQUESTS_SCHEMA, parts / "requests", self.run_dir / REQUESTS_FILE
        )
        self._sessions = _Table(
            "sessions", SESSIONS_SCHEMA, parts / "sessions", self.run_dir / SESSIONS_FILE
        )
        for table in (self._requests, self._sessions):
            try:
                table.parts.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigurationError(
                    f"cannot create the results folder {table.parts}: {exc.strerror or exc}; "
                    "choose a writable output_dir"
                ) from exc
        self.lock = threading.Lock()
        self._shard = shard  # every row's ``shard`` column (None: a single-host run)
        self._keep_texts = keep_texts  # every answer's text in output_text
        self.requests = RequestColumns(shard, keep_texts)
        self.sessions = SessionColumns(shard)
        self._trace = trace
        self._interval = flush_interval_s
        self._flush_rows = flush_rows
        self._on_error = on_error
        self._error: RunAbortedError | None = None
        self._wake = threading.Event()
        self._waiters: deque[threading.Event] = deque()
        self._stopping = False
        self._closed = False
        self.rows_written = {"requests": 0, "sessions": 0}
        self._thread = threading.Thread(target=self._run, name="veeksha-result-writer", daemon=True)
        self._thread.start()

    # ---- event-loop side -------------------------------------------------------------------

    @property
    def error(self) -> RunAbortedError | None:
        """The write error that stopped the writer, if any."""
        return self._error

    @property
    def io_error(self) -> bool:
        """Whether the writer stopped on an I/O error (disk full, files removed): then nothing
        more can be written; otherwise (a conversion failure) the disk still works."""
        return self._error is not None and isinstance(self._error.__cause__, OSError)

    def add_request(self, row: Mapping[str, Any]) -> None:
        """Queue one requests.parquet row (a ``rows.request_row`` dict). Raises RunAbortedError
        once writing has failed."""
        if self._error is not None:
            raise self._error
        with self.lock:
            self.requests.add_row(row)
        self.row_added()

    def add_session(self, row: Mapping[str, Any]) -> None:
        """Queue one sessions.parquet row (a ``rows.session_row`` dict)."""
        if self._error is not None:
            raise self._error
        with self.lock:
            self.sessions.add_row(row)

    def row_added(self) -> None:
        """After appending to ``requests`` directly: raises RunAbortedError once writing has
        failed, wakes the writer early when ``flush_rows`` rows are waiting."""
        if self._error is not None:
            raise self._error
        if self.requests.rows >= self._flush_rows:
            self._wake.set()

    def write_soon(self) -> None:
        """Wake the writer thread now, without waiting: the rows added so far are written while
        the caller does something else (a ``flush`` after it waits for less)."""
        self._wake.set()

    def flush(self) -> None:
        """Block until every row added so far is in a part file (e.g. before evaluating)."""
        if self._error is None and self._thread.is_alive():
            done = threading.Event()
            self._waiters.append(done)
            self._wake.set()
            while not done.wait(0.5) and self._thread.is_alive():
                pass
        if self._error is not None:
            raise self._error

    def close(self, extra_metadata: dict[str, str] | None = None) -> None:
        """Write what is pending, merge the parts into the final files, delete the parts.

        ``extra_metadata`` (e.g. ``{"health_verdict": "pass", "interrupted": "true"}``) is added
        to the files' metadata. After a write error the parts are kept, nothing is merged, and
        RunAbortedError is raised. After another failure (``io_error`` false: the rows of one
        batch could not be converted) the parts already written are merged as usual, then
        RunAbortedError is raised. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        self._wake.set()
        self._thread.join()
        if self._trace is not None and not self.io_error:
            try:
                self._trace.close()
            except OSError as exc:
                self._fail(exc, self._trace.path)
        if self._error is not None and self.io_error:
            raise self._error
        metadata = dict(self._metadata)
        metadata.update({str(k): str(v) for k, v in (extra_metadata or {}).items()})
        metadata["finalized_at"] = datetime.now(UTC).isoformat()
        tables = (self._requests, self._sessions)
        for table in tables:
            try:
                self._merge(table, metadata)
            except (OSError, pa.ArrowException) as exc:
                raise self._fail(exc, table.final) from exc
        shutil.rmtree(self.run_dir / PARTS_DIR, ignore_errors=True)
        if self._error is not None:
            raise self._error

    # ---- writer thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            stopping = self._stopping
            waiters = [self._waiters.popleft() for _ in range(len(self._waiters))]
            try:
                self._write_parts()
            except _WriteFailed as failed:
                self._fail(failed.cause, failed.path, failed.rows)
            except Exception as exc:  # noqa: BLE001 - the event loop must hear of any failure
                self._fail(exc, self.run_dir / PARTS_DIR)
            for done in waiters:
                done.set()
            if stopping or self._error is not None:
                return

    def _write_parts(self) -> None:
        # Both batches are taken at once, under the lock: each session's request rows were
        # appended before its own row, so every session of this tick has its requests in this
        # tick's (earlier) requests part, and a crash or write error between the two parts never
        # leaves a session without them.
        with self.lock:
            requests, self.requests = self.requests, RequestColumns(self._shard, self._keep_texts)
            sessions, self.sessions = self.sessions, SessionColumns(self._shard)
        for table, batch in ((self._requests, requests), (self._sessions, sessions)):
            if not batch.rows:
                continue
            path = table.parts / f"part-{table.next_part:06d}.parquet"
            tmp = path.with_name(f".{path.name}.tmp")
            try:
                # the conversion holds the GIL: it yields between slices, so the event loop
                # never waits for more than one slice (~8,000 rows)
                if isinstance(batch, RequestColumns):
                    data = batch.to_table(self._t0_ns, _yield_gil)
                else:
                    data = batch.to_table(_yield_gil)
            except Exception as exc:  # (not the disk: said so in _fail, the parts are kept)
                table.unwritten.append(batch)
                if table is self._requests and sessions.rows:
                    self._sessions.unwritten.append(sessions)
                raise _WriteFailed(exc, path, batch.rows) from exc
            try:
                # (no dictionary pages in a part: the same Arrow data read back, 20-35 % less
                # CPU a tick and smaller files; the final file is written by ``_merge``)
                pq.write_table(
                    data.replace_schema_metadata(self._metadata),
                    tmp,
                    compression=_COMPRESSION,
                    use_dictionary=False,
                )
                tmp.replace(path)
            except (OSError, pa.ArrowException) as exc:
                table.unwritten.append(batch)  # kept in memory, never half-written
                if table is self._requests and sessions.rows:
                    self._sessions.unwritten.append(sessions)
                with contextlib.suppress(OSError):
                    tmp.unlink(missing_ok=True)
                raise _WriteFailed(exc, path) from exc
            table.next_part += 1
            self.rows_written[table.name] += batch.rows
        if self._trace is not None:
            try:
                self._trace.flush()
            except OSError as exc:
                raise _WriteFailed(exc, self._trace.path) from exc

    def _fail(self, exc: BaseException, path: Path, rows: int | None = None) -> RunAbortedError:
        parts = sum(len(t.part_paths()) for t in (self._requests, self._sessions))
        if isinstance(exc, OSError):
            reason = exc.strerror or str(exc)
            error = RunAbortedError(
                f"cannot write results to {path}: {reason}. The run stopped; the {parts} part "
                f"files already written under {self.run_dir / PARTS_DIR} are kept and readable "
                "(veeksha report, or veeksha.record.reader.load_requests)."
            )
        else:  # not the disk: a batch that could not be converted (a bug)
            what = "rows" if rows is None else f"{rows} rows"
            error = RunAbortedError(
                f"could not convert {what} to Parquet for {path.name} "
                f"({type(exc).__name__}: {str(exc)[:300]}); this is a bug in veeksha, not a disk "
                f"error: please report it. The run stopped; those rows are lost, the {parts} "
                "part files written before are kept and finalised with the evaluation."
            )
        error.__cause__ = exc
        self._error = error
        if self._on_error is not None:
            self._on_error(error)
        return error

    # ---- finalisation ------------------------------------------------------------------------

    def _merge(self, table: _Table, metadata: dict[str, str]) -> None:
        schema = table.schema.with_metadata(metadata)
        tmp = table.final.with_name(f".{table.final.name}.tmp")
        try:
            with pq.ParquetWriter(tmp, schema, compression=_COMPRESSION) as out:
                for chunk in _chunks(table.part_paths(), table.schema):
                    out.write_table(chunk.replace_schema_metadata(metadata))
                    del chunk  # not held while the next part is read
            tmp.replace(table.final)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def _yield_gil() -> None:
    time.sleep(0)  # releases the GIL: the event loop runs now if it was waiting


class _WriteFailed(Exception):
    def __init__(self, cause: BaseException, path: Path, rows: int | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.path = path
        self.rows = rows


def damaged_file(path: Path, exc: BaseException) -> ConfigurationError:
    """The error of a run folder's Parquet file that cannot be read (exit 2, the file named)."""
    return ConfigurationError(
        f"{path}: not a readable Parquet file ({exc}): the run folder is damaged (a copy cut "
        "short, a disk that filled?); copy it again from where it was written"
    )


def open_parquet(path: Path, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
    """A Parquet file to read in this thread alone: without pre-buffering, which hands the
    reads to Arrow's I/O thread pool and so starts its threads, which stay for the process'
    life. A process that never starts them keeps one thread, and can still fork a sweep's next
    point's helpers (``veeksha.forked``); what pre-buffering saves is round trips to remote
    storage, and a run's files are local. Read with ``use_threads=False`` too (the CPU pool)."""
    return pq.ParquetFile(path, metadata=metadata, pre_buffer=False)


def read_table(
    path: Path, schema: pa.Schema | None = None, columns: list[str] | None = None
) -> pa.Table:
    """A Parquet file as a table: only ``columns`` (in that order) when given, cast to
    ``schema`` (which then lists those columns) when given.

    ``ParquetFile.read``: unlike ``pq.read_table``, it does not import pyarrow.dataset, which
    imports pandas (~0.3-0.5 CPU-s).
    """
    with open_parquet(path) as part:
        table = part.read(columns=columns, use_threads=False)
    if columns is not None:
        table = table.select(columns)
    if schema is not None and not table.schema.equals(schema):
        if table.schema.names != schema.names:
            raise ValueError(f"{path}: columns {table.schema.names}, expected {schema.names}")
        from veeksha.record import kernels  # (Table.cast would import pyarrow.compute)

        columns_cast = [
            kernels.cast(col, field.type) for col, field in zip(table.columns, schema, strict=True)
        ]
        table = pa.Table.from_arrays(columns_cast, schema=schema)
    return table


def _chunks(paths: list[Path], schema: pa.Schema) -> Iterator[pa.Table]:
    """The parts' rows, small parts regrouped into tables of at most ``_MERGE_ROWS`` rows and a
    larger part on its own (bounded memory: never two large parts at once, nor their copy)."""
    group: list[pa.Table] = []
    rows = 0
    for path in paths:
        with pq.ParquetFile(path) as file:  # (the footer: the group goes before the part is read)
            part_rows = file.metadata.num_rows
        if group and rows + part_rows > _MERGE_ROWS:
            yield pa.concat_tables(group)
            group, rows = [], 0
        group.append(read_table(path, schema))
        rows += part_rows
    if group:
        yield pa.concat_tables(group)
