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

The final pull carries at most ``chunk_bytes`` (8 MiB) of files inline; every other file (a
large ``requests.parquet``) is only named there with its size (``Pull.chunked``) and is then
read in pieces of ``chunk_bytes`` (``ShardFiles.read_chunk``), each appended to the copy as it
arrives (``LocalCopy.apply``'s ``fetch``): the driver holds one piece at a time, never a whole
file. E.g. a 20 MiB ``requests.parquet`` arrives as pieces of 8, 8 and 4 MiB, written to
``.requests.parquet.tmp`` and renamed into place once whole.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CHUNK_BYTES", "Fetch", "LocalCopy", "Pull", "ShardFiles"]

#: the largest piece of a file one Ray object carries (the final pull's inline files together
#: too): what the driver holds in memory per shard at once
CHUNK_BYTES = 8 * 1024 * 1024
#: reads ``length`` bytes of the shard's file ``name`` from ``offset`` (``ShardFiles.read_chunk``
#: on the shard, through the actor)
Fetch = Callable[[str, int, int], bytes]

PARTS_DIR = "parts"
TRACE_FILE = "trace.jsonl"
REQUESTS_FILE = "requests.parquet"


@dataclass
class Pull:
    """One answer of a shard to the driver's pull.

    ``files``: relative path → bytes (new parts; with ``final``, every file of the folder up to
    ``CHUNK_BYTES`` in all); ``chunked``: relative path → size, the final pull's files sent in
    pieces after it (``ShardFiles.read_chunk``);
    ``trace``: trace.jsonl bytes appended since the previous pull, whole lines; ``snapshot``:
    the engine's latest ``RunProbe`` snapshot (in flight, next session, t0); ``running``:
    whether the shard's engine process still runs; ``outcome``: what its run returned (once
    ended: ``interrupted``, ``stop_reason``, ``returncode``...); ``silent_s``: how long ago the
    running engine process last showed it was not frozen (``shard_process.HEARTBEAT_FILE``).
    """

    files: dict[str, bytes] = field(default_factory=dict)
    chunked: dict[str, int] = field(default_factory=dict)
    trace: bytes = b""
    running: bool = True
    final: bool = False
    outcome: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None  # the run's latest RunProbe snapshot, if new
    # seconds since the running engine process last beat (None: not running, or no beat yet)
    silent_s: float | None = None


class ShardFiles:
    """The shard side: what of its run folder was not yet sent (``next_pull``)."""

    def __init__(self, folder: Path, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.folder = folder
        self.chunk_bytes = chunk_bytes
        self._sent: set[str] = set()
        self._chunked: set[str] = set()
        self._trace_offset = 0

    def next_pull(self, *, final: bool = False) -> Pull:
        """New parts and trace lines; with ``final``, every file not yet sent as it is now
        (inline up to ``chunk_bytes`` in all, the others named in ``chunked``)."""
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
            inline = 0
            for path in sorted(self.folder.rglob("*")):
                name = path.relative_to(self.folder).as_posix()
                if not path.is_file() or name == TRACE_FILE or name in self._sent:
                    continue
                size = path.stat().st_size
                if inline + size <= self.chunk_bytes:
                    pull.files[name] = path.read_bytes()
                    inline += size
                else:
                    pull.chunked[name] = size
                    self._chunked.add(name)
                self._sent.add(name)
        return pull

    def read_chunk(self, name: str, offset: int, length: int) -> bytes:
        """Up to ``length`` (at most ``chunk_bytes``) bytes of a file the final pull named in
        ``chunked``, from ``offset``; no other file is served."""
        if name not in self._chunked:
            raise KeyError(f"{name!r} was not named by a final pull")
        with (self.folder / name).open("rb") as file:
            file.seek(offset)
            return file.read(min(length, self.chunk_bytes))

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
        self.chunks = 0  # pieces of chunked files fetched
        self.outcome: dict[str, Any] | None = None
        self.snapshot: dict[str, Any] | None = None

    def apply(self, pull: Pull, fetch: Fetch | None = None) -> None:
        """Write what ``pull`` carries; its ``chunked`` files piece by piece through ``fetch``
        (required when there are any). A final pull holding the merged ``requests.parquet``
        makes the parts pulled before redundant: they are removed (a finished run folder)."""
        if pull.chunked and fetch is None:
            raise ValueError("a pull with chunked files needs a fetch to read them")
        self.pulls += 1
        if pull.final and REQUESTS_FILE in (pull.files.keys() | pull.chunked.keys()):
            shutil.rmtree(self.folder / PARTS_DIR, ignore_errors=True)
        for name, data in pull.files.items():
            self._write(name, [data])
        for name, size in pull.chunked.items():
            assert fetch is not None
            self._write(name, self._pieces(fetch, name, size))
        if pull.trace:
            with (self.folder / TRACE_FILE).open("ab") as file:
                file.write(pull.trace)
        if pull.outcome is not None:
            self.outcome = pull.outcome
        if pull.snapshot is not None:
            self.snapshot = pull.snapshot

    def _pieces(self, fetch: Fetch, name: str, size: int) -> Iterator[bytes]:
        """The ``size`` bytes of ``name``, one fetched piece at a time."""
        offset = 0
        while offset < size:
            piece = fetch(name, offset, size - offset)
            if not piece:
                raise OSError(f"{name}: the shard's copy ended at byte {offset} of {size}")
            offset += len(piece)
            self.chunks += 1
            yield piece
            del piece  # (before the next fetch: one piece in memory at a time)

    def _write(self, name: str, pieces: Iterable[bytes]) -> None:
        """The file ``name`` from ``pieces``, renamed into place once whole."""
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with tmp.open("wb") as file:
            for piece in pieces:
                file.write(piece)
                del piece
        tmp.replace(path)
