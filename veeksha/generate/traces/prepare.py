"""From a trace file to its canonical Parquet, once: validated, grouped, linked, cached.

``prepare_trace`` reads the file in batches (``reader.py``), lets the flavor stage and (for
grouped rows) link them (``flavor.py``), sets aside the rows that cannot be served, and writes
the **canonical table** (``CANONICAL``), one row per request, sessions contiguous and numbered
0, 1, … in replay order, in row groups of whole sessions. The table is cached beside the trace
(``.<name>.<key>.veeksha.parquet``; if that folder is not writable, in
``$XDG_CACHE_HOME/veeksha/traces``), keyed by the trace's real path, file, size, modification and
status-change times, the flavor's settings and ``CACHE_VERSION`` (``cache_key``), and the limit
and ``client_selection`` the rows were shaped by; a later run with the same file starts from it at
once.

Rows that name no client are given one by ``client_selection`` (``TraceClients``), when the
scenario has one and several clients, before they are fitted: the chosen name is written into
their ``client`` column, so everything after (the fit, ``sessions.py``'s tokenizers) treats them
as rows naming that client. Without one the cache (and its key) is what it always was.

Memory: a trace whose rows are sessions of their own (no ``session_id``) streams through in
batches of ``BATCH_ROWS`` rows, read and staged on a thread at most ``_AHEAD`` row groups ahead
of the writer (``_ahead``), so reading and writing overlap. A grouped trace (rows carry a
session key) is held as Arrow columns (~40 bytes a row) while its sessions are put together,
once, then written.

Replay order: ungrouped, file order; grouped, by session start time (the earliest ``ts`` of the
session's rows), ties and untimed traces by first appearance in the file.

Unservable rows: a request needs at least one prompt token and one output token. Rows with a 0
length are not replayed; a grouped session with such a row is not replayed at all (its DAG would
be broken). With ``client.max_model_len``, requests that do not fit the context window are
skipped with their sessions or clipped (``fit.py``; the limit is part of the cache's key, with
several clients each one's window, each row held to its own client's). All
are counted, by reason and with their first lines, in ``PreparedTrace`` (and so in run.log and
summary.json), never dropped silently.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import queue
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from veeksha.generate.clients import TraceClients
from veeksha.generate.traces.arrow import from_bools, from_numpy, mask, numbers
from veeksha.generate.traces.fit import ContextLimit, fit_roots, fit_session, linear_contexts
from veeksha.generate.traces.flavor import (
    CONTENT,
    NODE,
    ROUTING,
    SHOWN_LINES,
    STAGED,
    TraceFlavor,
)
from veeksha.generate.traces.reader import (
    ELEMENT,
    LINE,
    TraceFileError,
    csv_lines,
    detect_format,
    read_batches,
    unreadable,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["CACHE_VERSION", "CANONICAL", "ROOTS_ONLY", "PreparedTrace", "prepare_file"]

CACHE_VERSION = 16  # 7: the NODE columns; 8: NODE's valid; 9: agent, round, transcript; 10: a
# request log's empty session_id cell is no session id; 11: the oversized policy in the meta;
# 12: grouped rows keep their own timestamp (``ts``, for ``turn_timing: timestamps``); 13:
# the lines and wording of the flavor's rows not replayed in the meta; 14: a CSV's lines in the
# meta are the file's lines (blank lines and values over several lines counted); 15: NODE's
# images (a recorded image channel's); 16: NODE's abandon_after (a recorded abandonment's)
ROW_GROUP_ROWS = 65_536
_Rows = TypeVar("_Rows", pa.Table, pa.RecordBatch)
_META_KEY = b"veeksha.trace"

#: The columns of every trace (the content ones null where the flavor has none); a trace of
#: one-request sessions stops here (every row a root).
ROOTS_ONLY = pa.schema(
    [
        ("session", pa.int64()),
        ("line", pa.int64()),
        ("start", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        *((f.name, f.type) for f in CONTENT),
        *((f.name, f.type) for f in ROUTING),
        *((f.name, f.type) for f in NODE),
    ]
)
#: Grouped traces add each node's parents (indices within its session), history parent, think
#: time and the row's own timestamp (trace seconds, null: none; ``start`` is its session's).
CANONICAL = (
    ROOTS_ONLY.append(pa.field("parents", pa.list_(pa.int32())))
    .append(pa.field("history", pa.int32()))
    .append(pa.field("wait", pa.float64()))
    .append(pa.field("ts", pa.float64()))
)


@dataclass
class PreparedTrace:
    """A trace's canonical table and what was learnt making it."""

    cache: str
    source: str
    flavor: str
    sessions: int
    rows: int
    #: first session of each row group, and the total as a sentinel
    group_sessions: list[int] = field(default_factory=list)
    has_timestamps: bool = False
    #: start times (trace seconds) of the first and the last session in replay order
    first_start: float | None = None
    last_start: float | None = None
    #: line of the first session that starts before the one before it (ungrouped traces)
    unsorted_line: int | None = None
    #: line of the first session without a timestamp, in a trace that has some
    untimed_line: int | None = None
    unservable_rows: int = 0
    unservable_sessions: int = 0
    unservable_lines: list[int] = field(default_factory=list)
    #: why the unservable rows are (``zero_length``, or the flavor's word, e.g. burstgpt's
    #: ``failed_request``)
    unservable_reason: str = "zero_length"
    #: rows longer than ``client.max_model_len`` not replayed (with their sessions' other rows)
    oversized_rows: int = 0
    oversized_sessions: int = 0
    oversized_lines: list[int] = field(default_factory=list)
    #: requests clipped to fit ``client.max_model_len`` (``oversized: truncate``)
    truncated_rows: int = 0
    #: the ``session_generator.oversized`` the rows were fitted with (``skip`` or
    #: ``truncate``; empty: nothing checked, no ``client.max_model_len`` or ``send``)
    oversized: str = ""
    #: rows the flavor could not use, by reason (e.g. rag's ``other_documents``), the first
    #: lines of each reason's rows and the flavor's wording of the reason
    dropped: dict[str, int] = field(default_factory=dict)
    dropped_lines: dict[str, list[int]] = field(default_factory=dict)
    dropped_why: dict[str, str] = field(default_factory=dict)
    reused: bool = False
    #: tokens of one hash-id block (content flavors), sessions that warm up (the first ones;
    #: rag's warm-ups sent), warm-ups too long for ``client.max_model_len`` (not sent), notes
    #: for run.log
    block_size: int = 0
    warmup_sessions: int = 0
    #: the clients each document is warmed on (rag with ``client_selection``: all of them)
    warmup_clients: int = 1
    oversized_warmups: int = 0
    notes: list[str] = field(default_factory=list)
    #: client names the rows give (``client`` column), each with the first line naming it
    clients: dict[str, int] = field(default_factory=dict)
    #: the first line of a row with images (a recorded image channel's; None: none)
    images_line: int | None = None
    #: with several clients' windows: per reason (``oversized``, ``truncated``,
    #: ``oversized_warmups``), the keys of the windows its rows exceeded, as messages name them
    #: (``clients[1].max_model_len``); not in the cache's meta when empty, as before clients
    #: had windows of their own
    windows: dict[str, list[str]] = field(default_factory=dict)

    def describe(self, where: str = "") -> str:
        """run.log's line of what is replayed (what is not: ``warnings``, one account);
        ``where`` adds the window and cache (``OpenTrace.describe``)."""
        text = (
            f"{self.flavor} trace {self.source}: {self.rows} requests in {self.sessions} sessions"
        )
        if self.warmup_sessions:
            text += (
                f" ({self.rows - self.warmup_sessions} from the trace's rows and"
                f" {self.warmup_sessions} warm-up(s), one per document"
                f"{' and client' if self.warmup_clients > 1 else ''}, before them)"
            )
        for note in self.notes:
            text += f"; {note}"
        text += where
        if self.not_replayed():
            text += "; the warnings below say which rows are not replayed as the trace has them"
        return text

    def not_replayed(self) -> dict[str, int]:
        """Rows not replayed (or clipped: ``truncated``), by reason; only reasons that occur."""
        counts = {self.unservable_reason: self.unservable_rows, "oversized": self.oversized_rows}
        counts |= self.dropped
        counts["oversized_warmups"] = self.oversized_warmups
        counts["truncated"] = self.truncated_rows
        return {reason: n for reason, n in counts.items() if n}

    def warnings(self, window: str = "client.max_model_len") -> list[str]:
        """One run.log line per reason a row was not replayed as the trace has it; ``window``:
        the key of the context window the rows were fitted to (``clients[1].max_model_len``),
        unless the rows were held to their own clients' windows (``windows``)."""
        own = self.windows

        def held(reason: str) -> str:  # (the window(s) the reason's rows exceeded)
            keys = own.get(reason)
            if not keys:
                return window
            if len(keys) == 1:
                return keys[0]
            return f"their clients' windows ({', '.join(keys)})"

        why = {
            "zero_length": (
                f"rows of {self.unservable_sessions} session(s) with a 0 prompt or output length;"
                " a request needs at least 1 of each, and a session with such a row is not"
                " replayed at all"
            ),
            "failed_request": (
                "rows with 0 Response tokens, as BurstGPT records a failed request, or 0"
                " Request tokens: nothing to replay"
            ),
            "oversized": (
                "rows of sessions with a request whose history and prompt leave no room for an"
                f" output in {held('oversized')} (oversized: truncate clips outputs, never a"
                " later turn's prompt or the trace's own text)"
                if self.oversized == "truncate"
                else f"rows of sessions longer than {held('oversized')} (oversized: skip)"
            ),
            "truncated": f"requests clipped to {held('truncated')} (oversized: truncate)",
            "oversized_warmups": (
                "rag warm-ups (not rows of the file) of documents longer than"
                f" {held('oversized_warmups')}, each named by its document's first line; those"
                " documents' questions find no warmed cache"
            ),
            "other_documents": "rows of documents beyond the num_documents most frequent",
            "unanswered_turns": "leading assistant turns or user turns without a reply",
            "conversations_without_reply": "conversations without an answered user turn",
        } | self.dropped_why
        lines = {
            self.unservable_reason: self.unservable_lines,
            "oversized": self.oversized_lines,
        } | self.dropped_lines
        out = []
        for reason, n in self.not_replayed().items():
            verb = "sent clipped" if reason == "truncated" else "not replayed"
            text = f"trace: {n} {verb}: {reason} ({why.get(reason, reason)})"
            if lines.get(reason):
                text += f"; first lines {', '.join(map(str, lines[reason]))}"
            out.append(text)
        return out


