"""veeksha's own bytecode, compiled once and read by every process of later runs.

Python writes no bytecode when ``PYTHONDONTWRITEBYTECODE`` is set (as on many CI machines and
containers), and pip compiles only regular installs, not editable ones. Then every process of a
run (main, simulator, workers, server watch) compiles veeksha's modules from source when it
starts: about 0.3 CPU-s each, a third of a short run's CPU. Python still *reads* bytecode that
exists and matches its source. So after a run has written its results, :func:`warm` compiles the
modules of veeksha's own package whose bytecode is missing or stale, into the package's
``__pycache__`` folders (where a regular install keeps them); nothing outside the package is
touched, a read-only install is left as it is, and ``VEEKSHA_BYTECODE_CACHE=0`` turns it off.
When every module is fresh it costs one ``stat`` and one 12-byte read per module, checked
here as ``compileall`` checks them (without importing it: ~9 ms, twice the check's cost).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import struct
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ENV_SWITCH", "warm"]

ENV_SWITCH = "VEEKSHA_BYTECODE_CACHE"


def warm() -> None:
    """Compile veeksha's modules whose bytecode is missing or stale (see the module docstring)."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return
    package = Path(__file__).resolve().parent
    if all_fresh(package):
        return
    import compileall

    with contextlib.suppress(OSError):
        compileall.compile_dir(package, quiet=2, workers=1)


def all_fresh(package: Path) -> bool:
    """Whether every module under ``package`` has the bytecode ``compileall`` would leave as it
    is: its cache file starts with this interpreter's magic number, flags 0 (a timestamp) and
    the source's modification time."""
    head = struct.Struct("<4sLL")
    magic = importlib.util.MAGIC_NUMBER
    try:
        for source in _sources(str(package)):
            expect = head.pack(magic, 0, int(os.stat(source).st_mtime) & 0xFFFF_FFFF)
            # (os.open, not open(): no file object, no buffer, no isatty and seek calls; this
            # runs at the end of every run, after its results are written: ~2 ms less of it)
            fd = os.open(importlib.util.cache_from_source(source), os.O_RDONLY | os.O_CLOEXEC)
            try:
                if os.read(fd, 12) != expect:
                    return False
            finally:
                os.close(fd)
    except OSError:  # (no cache file: compileall writes it, or says nothing if it cannot)
        return False
    return True


def _sources(folder: str) -> Iterator[str]:
    """The ``.py`` files under ``folder``, as ``compileall.compile_dir`` walks them."""
    with os.scandir(folder) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name == "__pycache__":
                continue
            if entry.is_dir(follow_symlinks=True) and not entry.is_symlink():
                yield from _sources(entry.path)
            elif not entry.is_dir() and entry.name.endswith(".py"):
                yield entry.path
