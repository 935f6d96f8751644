"""What a shard sends the driver while it runs, and the driver's local copy of its folder.

No Ray here: the shard actor (``shard.py``) builds :class:`Pull` objects from its run folder,
the driver (``driver.py``) applies them to a :class:`LocalCopy`. A pull carries the Parquet
parts written since the previous pull (a part is renamed into place whole, so a visible part is
complete and never changes), the trace lines appended since then (whole lines only) and, at the
end, every other file of the folder. The copy is then what the shard had, up to its last pull:
exactly what a lost shard leaves.

Worked example: a shard wrote ``parts/requests/part-000001.parquet`` and 3 trace lines; pull 1
carries both. It then writes part 2 and 2 lines: pull 2 carries part 2 and the 2 lines (the
trace offset moved past the first 3). The run ends, the shard merges its parts into
``requests.parquet`` and deletes them: the last pull (``final=True``) carries the final files,
and the copy drops its parts, so it holds a finished run folder.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LocalCopy", "Pull", "ShardFiles", "pending_work"]

PARTS_DIR = "parts"
TRACE_FILE = "trace.jsonl"
REQUESTS_FILE = "requests.parquet"


@dataclass
class Pull:
    """One answer of a shard to the driver's pull.

    ``files``: relative path → bytes (new parts; with ``final``, every file of the folder);
    ``trace``: trace.jsonl bytes appended since the previous pull, whole lines; ``snapshot``:
    the engine's latest ``RunProbe`` snapshot (in flight, next session, t0); ``running``:
    whether the shard's engine process still runs; ``outcome``: what its run returned (once
    ended: ``interrupted``, ``stop_reason``, ``returncode``...).
    """

    files: dict[str, bytes] = field(default_factory=dict)
    trace: bytes = b""
    running: bool = True
    final: bool = False
    outcome: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None  # the run's latest RunProbe snapshot, if new


class ShardFiles:
    """The shard side: what of its run folder was not yet sent (``next_pull``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._sent: set[str] = set()
        self._trace_offset = 0

    def next_pull(self, *, final: bool = False) -> Pull:
        """New parts and trace lines; with ``final``, every file not yet sent as it is now."""
        pull = Pull(final=final)
        parts = self.folder / PARTS_DIR
        if parts.is_dir():
            for path in sorted(parts.glob("*/part-*.parquet")):
                name = path.relative_to(self.folder).as_posix()
                if name in self._sent:
                    continue
                try:
                    pull.files[name] = path.read_bytes()
                except FileNotFoundError:  # merged and deleted by the finishing engine
                    continue
                self._sent.add(name)
        pull.trace = self._trace_lines()
        if final:
            for path in sorted(self.folder.rglob("*")):
                name = path.relative_to(self.folder).as_posix()
                if path.is_file() and name != TRACE_FILE and name not in self._sent:
                    pull.files[name] = path.read_bytes()
                    self._sent.add(name)
        return pull

    def _trace_lines(self) -> bytes:
        path = self.folder / TRACE_FILE
        try:
            with path.open("rb") as file:
                file.seek(self._trace_offset)
                data = file.read()
        except FileNotFoundError:
            return b""
        end = data.rfind(b"\n") + 1  # whole lines only: the rest comes with the next pull
        self._trace_offset += end
        return data[:end]


class LocalCopy:
    """The driver side: a shard's folder, rebuilt from its pulls under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.pulls = 0
        self.outcome: dict[str, Any] | None = None
        self.snapshot: dict[str, Any] | None = None

    def apply(self, pull: Pull) -> None:
        """Write what ``pull`` carries. A final pull holding the merged ``requests.parquet``
        makes the parts pulled before redundant: they are removed (a finished run folder)."""
        self.pulls += 1
        if pull.final and REQUESTS_FILE in pull.files:
            shutil.rmtree(self.folder / PARTS_DIR, ignore_errors=True)
        for name, data in pull.files.items():
            path = self.folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        if pull.trace:
            with (self.folder / TRACE_FILE).open("ab") as file:
                file.write(pull.trace)
        if pull.outcome is not None:
            self.outcome = pull.outcome
        if pull.snapshot is not None:
            self.snapshot = pull.snapshot


def pending_work(folder: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """A shard's requests in flight and its started sessions, as far as its copy knows.

    In flight: the trace lines (dispatched requests) with no row in the copy's requests;
    started: every session with a trace line or a session row. Read only for a lost shard.
    """
    import pyarrow.parquet as pq

    answered: set[int] = set()
    started: set[int] = set()
    for table, column, into in (
        ("requests", "request_id", answered),
        ("sessions", "session_id", started),
    ):
        final = folder / f"{table}.parquet"
        paths = [final] if final.exists() else sorted(folder.glob(f"{PARTS_DIR}/{table}/*.parquet"))
        for path in paths:
            into.update(pq.read_table(path, columns=[column]).column(column).to_pylist())
    in_flight: list[dict[str, Any]] = []
    trace = folder / TRACE_FILE
    if trace.exists():
        with trace.open("rb") as file:
            for line in file:
                entry = json.loads(line)
                started.add(int(entry["session_id"]))
                if int(entry["request_id"]) not in answered:
                    in_flight.append(entry)
    return in_flight, sorted(started)