def cache_key(source: Path, flavor_settings: str) -> str:
    """The cache's key: the trace's real path, its file (inode), size, modification time and
    status-change time, the flavor's settings. The change time is the one no tool sets back
    (``touch -r``, ``cp -p``, ``rsync -t`` and archives restore the modification time): a file
    rewritten in place to the same size, its old time restored, is still seen to change."""
    stat = source.stat()
    text = (
        f"{CACHE_VERSION}|{source.resolve()}|{stat.st_ino}|{stat.st_size}|{stat.st_mtime_ns}"
        f"|{stat.st_ctime_ns}|{flavor_settings}"
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cache_paths(source: Path, key: str) -> list[Path]:
    name = f".{source.name}.{key}.veeksha.parquet"
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return [source.parent / name, Path(home) / "veeksha" / "traces" / name]


def prepare_file(
    source: Path,
    flavor: TraceFlavor,
    flavor_settings: str,
    limit: ContextLimit | None = None,
    clients: TraceClients | None = None,
) -> PreparedTrace:
    """The canonical table of ``source`` read as ``flavor`` (cached; see module doc), the rows
    that name no client given theirs by ``clients`` (``client_selection``; None: the first's,
    as ever), its requests fitted into ``limit`` (``fit.py``), each row to its own client's."""
    settings = f"{flavor_settings}|{None if limit is None else limit.cache_text()}"
    if clients is not None:  # (without a selection, the key it always was)
        settings += f"|{clients.cache_text()}"
        flavor.warmup_clients = list(clients.names)
        if flavor.warms_up:  # (its warm-ups, one per client, are rows of the cache)
            settings += "|warmups=each_client"
    try:
        key = cache_key(source, settings)
        if source.is_dir():
            raise IsADirectoryError(21, "is a folder, not a trace file")
    except OSError as exc:
        raise unreadable(source, exc) from None
    candidates = _cache_paths(source, key)
    for path in candidates:
        found = _load_meta(path)
        if found is not None:
            found.reused = True
            return found
    errors: list[str] = []
    for path in candidates:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        except OSError as exc:
            errors.append(f"{path.parent}: {exc.strerror or exc}")
            continue
        os.close(fd)
        try:
            try:
                prepared = _convert(source, flavor, Path(tmp), str(path), limit, clients)
            except TraceFileError as exc:
                raise _at_file_line(source, exc) from None
            os.chmod(tmp, 0o644)  # (mkstemp makes it private; it is a copy of a readable trace)
            os.replace(tmp, path)
            for stale in path.parent.glob(f".{source.name}.*.veeksha.parquet"):
                if stale != path:  # an earlier version of this trace (or of its settings)
                    with contextlib.suppress(OSError):
                        stale.unlink()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return prepared
    raise TraceFileError(
        source, None, f"no writable folder for the trace's cache ({'; '.join(errors)})"
    )


def read_meta(path: str | Path) -> PreparedTrace:
    found = _load_meta(Path(path))
    if found is None:
        raise TraceFileError(path, None, "not a prepared trace; run it again to rebuild it")
    return found


def _load_meta(path: Path) -> PreparedTrace | None:
    try:
        meta = pq.read_metadata(path).metadata or {}
        found = PreparedTrace(**json.loads(meta[_META_KEY]))
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
        return None
    # (where it is read from now: its note is where it was made, relative to another folder)
    found.cache = str(path)
    return found


# ---------------------------------------------------------------------------------- convert


def _convert(
    source: Path,
    flavor: TraceFlavor,
    tmp: Path,
    cache: str,
    limit: ContextLimit | None,
    clients: TraceClients | None = None,
) -> PreparedTrace:
    info = PreparedTrace(cache=cache, source=str(source), flavor=flavor.name, sessions=0, rows=0)
    info.unservable_reason = flavor.unservable_reason
    if clients is not None:
        clients.start()  # (the weighted draws from the first row, whatever was built before)
        if flavor.warms_up:
            info.warmup_clients = len(clients.names)
    if limit is not None:
        info.oversized = "truncate" if limit.truncate else "skip"
    staged = (_stage(flavor, batch) for batch in read_batches(source, flavor.fields))
    first = next(staged)
    grouped = first.column("group").null_count < first.num_rows
    # no dictionaries (the columns are numbers), delta-coded session and line numbers,
    # statistics only where they are read, no compression (the cache is read back by this
    # machine; snappy cost half the writing time for ~30 % of disk): ~4x faster to write than
    # pyarrow's defaults
    with pq.ParquetWriter(
        tmp,
        CANONICAL if grouped else ROOTS_ONLY,
        use_dictionary=False,
        compression="none",
        write_statistics=["session"],
        column_encoding={"session": "DELTA_BINARY_PACKED", "line": "DELTA_BINARY_PACKED"},
    ) as writer:
        if grouped:
            tables = _grouped(flavor, first, staged, info, limit, clients)
        else:
            tables = _ungrouped(flavor, first, staged, info, limit, clients)
        # the file is read and staged on a thread while this one writes: both release the GIL
        # in Arrow's C++, so the conversion takes the longer of the two, not their sum
        for table in _ahead(tables):
            writer.write_table(table, row_group_size=max(1, table.num_rows))
        info.group_sessions.append(info.sessions)
        info.block_size = flavor.block_size
        info.notes = ["flavor detected from the file"] if flavor.detected else []
        info.notes += flavor.notes
        info.dropped = dict(flavor.dropped)
        info.dropped_lines = {k: list(v) for k, v in flavor.dropped_lines.items()}
        info.dropped_why = dict(flavor.dropped_why)
        _file_lines(source, info)
        meta = asdict(info)
        if not info.windows:  # (one window for every row: the meta as it ever was)
            del meta["windows"]
        writer.add_key_value_metadata({_META_KEY: json.dumps(meta).encode()})
    if info.sessions == 0:
        if info.oversized_rows:
            keys = info.windows.get("oversized") or [
                "client.max_model_len" if limit is None else limit.key
            ]
            window = " or ".join(keys)
            fix = f"raise {window}"
            if info.oversized != "truncate":
                fix += " or set session_generator.oversized: truncate"
            raise TraceFileError(
                source,
                None,
                f"no row can be served ({info.oversized_rows} longer than {window},"
                f" {info.unservable_rows} with a 0 prompt or output length); {fix}",
            )
        raise TraceFileError(
            source,
            None,
            f"no row can be served ({info.unservable_rows} with a 0 prompt or output length);"
            " give rows with lengths of at least 1",
        )
    return info


def _at_file_line(source: Path, exc: TraceFileError) -> TraceFileError:
    """``exc`` at its line of the file: in a CSV, a line from the rows' ``__line`` is the row's
    number (``reader.csv_lines``), off by the blank lines and values over several lines above
    it."""
    if exc.exact or exc.line is None or detect_format(source) != "csv":
        return exc
    line = csv_lines(source, [exc.line])[exc.line]
    return TraceFileError(exc.path, line, exc.detail, exc.element, exc.elements, exact=True)


def _file_lines(source: Path, info: PreparedTrace) -> None:
    """The lines ``info`` shows (run.log's warnings, the errors ``open_trace`` raises) made the
    file's lines: in a CSV they are the rows' numbers until here (``_at_file_line``)."""
    if detect_format(source) != "csv":
        return
    lists = [info.unservable_lines, info.oversized_lines, *info.dropped_lines.values()]
    single = [line for line in (info.unsorted_line, info.untimed_line) if line is not None]
    shown = [line for lines in lists for line in lines] + single + list(info.clients.values())
    if not shown:
        return
    real = csv_lines(source, shown)
    for lines in lists:
        lines[:] = [real[line] for line in lines]
    if info.unsorted_line is not None:
        info.unsorted_line = real[info.unsorted_line]
    if info.untimed_line is not None:
        info.untimed_line = real[info.untimed_line]
    info.clients = {name: real[line] for name, line in info.clients.items()}


def _stage(flavor: TraceFlavor, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``flavor.stage(batch)``; an error at a line of a JSON array holding several elements
    (a minified array) names the element at fault, found by staging that line's rows one by
    one (only on the way to exit 2)."""
    flavor.note_rows(batch)
    try:
        return flavor.stage(batch)
    except TraceFileError as exc:
        if exc.elements <= 1 or ELEMENT not in batch.schema.names:
            raise
        lines = numbers(batch.column(LINE), np.int64)
        elements = numbers(batch.column(ELEMENT), np.int64)
        for i in np.flatnonzero(lines == exc.line).tolist():
            try:
                flavor.stage(batch.slice(i, 1))
            except TraceFileError as alone:
                if alone.detail == exc.detail:
                    raise TraceFileError(
                        exc.path, exc.line, exc.detail, element=int(elements[i])
                    ) from None
        raise


_AHEAD = 2  # row groups read ahead of the writer (each ~65k rows: a few MB)
_DONE = object()


def _ahead(tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """``tables``, made on a thread at most ``_AHEAD`` ahead of the consumer; the thread's
    error (a bad row) is raised here, in order."""
    handoff: queue.Queue[object] = queue.Queue(maxsize=_AHEAD)
    stop = threading.Event()

    def produce() -> None:
        try:
            for table in tables:
                while not stop.is_set():
                    try:
                        handoff.put(table, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            handoff.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 (handed to the consumer, raised there)
            handoff.put(exc)

    thread = threading.Thread(target=produce, name="veeksha-trace-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, pa.Table)
            yield item
    finally:
        # on an error or an interrupt the thread is not waited for (it may be grouping a whole
        # trace): it stops at its next hand-over, and only reads the trace file
        stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                handoff.get_nowait()  # (frees a producer blocked on a full queue)
    thread.join()


def _note_unservable(info: PreparedTrace, lines: np.ndarray, sessions: int) -> None:
    info.unservable_rows += int(lines.size)
    info.unservable_sessions += sessions
    room = SHOWN_LINES - len(info.unservable_lines)
    if room > 0:
        info.unservable_lines.extend(int(v) for v in lines[:room])


def _note_windows(
    info: PreparedTrace, limit: ContextLimit, reason: str, clients: NDArray[np.int64]
) -> None:
    """Remember the keys of the windows of ``clients`` (rows' client indices) that rows of
    ``reason`` exceeded (several clients' windows only)."""
    if not clients.size:
        return
    keys = info.windows.setdefault(reason, [])
    for client in np.unique(clients).tolist():
        key = limit.key_of(int(client))
        if key not in keys:
            keys.append(key)


def _note_oversized(info: PreparedTrace, lines: np.ndarray, sessions: int, rows: int) -> None:
    info.oversized_rows += rows
    info.oversized_sessions += sessions
    room = SHOWN_LINES - len(info.oversized_lines)
    if room > 0:
        info.oversized_lines.extend(int(v) for v in lines[:room])


def _fixed(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """Rows whose prompt cannot be clipped: text or hash-id blocks of the trace's own."""
    names = table.schema.names
    fixed = np.zeros(table.num_rows, dtype=np.bool_)
    for name in ("text", "hash_ids"):
        if name in names:
            fixed |= mask(pc.is_valid(table.column(name)))
    return fixed


def _tools(table: pa.Table) -> list[bool] | None:
    """Rows that are tool nodes (no request), or None when there are none."""
    if "tool_latency" not in table.schema.names:
        return None
    column = table.column("tool_latency")
    if column.null_count == table.num_rows:
        return None
    return mask(pc.is_valid(column)).tolist()


def _merged(table: pa.Table) -> tuple[list[list[int] | None], list[str | None]] | None:
    """The rows' transcripts and agents (``agent_rounds``), or None when no row has one."""
    if "transcript" not in table.schema.names:
        return None
    column = table.column("transcript")
    if column.null_count == table.num_rows:
        return None
    return column.to_pylist(), table.column("agent").to_pylist()


def _servable(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    prompt = numbers(table.column("prompt_tokens"), np.int64)
    output = numbers(table.column("output_tokens"), np.int64)
    ok: np.ndarray = (prompt >= 1) & (output >= 1)
    return ok


def _mixed_group(
    flavor: TraceFlavor, batch: pa.RecordBatch, grouped: bool, other: int | None
) -> None:
    """Exit 2 at the first row of ``batch`` without a session_id (``grouped``) or with one (not
    ``grouped``): ``other`` is the line of a row of the other kind, before or after it (None:
    not known, the first batch kept no row)."""
    column = batch.column("group")
    bad = pc.is_null(column) if grouped else pc.is_valid(column)
    hits = np.flatnonzero(mask(bad))
    if hits.size:
        line = batch.column("line")[int(hits[0])].as_py()
        where = "other rows have" if other is None else f"line {other} has"
        why = (
            f"this row has no session_id where {where} one"
            if grouped
            else f"this row has a session_id where {where} none"
        )
        raise flavor.error(line, f"{why}; give it on every row or none")


def _first_line(batch: pa.RecordBatch, grouped: bool) -> int:
    """The line of ``batch``'s first row with a session_id (``grouped``) or without one."""
    column = batch.column("group")
    rows = np.flatnonzero(mask(pc.is_valid(column) if grouped else pc.is_null(column)))
    return int(batch.column("line")[int(rows[0])].as_py())


def _ungrouped(
    flavor: TraceFlavor,
    first: pa.RecordBatch,
    rest: Iterator[pa.RecordBatch],
    info: PreparedTrace,
    limit: ContextLimit | None,
    clients: TraceClients | None = None,
) -> Iterator[pa.Table]:
    """Each row a session of one request, in file order, streamed."""
    pending: list[pa.Table] = []
    pending_rows = 0
    read = 0  # sessions of the trace so far, replayed or not (``client_selection``'s ``i``)
    last_ts = -np.inf
    batch: pa.RecordBatch | None = first
    # the flavor's warm-ups (rag's) are the first rows of the first batch: they are not rows of
    # the file, so one that cannot be sent is counted apart, and the warm-ups sent are counted
    warmups = flavor.warmup_sessions
    plain = _first_line(first, grouped=False) if first.num_rows else None
    while batch is not None:
        _mixed_group(flavor, batch, grouped=False, other=plain)
        if clients is not None:  # (before the fit: each row is held to its client's window)
            batch = _choose_clients(batch, clients, read, np.ones(batch.num_rows, np.int64))
        read += batch.num_rows
        warm = np.arange(batch.num_rows) < warmups
        warmups = 0
        ok = _servable(batch)  # (a warm-up is never of 0 tokens: rag makes none)
        lines = numbers(batch.column("line"), np.int64)
        if not ok.all():
            bad = ~ok
            _note_unservable(info, lines[bad], int(bad.sum()))
            batch = batch.filter(from_bools(ok))
            lines, warm = lines[ok], warm[ok]
        prompt_col: pa.Array = batch.column("prompt_tokens")
        output_col: pa.Array = batch.column("output_tokens")
        if limit is not None and batch.num_rows:
            prompt, output = numbers(prompt_col, np.int64), numbers(output_col, np.int64)
            owners = limit.row_clients(batch)
            windows = limit.windows(owners) if limit.clients else None
            if windows is not None:  # (the keys of the windows rows exceed, for the messages)
                exceeds = prompt + output > windows
            fits, prompt, output, clipped = fit_roots(prompt, output, _fixed(batch), limit, windows)
            info.truncated_rows += clipped
            if windows is not None:
                _note_windows(info, limit, "truncated", owners[exceeds & fits])
                _note_windows(info, limit, "oversized", owners[~fits & ~warm])
                _note_windows(info, limit, "oversized_warmups", owners[~fits & warm])
            if clipped:
                prompt_col, output_col = from_numpy(prompt), from_numpy(output)
            if not fits.all():
                over = ~fits & ~warm
                info.oversized_warmups += int((~fits & warm).sum())
                flavor.note_lines("oversized_warmups", lines[~fits & warm].tolist())
                _note_oversized(info, lines[over], int(over.sum()), int(over.sum()))
                keep = from_bools(fits)
                batch = batch.filter(keep)
                prompt_col, output_col = prompt_col.filter(keep), output_col.filter(keep)
                lines, warm = lines[fits], warm[fits]
        info.warmup_sessions += int(warm.sum())
        n = batch.num_rows
        if n:
            ts = numbers(batch.column("ts"), np.float64, np.nan)
            timed = ~np.isnan(ts)
            if timed.any():
                info.has_timestamps = True
            if info.untimed_line is None and not timed.all():
                info.untimed_line = int(lines[np.flatnonzero(~timed)[0]])
            if info.unsorted_line is None and timed.all():
                prev = np.concatenate([[last_ts], ts[:-1]])
                hits = np.flatnonzero(ts < prev)
                if hits.size:
                    info.unsorted_line = int(lines[hits[0]])
                last_ts = float(ts[-1])
            if timed.all():
                if info.first_start is None:
                    info.first_start = float(ts[0])
                info.last_start = float(ts[-1])
            sessions = np.arange(info.sessions, info.sessions + n, dtype=np.int64)
            table = pa.Table.from_arrays(
                [
                    from_numpy(sessions),
                    batch.column("line"),
                    from_numpy(ts),
                    pc.cast(prompt_col, pa.int32()),
                    pc.cast(output_col, pa.int32()),
                    *_content(batch),
                ],
                schema=ROOTS_ONLY,
            )
            info.sessions += n
            info.rows += n
            pending.append(table)
            pending_rows += n
            if pending_rows >= ROW_GROUP_ROWS:
                yield from _emit(pending, info, split=True)
                pending, pending_rows = [], 0
        batch = next(rest, None)
    if pending:
        yield from _emit(pending, info, split=True)


def _content(table: pa.Table | pa.RecordBatch) -> list[pa.Array | pa.ChunkedArray]:
    """The ``CONTENT``, ``ROUTING`` and ``NODE`` columns of staged or linked rows (null where
    the flavor has none)."""
    names = table.schema.names
    return [
        table.column(f.name) if f.name in names else pa.nulls(table.num_rows, f.type)
        for f in (*CONTENT, *ROUTING, *NODE)
    ]


def _note_clients(info: PreparedTrace, table: pa.Table) -> None:
    """Remember each client name of ``table``'s rows with the first line naming it."""
    column = table.column("client")
    if column.null_count == table.num_rows:
        return
    for name in pc.unique(column).to_pylist():
        if name and name not in info.clients:  # (empty or null: the first client)
            at = pc.index(column, name).as_py()
            info.clients[name] = int(table.column("line")[at].as_py())


def _choose_clients(
    rows: _Rows, clients: TraceClients, first_session: int, sizes: Sequence[int] | np.ndarray
) -> _Rows:
    """``rows`` (sessions ``first_session, …`` of ``sizes`` rows each, in replay order) with
    the rows that name no client (none, null or empty) given the one ``clients`` picks; a
    row's own client is kept."""
    picks = clients.picks(first_session, sizes)
    names = pa.array(clients.names, pa.string())
    chosen = pa.DictionaryArray.from_arrays(from_numpy(picks.astype(np.int32)), names)
    chosen = chosen.cast(pa.string())
    if "client" not in rows.schema.names:
        return rows.append_column("client", chosen)
    own = rows.column("client")
    named = pc.fill_null(pc.not_equal(own, ""), False)
    at = rows.schema.get_field_index("client")
    return rows.set_column(at, "client", pc.if_else(named, own, chosen))


def _emit(tables: list[pa.Table], info: PreparedTrace, split: bool = False) -> Iterator[pa.Table]:
    """One row group of whole sessions (``split``: rows are sessions, cut every
    ``ROW_GROUP_ROWS`` rows)."""
    table = pa.concat_tables(tables).combine_chunks()
    step = ROW_GROUP_ROWS if split else max(1, table.num_rows)
    _note_clients(info, table)
    if info.images_line is None and table.column("images").null_count < table.num_rows:
        at = int(pc.index(pc.is_valid(table.column("images")), True).as_py())
        info.images_line = int(table.column("line")[at].as_py())
    for offset in range(0, table.num_rows, step):
        part = table.slice(offset, step)
        info.group_sessions.append(int(part.column("session")[0].as_py()))
        yield part


def _grouped(
    flavor: TraceFlavor,
    first: pa.RecordBatch,
    rest: Iterator[pa.RecordBatch],
    info: PreparedTrace,
    limit: ContextLimit | None,
    clients: TraceClients | None = None,
) -> Iterator[pa.Table]:
    """Rows grouped by session key: gathered, ordered, linked per session, written in groups;
    ``clients`` chooses the client of rows naming none, before the fit (a linear chat's rows
    in file order, a linked session's in its nodes' order)."""
    batches = [first]
    keyed = _first_line(first, grouped=True)  # (the first batch has one: it is grouped)
    _mixed_group(flavor, first, grouped=True, other=keyed)
    for batch in rest:
        _mixed_group(flavor, batch, grouped=True, other=keyed)
        batches.append(batch)
    table = pa.Table.from_batches(batches)
    del batches
    n = table.num_rows
    codes_array = pc.dictionary_encode(table.column("group")).combine_chunks()
    codes = numbers(codes_array.indices, np.int64)
    groups = len(codes_array.dictionary)
    order_in_file = np.arange(n, dtype=np.int64)
    first_seen = np.full(groups, n, dtype=np.int64)
    np.minimum.at(first_seen, codes, order_in_file)
    ts = numbers(table.column("ts"), np.float64, np.nan)
    start = np.full(groups, np.nan)
    np.fmin.at(start, codes, ts)
    if not np.isnan(start).all():
        info.has_timestamps = True
    # replay order: by start (untimed last), then by first appearance
    rank_key = np.lexsort((first_seen, np.where(np.isnan(start), np.inf, start)))
    rank = np.empty(groups, dtype=np.int64)
    rank[rank_key] = np.arange(groups)
    row_order = np.lexsort((order_in_file, rank[codes]))
    table = table.take(from_numpy(row_order))
    session_of_row = rank[codes][row_order]
    row_start = start[codes][row_order]
    del codes, order_in_file, ts
    bounds = np.flatnonzero(np.diff(session_of_row)) + 1
    bounds = np.concatenate([[0], bounds, [n]]).astype(np.int64)
    untimed = np.flatnonzero(np.isnan(row_start[bounds[:-1]]))
    if untimed.size and info.has_timestamps:
        info.untimed_line = int(table.column("line")[int(bounds[untimed[0]])].as_py())
    if type(flavor).link is TraceFlavor.link:  # linear chats: all sessions at once
        if clients is not None:
            table = _choose_clients(table, clients, 0, np.diff(bounds))
        yield from _linear_sessions(table, bounds, row_start, info, limit)
        return
    pending: list[pa.Table] = []
    pending_rows = 0
    for s in range(len(bounds) - 1):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        session = table.slice(lo, hi - lo)
        ok = _servable(session)
        if not ok.all():
            lines = numbers(session.column("line"), np.int64)
            _note_unservable(info, lines[~ok], 1)
            info.unservable_rows += int(ok.sum())  # the session's other rows go with it
            continue
        linked = flavor.link(session)
        m = linked.num_rows
        if clients is not None:
            linked = _choose_clients(linked, clients, s, [m])
        prompt_col = pc.cast(linked.column("prompt_tokens"), pa.int32())
        output_col = pc.cast(linked.column("output_tokens"), pa.int32())
        if limit is not None:
            prompt = prompt_col.to_pylist()
            output = output_col.to_pylist()
            owners = limit.row_clients(linked)
            windows = limit.windows(owners).tolist() if limit.clients else None
            over: list[int] = []
            fits, clipped = fit_session(
                prompt,
                output,
                linked.column("history").to_pylist(),
                _fixed(linked).tolist(),
                limit,
                _tools(linked),
                _merged(linked),
                windows,
                over,
            )
            if windows is not None:
                reason = "truncated" if fits else "oversized"
                _note_windows(info, limit, reason, owners[over[-1:] if not fits else over])
            if not fits:
                lines = numbers(linked.column("line"), np.int64)
                _note_oversized(info, lines[:1], 1, m)
                continue
            if clipped:
                info.truncated_rows += clipped
                prompt_col = pa.array(prompt, pa.int32())
                output_col = pa.array(output, pa.int32())
        out = pa.Table.from_arrays(
            [
                from_numpy(np.full(m, info.sessions, dtype=np.int64)),
                linked.column("line"),
                from_numpy(np.full(m, row_start[lo])),
                prompt_col,
                output_col,
                *_content(linked),
                linked.column("parents"),
                linked.column("history"),
                linked.column("wait"),
                pc.cast(linked.column("ts"), pa.float64()),
            ],
            schema=CANONICAL,
        )
        _note_start(info, float(row_start[lo]))
        info.sessions += 1
        info.rows += m
        pending.append(out)
        pending_rows += m
        if pending_rows >= ROW_GROUP_ROWS:
            yield from _emit(pending, info)
            pending, pending_rows = [], 0
    if pending:
        yield from _emit(pending, info)


def _note_start(info: PreparedTrace, start: float) -> None:
    if not np.isnan(start):
        if info.first_start is None:
            info.first_start = start
        info.last_start = start


def _linear_sessions(
    table: pa.Table,
    bounds: np.ndarray,
    row_start: np.ndarray,
    info: PreparedTrace,
    limit: ContextLimit | None,
) -> Iterator[pa.Table]:
    """Every session a linear chat in file order, linked with numpy over the whole table
    (a Python step per session costs ~0.1 ms: minutes for millions of chats)."""
    firsts = bounds[:-1]
    ok_row = _servable(table)
    ok_session = np.minimum.reduceat(ok_row.astype(np.int8), firsts).astype(np.bool_)
    sizes = np.diff(bounds)
    keep = np.repeat(ok_session, sizes)
    if not keep.all():
        lines = numbers(table.column("line"), np.int64)
        _note_unservable(info, lines[~ok_row], int((~ok_session).sum()))
        info.unservable_rows += int((~keep & ok_row).sum())  # their sessions' other rows
        table = table.filter(from_bools(keep))
        row_start = row_start[keep]
        sizes = sizes[ok_session]
    n = table.num_rows
    if n == 0:
        return
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    prompt_col = pc.cast(table.column("prompt_tokens"), pa.int32())
    output_col = pc.cast(table.column("output_tokens"), pa.int32())
    if limit is not None:
        table, row_start, sizes, prompt_col, output_col = _fit_linear(
            table, row_start, sizes, firsts, info, limit
        )
        n = table.num_rows
        if n == 0:
            return
        firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    session = np.repeat(np.arange(info.sessions, info.sessions + len(sizes)), sizes)
    local = np.arange(n, dtype=np.int64) - np.repeat(firsts, sizes)
    has_parent = local > 0
    offsets = np.concatenate([[0], np.cumsum(has_parent)]).astype(np.int32)
    parents = pa.ListArray.from_arrays(
        from_numpy(offsets), from_numpy((local[has_parent] - 1).astype(np.int32))
    )
    history = pa.Array.from_buffers(
        pa.int32(),
        n,
        [
            pa.py_buffer(np.packbits(has_parent, bitorder="little")),
            pa.py_buffer((local - 1).astype(np.int32)),
        ],
    )
    full = pa.Table.from_arrays(
        [
            from_numpy(session.astype(np.int64)),
            table.column("line"),
            from_numpy(row_start.astype(np.float64)),
            prompt_col,
            output_col,
            *_content(table),
            parents,
            history,
            from_numpy(np.zeros(n)),
            pc.cast(table.column("ts"), pa.float64()),
        ],
        schema=CANONICAL,
    )
    starts = row_start[firsts]
    timed = starts[~np.isnan(starts)]
    if timed.size:
        _note_start(info, float(timed[0]))
        _note_start(info, float(timed[-1]))
    info.sessions += len(sizes)
    info.rows += n
    # row groups of whole sessions, ~ROW_GROUP_ROWS rows each
    at = np.searchsorted(firsts, np.arange(0, n, ROW_GROUP_ROWS))
    cuts = np.unique(np.concatenate([[0], firsts[at[at < len(firsts)]]]))
    edges = [*cuts.tolist(), n]
    for lo, hi in itertools.pairwise(edges):
        yield from _emit([full.slice(lo, hi - lo)], info)


def _fit_linear(
    table: pa.Table,
    row_start: np.ndarray,
    sizes: np.ndarray,
    firsts: np.ndarray,
    info: PreparedTrace,
    limit: ContextLimit,
) -> tuple[pa.Table, np.ndarray, np.ndarray, pa.Array, pa.Array]:
    """Linear chats fitted into ``limit`` (``fit.py``): the kept rows, their starts, the
    chats' sizes and the (clipped) lengths."""
    prompt = numbers(table.column("prompt_tokens"), np.int64)
    output = numbers(table.column("output_tokens"), np.int64)
    owners = limit.row_clients(table)
    windows = limit.windows(owners) if limit.clients else None
    over = linear_contexts(prompt, output, firsts) > (limit.tokens if windows is None else windows)
    chat = np.repeat(np.arange(len(sizes)), sizes)
    bad_chats = np.unique(chat[over])
    keep_chat = np.ones(len(sizes), dtype=np.bool_)
    if bad_chats.size:
        fixed = _fixed(table)
        lines = numbers(table.column("line"), np.int64)
        for c in bad_chats.tolist():
            lo, hi = int(firsts[c]), int(firsts[c]) + int(sizes[c])
            p, o = prompt[lo:hi].tolist(), output[lo:hi].tolist()
            history: list[int | None] = [None, *range(hi - lo - 1)]
            own = None if windows is None else windows[lo:hi].tolist()
            seen: list[int] = []
            fits, clipped = fit_session(
                p, o, history, fixed[lo:hi].tolist(), limit, windows=own, over=seen
            )
            if own is not None:
                reason = "truncated" if fits else "oversized"
                _note_windows(info, limit, reason, owners[lo:hi][seen if fits else seen[-1:]])
            if fits:
                prompt[lo:hi], output[lo:hi] = p, o
                info.truncated_rows += clipped
            else:
                keep_chat[c] = False
                first_over = lo + int(np.flatnonzero(over[lo:hi])[0])
                _note_oversized(info, lines[first_over : first_over + 1], 1, hi - lo)
    keep = np.repeat(keep_chat, sizes)
    if not keep.all():
        table = table.filter(from_bools(keep))
        row_start, prompt, output = row_start[keep], prompt[keep], output[keep]
        sizes = sizes[keep_chat]
    return (
        table,
        row_start,
        sizes,
        from_numpy(prompt.astype(np.int32)),
        from_numpy(output.astype(np.int32)),
    )


def staged_schema(flavor: TraceFlavor) -> pa.Schema:
    """The schema a flavor's ``stage`` returns (``STAGED`` plus its extra columns)."""
    schema = STAGED
    for name, kind in flavor.extra:
        schema = schema.append(pa.field(name, kind))
    return schema


def describe_settings(settings: dict[str, Any]) -> str:
    return json.dumps(settings, sort_keys=True)
