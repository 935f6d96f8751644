"""The microbenchmark tests' way to call the command line and read what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from veeksha.cli import main


def invoke(*args: str) -> tuple[int, str]:
    """``veeksha ARGS`` in this process, without an ``OPENAI_API_BASE`` of the environment."""
    result = CliRunner().invoke(main, list(args), env={"OPENAI_API_BASE": None})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def results(base: Path, name: str) -> tuple[Path, dict]:
    """The one ``*-<name>`` result folder under ``base`` and its ``<name>_results.json``."""
    (folder,) = base.glob(f"*-{name}")
    return folder, json.loads((folder / f"{name}_results.json").read_text())
