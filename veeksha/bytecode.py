"""veeksha's own bytecode, compiled once and read by every process of later runs.

Python writes no bytecode when ``PYTHONDONTWRITEBYTECODE`` is set (as on many CI machines and
containers), and pip compiles only regular installs, not editable ones. Then every process of a
run (main, simulator, workers, server watch) compiles veeksha's modules from source when it
starts: about 0.3 CPU-s each, a third of a short run's CPU. Python still *reads* bytecode that
exists and matches its source. So after a run has written its results, :func:`warm` compiles the
modules of veeksha's own package whose bytecode is missing or stale, into the package's
``__pycache__`` folders (where a regular install keeps them); nothing outside the package is
touched, a read-only install is left as it is, and ``VEEKSHA_BYTECODE_CACHE=0`` turns it off.
When every module is fresh it costs one ``stat`` per module.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["ENV_SWITCH", "warm"]

ENV_SWITCH = "VEEKSHA_BYTECODE_CACHE"


def warm() -> None:
    """Compile veeksha's modules whose bytecode is missing or stale (see the module docstring)."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return
    import compileall

    package = Path(__file__).resolve().parent
    with contextlib.suppress(OSError):
        compileall.compile_dir(package, quiet=2, workers=1)
