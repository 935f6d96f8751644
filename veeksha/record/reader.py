"""Read a run's results, finalised or partial (a killed run leaves only ``parts/``).

``load_requests``/``load_sessions`` return pyarrow tables typed by ``veeksha.record.columns``
(``.to_pandas()`` for a DataFrame); ``read_metadata`` the run's key-value metadata, with
``"partial": "true"`` when the files were never finalised; ``pending_work`` the requests a folder's
trace.jsonl says were dispatched that have no row (in flight when a killed run or a lost shard
stopped). ``veeksha report`` builds on these.
"""

from __future__ import annotations

import json
import logging
import os
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from veeksha.errors import ConfigurationError
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.parquet import PARTS_DIR, REQUESTS_FILE, SESSIONS_FILE, read_table

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "TRACE_FILE",
    "is_partial",
    "load_requests",
    "load_sessions",
    "pending_work",
    "read_metadata",
]

TRACE_FILE = "trace.jsonl"

_log = logging.getLogger(__name__)


def _parts(run_dir: Path, name: str) -> list[Path]:
    return sorted((run_dir / PARTS_DIR / name).glob("part-*.parquet"))


def _check_run_dir(run_dir: Path) -> None:
    if not (run_dir / REQUESTS_FILE).exists() and not (run_dir / PARTS_DIR).is_dir():
        raise ConfigurationError(
            f"{run_dir} holds no veeksha results (neither {REQUESTS_FILE} nor {PARTS_DIR}/); "
            "pass a run folder"
        )


def _load(
    run_dir: str | os.PathLike[str],
    final: str,
    name: str,
    schema: pa.Schema,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    path = run_dir / final
    wanted = None if columns is None else list(columns)
    if wanted is not None:
        schema = pa.schema([schema.field(column) for column in wanted])
    if path.exists():
        return read_table(path, columns=wanted)
    tables = []
    for part in _parts(run_dir, name):
        try:
            tables.append(read_table(part, schema, wanted))
        except (OSError, pa.ArrowException) as exc:  # parts are renamed whole; be lenient anyway
            _log.warning("skipping unreadable result part %s: %s", part, exc)
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def load_requests(
    run_dir: str | os.PathLike[str], columns: Sequence[str] | None = None
) -> pa.Table:
    """requests.parquet of ``run_dir``, or the concatenated parts of an unfinished run.

    ``columns`` (names of REQUESTS_SCHEMA, in the order wanted) reads only those: a run's
    evaluation needs about two thirds of the columns and none of ``chunk_times``, the largest.
    """
    return _load(run_dir, REQUESTS_FILE, "requests", REQUESTS_SCHEMA, columns)


def load_sessions(run_dir: str | os.PathLike[str]) -> pa.Table:
    """sessions.parquet of ``run_dir``, or the concatenated parts of an unfinished run."""
    return _load(run_dir, SESSIONS_FILE, "sessions", SESSIONS_SCHEMA)


def is_partial(run_dir: str | os.PathLike[str]) -> bool:
    """True when the run's results were never finalised (killed, or still running)."""
    return not (Path(run_dir) / REQUESTS_FILE).exists()


def read_metadata(run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The run's key-value metadata (``parquet.METADATA_KEYS``); ``partial`` says whether the
    results were finalised."""
    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    candidates = (
        [run_dir / REQUESTS_FILE] if not is_partial(run_dir) else _parts(run_dir, "requests")
    )
    candidates += _parts(run_dir, "sessions")
    metadata: dict[str, str] = {}
    for path in candidates:
        try:
            raw = pq.read_schema(path).metadata or {}
        except (OSError, pa.ArrowException):
            continue
        metadata = {k.decode(): v.decode() for k, v in raw.items() if not k.startswith(b"ARROW:")}
        break
    metadata["partial"] = "true" if is_partial(run_dir) else "false"
    return metadata


def pending_work(folder: Path) -> tuple[list[dict[str, Any]], NDArray[np.int64]]:
    """The requests ``folder``'s trace says were dispatched that have no row, and its started
    sessions: what was in flight when its run stopped without its end (a killed run, a lost
    shard's copy), as far as the folder knows.

    In flight: the trace lines (dispatched requests) with no row in the folder's requests, in the
    trace's order; started: every session with a trace line or a session row, sorted. A killed
    run's trace may end in a line the kill tore (no newline): it is skipped (that request is
    unknown here, as are the last second's lines never written). The ids
    are held as arrays (8 bytes each, not a Python int in a set); the trace is read twice: for
    its ids (a decode of two keys a line), then for its lines in flight.
    """
    import numpy as np
    import pyarrow.parquet as pq

    def ids(table: str, column: str) -> NDArray[np.int64]:
        final = folder / f"{table}.parquet"
        paths = [final] if final.exists() else sorted(folder.glob(f"{PARTS_DIR}/{table}/*.parquet"))
        parts = [
            pq.read_table(path, columns=[column], use_threads=False).column(column).to_numpy()
            for path in paths
        ]
        return np.concatenate([np.zeros(0, np.int64), *parts]).astype(np.int64)

    answered, with_rows = ids("requests", "request_id"), ids("sessions", "session_id")
    trace = folder / TRACE_FILE
    if not trace.exists():
        return [], np.unique(with_rows)
    decode = msgspec.json.Decoder(_TraceIds).decode
    requests, sessions, lines = array("q"), array("q"), array("q")
    with trace.open("rb") as file:
        for number, line in enumerate(file):
            if not line.endswith(b"\n"):  # (torn by the kill: as ``trace.read_trace``)
                continue
            entry = decode(line)
            requests.append(entry.request_id)
            sessions.append(entry.session_id)
            lines.append(number)
    unanswered = ~np.isin(np.frombuffer(requests, np.int64), answered)
    wanted = set(np.frombuffer(lines, np.int64)[unanswered].tolist())  # (the few in flight)
    in_flight: list[dict[str, Any]] = []
    if wanted:
        with trace.open("rb") as file:
            in_flight = [json.loads(line) for i, line in enumerate(file) if i in wanted]
    started = np.unique(np.concatenate([with_rows, np.frombuffer(sessions, np.int64)]))
    return in_flight, started


class _TraceIds(msgspec.Struct):
    """The two keys of a trace line ``pending_work`` needs (the others are skipped)."""

    session_id: int
    request_id: int
