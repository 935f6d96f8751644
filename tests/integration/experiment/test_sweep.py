"""Sweeps end to end through the real command line: `veeksha run` of an !expand file against the
built-in simulator, Ctrl-C (SIGINT) in the middle and --resume, `report` rebuilding the table and
`compare` of two sweeps.

Two sweeps are made once for the module: ``swept`` (3 points of ~1.5 s, interrupted during its
second point, then resumed) and ``dry`` (the same file with --dry-run: nothing is sent, so
comparing the two shows a known direction)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tests.integration.robustness.helpers import cli_env, run_in_process
from veeksha import cli

SWEEP = """
seed: 3
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: !expand [0.05, 0.025, 0.0125]}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  channels: [{type: text, body_length_generator: {type: fixed, value: 16}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 8, benchmark_timeout: 30, num_workers: 1}
simulator: {ttft_ms: 2, itl_ms: 1}
"""
INTERVALS = [0.05, 0.025, 0.0125]
LABELS = [f"{i:03d}-interval={v}" for i, v in enumerate(INTERVALS)]
_COMMAND = [sys.executable, "-m", "veeksha.cli"]
_LIMIT = 180  # "it did not hang"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=_LIMIT,
        check=False,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def _only_sweep(out: Path) -> Path:
    (found,) = out.glob("sweep-*")
    return found


def _wait_for(predicate: object, what: str) -> None:
    deadline = time.monotonic() + _LIMIT
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A sweep of 3 points of ~1.5 s each, SIGINT during the second point's traffic, resumed."""
    folder = tmp_path_factory.mktemp("interrupted")
    (folder / "sweep.yaml").write_text(SWEEP, encoding="utf-8")
    slower = ["--set", "runtime.max_sessions=1000", "--set", "runtime.benchmark_timeout=1.5"]
    proc = subprocess.Popen(
        [*_COMMAND, "run", "sweep.yaml", "--output-dir", "out", "--no-plots", *slower],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        out = folder / "out"
        _wait_for(lambda: list(out.glob("sweep-*")), "the sweep folder")
        sweep_dir = _only_sweep(out)
        second = sweep_dir / LABELS[1] / "run.log"
        _wait_for((sweep_dir / LABELS[0] / "summary.json").exists, "point 0's summary")
        _wait_for(lambda: second.exists() and "t0 =" in second.read_text(), "point 1's t0")
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=_LIMIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    table = pd.read_parquet(sweep_dir / "sweep.parquet")
    first_summary = sweep_dir / LABELS[0] / "summary.json"
    stamp = first_summary.stat().st_mtime_ns
    resumed = _run("run", "--resume", str(sweep_dir), "--no-plots", cwd=folder)
    return {
        "folder": folder,
        "dir": sweep_dir,
        "code": proc.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "table": table,
        "stamp": stamp,
        "resumed": resumed,
    }


@pytest.fixture(scope="module")
def dry(swept: dict[str, object]) -> Path:
    """The same sweep with --dry-run (no server, no plots), in this process: it is only the
    other side of the comparison (``swept`` is the command line's own process)."""
    folder = swept["folder"]
    assert isinstance(folder, Path)
    done = run_in_process(folder / "sweep.yaml", folder / "dry", "--dry-run")
    assert done.code == 0, done.output[-3000:]
    return _only_sweep(folder / "dry")


def test_a_sweep_writes_a_run_folder_per_point_and_a_table_of_their_summaries(
    swept: dict[str, object],
) -> None:
    sweep_dir = swept["dir"]
    assert isinstance(sweep_dir, Path)
    for label in LABELS[:2]:
        assert f"{label}: " in str(swept["stdout"])  # one progress line per point
    assert (sweep_dir / "sweep.yaml").read_text().count("!expand [0.05, 0.025, 0.0125]") == 1
    manifest = json.loads((sweep_dir / "sweep.json").read_text())
    assert [p["folder"] for p in manifest["points"]] == LABELS
    table = pd.read_parquet(sweep_dir / "sweep.parquet")
    assert table["interval"].tolist() == INTERVALS
    assert table["run_folder"].tolist() == LABELS
    assert table["status"].tolist() == ["complete"] * 3
    for _, row in table.iterrows():
        summary = json.loads((sweep_dir / row["run_folder"] / "summary.json").read_text())
        config = (sweep_dir / row["run_folder"] / "config.yaml").read_text()
        assert f"interval: {row['interval']}" in config
        assert row["requests_ok"] == summary["requests"]["ok"] > 0
        assert row["requests_per_s"] == summary["throughput"]["requests_per_s"]
        for metric in ("ttfc", "tpot", "e2e", "tbc"):
            for stat in ("p50", "p90", "p99"):
                assert row[f"{metric}_{stat}_s"] == summary["latency"][metric][stat]
        assert row["health"] == summary["health"]["verdict"]
        assert row["exit_code"] == 0  # (health_checks.strict is off: a FAIL is marked, exit 0)
    # the achieved rate follows the swept interval
    assert table["requests_per_s"].is_monotonic_increasing
    # every point's simulator and worker forked from the sweep's process, as a single run's
    # are (it read the points before in its own thread: no Arrow thread pool stayed)
    for label in LABELS:
        ready = [line for line in (sweep_dir / label / "run.log").read_text().splitlines()]
        assert any(
            "workers ready" in line and "(forked from this process)" in line for line in ready
        ), label
    assert not (sweep_dir / "plots").exists()  # (--no-plots: `veeksha report` draws them)


def test_report_rebuilds_the_table_and_plots_from_the_run_folders(
    swept: dict[str, object],
) -> None:
    sweep_dir = swept["dir"]
    assert isinstance(sweep_dir, Path)
    before = pd.read_parquet(sweep_dir / "sweep.parquet")
    (sweep_dir / "sweep.parquet").unlink()
    shown = CliRunner().invoke(cli.main, ["report", str(sweep_dir)], env={"COLUMNS": "80"})
    assert shown.exit_code == 0, shown.output
    assert "interval=0.025" in shown.stdout
    assert f"wrote {sweep_dir / 'sweep.parquet'}\n" in shown.stdout  # whole, on 80 columns too
    pd.testing.assert_frame_equal(pd.read_parquet(sweep_dir / "sweep.parquet"), before)
    assert (sweep_dir / "plots" / "latency_throughput.png").stat().st_size > 10_000


def test_sigint_keeps_the_finished_points_and_resume_runs_the_rest(
    swept: dict[str, object],
) -> None:
    interrupted = swept
    sweep_dir = interrupted["dir"]
    assert isinstance(sweep_dir, Path)
    assert interrupted["code"] == 3, interrupted["stderr"]
    assert "Traceback" not in str(interrupted["stderr"])
    assert f"veeksha run --resume out/{sweep_dir.name}" in str(interrupted["stderr"])
    table = interrupted["table"]
    assert isinstance(table, pd.DataFrame)
    assert table["status"].tolist() == ["complete", "interrupted", "not_run"]
    # the interrupted point wrote and evaluated what it had, as a run does
    assert table["requests_ok"][1] > 0
    resumed = interrupted["resumed"]
    assert isinstance(resumed, subprocess.CompletedProcess)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"[1/3] {LABELS[0]}: complete, kept" in resumed.stdout
    assert (sweep_dir / LABELS[0] / "summary.json").stat().st_mtime_ns == interrupted["stamp"]
    assert [p.name for p in (sweep_dir / "superseded").iterdir()] == [f"{LABELS[1]}-1"]
    after = pd.read_parquet(sweep_dir / "sweep.parquet")
    assert after["status"].tolist() == ["complete"] * 3
    assert after["window_s"].tolist() == pytest.approx([1.5] * 3, abs=0.4)  # each point whole


def test_compare_draws_both_sweeps_and_tabulates_changes_at_matching_values(
    swept: dict[str, object], dry: Path, tmp_path: Path
) -> None:
    first = swept["dir"]
    assert isinstance(first, Path)
    second = dry
    plot = tmp_path / "a-comparison-of-two-sweeps.png"  # (a path longer than 80 columns)
    runner = CliRunner()
    env = {"COLUMNS": "200"}
    shown = runner.invoke(
        cli.main, ["compare", str(first), str(second), "--plot", str(plot)], env=env
    )
    assert shown.exit_code == 0, shown.output
    assert plot.stat().st_size > 10_000
    assert "matched on interval" in shown.stdout
    from veeksha.experiment.sweep_compare import matched_changes

    changes = matched_changes(
        pd.read_parquet(first / "sweep.parquet"),
        pd.read_parquet(second / "sweep.parquet"),
        ["interval"],
    )
    assert [c["matched"] for c in changes] == [c["point"] for c in changes]
    # a dry run answers at once: TTFC falls by nearly all of it
    assert all(c["ttfc_p50_s"] < -0.5 for c in changes)
    # on an 80-column terminal the tables stack, and the plot's path stays whole on its line
    # (a path cut across two lines cannot be copied)
    narrow = runner.invoke(
        cli.main, ["compare", str(first), str(second), "--plot", str(plot)], env={"COLUMNS": "80"}
    )
    assert narrow.exit_code == 0, narrow.output
    assert f"wrote {plot}\n" in narrow.stdout
    assert len(f"wrote {plot}") > 80  # (the case that was cut)
    mixed = runner.invoke(cli.main, ["compare", str(first), str(first / LABELS[0])])
    assert mixed.exit_code == 2
    assert "not both" in mixed.stderr


def test_a_point_that_cannot_start_is_recorded_and_the_sweep_exits_2(tmp_path: Path) -> None:
    (tmp_path / "one.yaml").write_text(
        SWEEP.replace("!expand [0.05, 0.025, 0.0125]", "!expand [1]")
    )
    unreachable = ["--set", "client.api_base=http://127.0.0.1:9/v1", "--set", "client.model=m"]
    done = _run("run", "one.yaml", "--output-dir", "out", "--no-plots", *unreachable, cwd=tmp_path)
    assert done.returncode == 2
    assert "[1/1] 000-interval=1: error: GET http://127.0.0.1:9/v1/models" in done.stderr
    assert "Traceback" not in done.stderr
    table = pd.read_parquet(_only_sweep(tmp_path / "out") / "sweep.parquet")
    assert table["status"].tolist() == ["error"]
    assert table["exit_code"].tolist() == [2]
    assert "Connection refused" in table["error"][0]


DRAINING = """
seed: 3
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: !expand [0.05, 0.04]}}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 100}}}
runtime: {max_sessions: -1, benchmark_timeout: 1, post_timeout_grace_seconds: 10, num_workers: 1}
simulator: {timing: fixed, ttft_ms: 10, itl_ms: 20}
"""


def test_ctrl_c_in_a_points_drain_after_its_timeout_stops_the_sweep(tmp_path: Path) -> None:
    # Each point stops at its timeout (1 s) with ~20 requests of 2 s in flight, then drains.
    # Ctrl-C there: was "the run was timeout", the point "aborted", and the sweep went on to
    # its next point as if nothing had been pressed.
    (tmp_path / "sweep.yaml").write_text(DRAINING, encoding="utf-8")
    proc = subprocess.Popen(
        [*_COMMAND, "run", "sweep.yaml", "--output-dir", "out", "--no-plots"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        out = tmp_path / "out"
        _wait_for(lambda: list(out.glob("sweep-*")), "the sweep folder")
        sweep_dir = _only_sweep(out)
        log = sweep_dir / "000-interval=0.05" / "run.log"
        _wait_for(lambda: log.exists() and "stopping (timeout)" in log.read_text(), "the drain")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=_LIMIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3, stderr
    assert "Traceback" not in stderr
    table = pd.read_parquet(sweep_dir / "sweep.parquet")
    assert table["status"].tolist() == ["interrupted", "not_run"]
    point = json.loads((sweep_dir / "000-interval=0.05" / "summary.json").read_text())
    assert (point["run"]["interrupted"], point["run"]["stop_reason"]) == (True, "interrupted")
    assert f"resume with: veeksha run --resume out/{sweep_dir.name}" in stderr
    assert "interrupted after the traffic stopped (timeout): the " in stderr, stderr


_SWEEP_KEY = "sweep-gateway-key-6d02b9"
GATEWAY_SWEEP = SWEEP.replace("[0.05, 0.025, 0.0125]", "[0.05, 0.025]").replace(
    "simulator: {ttft_ms: 2, itl_ms: 1}",
    f"simulator: {{ttft_ms: 2, itl_ms: 1, required_headers: {{X-Api-Key: {_SWEEP_KEY}}}}}\n"
    "client:\n  headers:\n    X-Api-Key: ${S21B_SWEEP_KEY}\n",
)


def test_a_sweeps_headers_are_read_before_its_first_point_and_sent_by_every_point(
    tmp_path: Path,
) -> None:
    """An unset ``${NAME}`` stops the sweep before any point (was: each point failed in turn,
    in a sweep folder of failed points); set, every point's requests carry it (the simulator
    answers 401 without it)."""
    path = tmp_path / "sweep.yaml"
    path.write_text(GATEWAY_SWEEP, encoding="utf-8")
    done = run_in_process(path, tmp_path / "unset", env=cli_env())
    assert done.code == 2, done.output[-3000:]
    line = GATEWAY_SWEEP[: GATEWAY_SWEEP.index("X-Api-Key: ${")].count("\n") + 1
    assert (
        f"{path}:{line}:5: client.headers.X-Api-Key: ${{S21B_SWEEP_KEY}} is not set (or is "
        "empty) in this environment"
    ) in done.output
    assert not list((tmp_path / "unset").iterdir())  # (no sweep folder, no point)
    done = run_in_process(path, tmp_path / "set", env=cli_env(S21B_SWEEP_KEY=_SWEEP_KEY))
    assert done.code == 0, done.output[-3000:]
    sweep_dir = _only_sweep(tmp_path / "set")
    points = sorted(p for p in sweep_dir.iterdir() if (p / "requests.parquet").exists())
    assert len(points) == 2
    for point in points:
        statuses = pd.read_parquet(point / "requests.parquet", columns=["status"])["status"]
        assert statuses.tolist() == ["ok"] * 8, point.name
