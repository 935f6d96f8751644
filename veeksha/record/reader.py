"""Read a run's results, finalised or partial (a killed run leaves only ``parts/``).

``load_requests``/``load_sessions`` return pyarrow tables typed by ``veeksha.record.columns``
(``.to_pandas()`` for a DataFrame); ``read_metadata`` the run's key-value metadata, with
``"partial": "true"`` when the files were never finalised. ``veeksha report`` builds on these.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from veeksha.errors import ConfigurationError
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.parquet import PARTS_DIR, REQUESTS_FILE, SESSIONS_FILE, read_table

__all__ = ["is_partial", "load_requests", "load_sessions", "read_metadata"]

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
