"""``veeksha report`` on a run folder whose Parquet file was cut short (a copy that stopped, a
disk that filled) or emptied: exit 2 and one line naming the file, never a traceback."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.cli import main
from veeksha.scenario.loader import load_scenario_text

SCENARIO = """
seed: 4
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator:
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 5, num_workers: 1}
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("damaged") / "run"
    run_as_the_command(load_scenario_text(SCENARIO, "s.yaml"), folder, quiet=True, plots=False)
    return folder


@pytest.mark.parametrize(
    ("name", "size", "why"),
    [
        ("requests.parquet", 100, "Parquet magic bytes not found in footer"),
        ("requests.parquet", 0, "Parquet file size is 0 bytes"),
        ("sessions.parquet", 100, "Parquet magic bytes not found in footer"),
        ("server_metrics.parquet", 100, "Parquet magic bytes not found in footer"),
    ],
)
def test_a_damaged_file_is_exit_2_naming_it(
    run_dir: Path, tmp_path: Path, name: str, size: int, why: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    with (copy / name).open("r+b") as file:
        file.truncate(size)
    collecting = gc.isenabled()  # (the command line turns the collector off for its set-up)
    try:
        result = CliRunner().invoke(main, ["report", str(copy), "--no-plots", "-q"])
    finally:
        if collecting:
            gc.enable()
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    assert result.output.startswith(f"error: {copy / name}: not a readable Parquet file ({why}")
    assert "the run folder is damaged" in result.output
