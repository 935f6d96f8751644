"""veeksha compiles its own modules once when Python writes no bytecode (``veeksha.bytecode``):
after a run, its package holds fresh bytecode; ``VEEKSHA_BYTECODE_CACHE=0`` leaves none."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import veeksha

_SCENARIO = """
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator: {type: synthetic, session_graph: {type: single_request}}
runtime: {max_sessions: 3}
"""


def _run(tmp_path: Path, switch: str) -> Path:
    """A dry run by a copy of the package without bytecode; the copy's folder."""
    source = tmp_path / switch / "src"
    shutil.copytree(
        Path(veeksha.__file__).parent,
        source / "veeksha",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    scenario = tmp_path / switch / "s.yaml"
    scenario.write_text(_SCENARIO)
    env = {
        **os.environ,
        "PYTHONPATH": str(source),
        "PYTHONDONTWRITEBYTECODE": "1",
        "VEEKSHA_BYTECODE_CACHE": switch,
    }
    command = [sys.executable, "-m", "veeksha.cli", "run", str(scenario), "-q", "--no-plots"]
    proc = subprocess.run(
        [*command, "--dry-run", "--output-dir", str(tmp_path / switch / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return source / "veeksha"


@pytest.mark.parametrize("switch", ["1", "0"])
def test_a_run_leaves_veeksha_compiled_unless_switched_off(tmp_path: Path, switch: str) -> None:
    package = _run(tmp_path, switch)
    modules = sorted(package.rglob("*.py"))
    compiled = [m for m in modules if Path(importlib.util.cache_from_source(str(m))).exists()]
    if switch == "0":
        assert compiled == []
    else:
        assert compiled == modules  # every module, the ones the run never imported too
