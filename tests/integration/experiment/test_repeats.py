"""``veeksha run FILE --repeats N`` end to end against the built-in simulator: N runs of one
workload in a sweep folder, repeats.json's statistics equal to those of the runs' own
summaries, ``--vary-seed``'s other workloads, the resume's points and ``report``'s table."""

from __future__ import annotations

import functools
import json
import operator
import statistics
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from scipy import stats

from tests.integration.robustness.helpers import run_in_process
from veeksha import cli
from veeksha.experiment.sweep import load_sweep, point_folder

SCENARIO = """
seed: 3
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: 0.04}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  channels: [{type: text, body_length_generator: {type: uniform, min: 16, max: 400}}]
  output_spec: {text: {output_length_generator: {type: uniform, min: 2, max: 12}}}
runtime: {max_sessions: 10, benchmark_timeout: 30, num_workers: 1}
simulator: {ttft_ms: 3, itl_ms: 1}
"""


def _sweep(out: Path) -> Path:
    (found,) = out.glob("sweep-*")
    return found


def _workload(run_dir: Path) -> list[tuple[int, int, int]]:
    rows = pd.read_parquet(run_dir / "requests.parquet").sort_values("session_id")
    columns = ["session_id", "target_prompt_tokens", "requested_output_tokens"]
    return [tuple(int(v) for v in row) for row in rows[columns].itertuples(index=False)]


def test_three_repeats_of_one_workload_and_their_spread(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    done = run_in_process(path, tmp_path / "out", "--repeats", "3")
    assert done.code == 0, done.stderr
    sweep = _sweep(tmp_path / "out")
    folders = [sweep / f"{i:03d}-repeat={i + 1}" for i in range(3)]
    assert all((f / "summary.json").is_file() for f in folders)
    # the same seed: the same sessions, prompt and output lengths in every repeat
    workloads = [_workload(f) for f in folders]
    assert len(workloads[0]) == 10
    assert workloads[0] == workloads[1] == workloads[2]
    summaries = [json.loads((f / "summary.json").read_text()) for f in folders]
    data = json.loads((sweep / "repeats.json").read_text())
    assert data["repeats"] == 3
    assert data["confidence"] == 0.95
    (group,) = data["groups"]
    assert group["values"] == {}
    assert group["runs"] == 3
    assert group["of"] == 3
    for column, path_in in (
        ("requests_per_s", ("throughput", "requests_per_s")),
        ("ttfc_p99_s", ("latency", "ttfc", "p99")),
        ("e2e_p50_s", ("latency", "e2e", "p50")),
    ):
        values = [functools.reduce(operator.getitem, path_in, s) for s in summaries]
        metric = group["metrics"][column]
        assert metric["n"] == 3
        assert metric["mean"] == pytest.approx(statistics.fmean(values))
        assert metric["std"] == pytest.approx(statistics.stdev(values))
        half = stats.t.ppf(0.975, 2) * statistics.stdev(values) / 3**0.5
        assert metric["ci_high"] - metric["mean"] == pytest.approx(half)
        assert metric["min"] == min(values)
        assert metric["max"] == max(values)
    assert "repeats: 3 of 3 runs complete" in done.stdout
    assert "TTFC p99 (ms)" in done.stdout
    # --resume makes the same points again from the folder (sweep.yaml and sweep.json)
    points = load_sweep(sweep)
    assert [point_folder(p) for p in points.points] == [f.name for f in folders]
    report = CliRunner().invoke(cli.main, ["report", str(sweep), "--no-plots"])
    assert report.exit_code == 0, report.output
    assert "repeats: 3 of 3 runs complete" in report.output
    # compare of repeated runs: the means, their intervals and Welch's test (with itself: no
    # difference anywhere, p = 1)
    compared = CliRunner().invoke(cli.main, ["compare", str(sweep), str(sweep)])
    assert compared.exit_code == 0, compared.output
    ttfc = next(line for line in compared.output.splitlines() if "TTFC p99" in line)
    assert [cell.strip() for cell in ttfc.split("│")][-4:-1] == ["+0.0%", "1", "no"]


def test_vary_seed_gives_each_repeat_its_own_workload_after_a_cooldown(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    args = ("--repeats", "2", "--vary-seed", "--dry-run", "--cooldown", "0.5")
    done = run_in_process(path, tmp_path / "out", *args)
    assert done.code == 0, done.stderr
    sweep = _sweep(tmp_path / "out")
    first, second = (sweep / f"{i:03d}-repeat={i + 1}" for i in range(2))
    assert "cooling down 0.5 s before 001-repeat=2" in done.stdout
    starts = [
        datetime.fromisoformat(json.loads((f / "summary.json").read_text())["run"]["t0_wall_time"])
        for f in (first, second)
    ]
    # (the first's traffic, 10 sessions 40 ms apart, then the cooldown: a lower bound only)
    assert (starts[1] - starts[0]).total_seconds() >= 0.36 + 0.5
    assert "seed: 3\n" in (first / "config.yaml").read_text()
    assert "seed: 4\n" in (second / "config.yaml").read_text()
    assert _workload(first) != _workload(second)
    assert json.loads((sweep / "sweep.json").read_text())["repeats"]["vary_seed"] is True
    assert [point_folder(p) for p in load_sweep(sweep).points] == [first.name, second.name]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vary-seed"], "--vary-seed goes with --repeats N"),
        (["--repeats", "2", "--ray", "local"], "--repeats runs on this host only"),
        (["--repeats", "0"], "0 is not in the range"),
        (["--cooldown", "5"], "--cooldown goes with a sweep (!expand) or --repeats N"),
    ],
)
def test_what_repeats_cannot_do_is_refused(tmp_path: Path, args: list[str], message: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    done = CliRunner().invoke(cli.main, ["run", str(path), "--output-dir", str(tmp_path), *args])
    assert done.exit_code == 2
    assert message in done.output
    assert not list(tmp_path.glob("sweep-*"))
