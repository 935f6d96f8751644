"""``veeksha run`` as a process (``veeksha.cli.entry``) ends without the interpreter's teardown:
its exit code, its output, its files and the atexit functions are those of a normal exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_SCENARIO = """
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.01}}
session_generator: {type: synthetic, session_graph: {type: single_request}}
runtime: {max_sessions: 3}
"""

# a module-level object freed only by the teardown, an atexit function run by both exits
_PROBE = """
import atexit, sys
from pathlib import Path
marks = Path(sys.argv.pop(1))
class Freed:
    def __del__(self):
        (marks / "teardown").write_text("ran")
kept = Freed()
atexit.register(lambda: (marks / "atexit").write_text("ran"))
sys.argv[0] = "veeksha"
from veeksha.cli import entry
entry()
"""


def _veeksha(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
        cwd=tmp_path,
    )


def test_a_run_ends_at_once_with_its_code_output_files_and_atexit(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(_SCENARIO)
    out = tmp_path / "out"
    proc = _veeksha(
        tmp_path, "run", str(scenario), "--dry-run", "--no-plots", "--output-dir", str(out)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "health" in proc.stderr.lower()  # (the report, written to stderr, flushed)
    (run_dir,) = out.iterdir()
    assert (run_dir / "summary.json").stat().st_size > 0
    assert (run_dir / "requests.parquet").exists()
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()  # ended at once: nothing was freed


def test_other_commands_and_failed_runs_exit_as_usual(tmp_path: Path) -> None:
    validate = _veeksha(tmp_path, "validate", str(tmp_path / "missing.yaml"))
    assert validate.returncode == 2
    assert (tmp_path / "teardown").read_text() == "ran"  # (validate: the usual teardown)
    (tmp_path / "teardown").unlink()
    bad = tmp_path / "bad.yaml"
    bad.write_text(_SCENARIO + "nonsense_key: 1\n")
    run = _veeksha(tmp_path, "run", str(bad), "--dry-run", "--output-dir", str(tmp_path / "o"))
    assert run.returncode == 2, run.stderr[-2000:]
    assert "nonsense_key" in run.stderr
    assert (tmp_path / "atexit").read_text() == "ran"
