"""A process that runs one point after another (a sweep, a capacity search, a microbenchmark,
``--repeats``) keeps one thread, so every point forks its helpers (``veeksha.forked``) as a
single ``veeksha run`` does: no read of a point's files (its evaluation with plots, the result
writer's merge, a capacity probe's sample, a microbenchmark point's rows) starts Arrow's thread
pools, whose threads would stay for the process' life. Run in a fresh interpreter: the test's
own process has threads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import sys
from pathlib import Path

from veeksha.cli import set_library_defaults

set_library_defaults()  # (as `veeksha run`: no BLAS threads)
from veeksha.experiment.capacity.probe import read_probe_sample
from veeksha.experiment.microbench.points import load_rows
from veeksha.experiment.point import run_point
from veeksha.forked import single_threaded
from veeksha.scenario.loader import load_scenario_text

SCENARIO = '''
seed: 2
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 6, num_workers: 1}
simulator: {ttft_ms: 2, itl_ms: 1}
evaluators:
  - type: performance
    slos: [{name: ttfc, metric: ttfc, percentile: 0.9, value: 1.0}]
'''
scenario = load_scenario_text(SCENARIO, "point.yaml")
(slo,) = scenario.evaluators[0].slos
print("before", single_threaded())
for point in range(2):
    result = run_point(scenario, Path(sys.argv[1]) / str(point), quiet=True, plots=True)
    sample = read_probe_sample(result.run_dir, [slo])
    rows = load_rows(result.run_dir)
    print("point", point, result.exit_code, len(sample.values[0]), len(rows), single_threaded())
"""


def test_points_run_one_after_another_each_fork_their_helpers(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:3] == [
        "before True",
        "point 0 0 6 6 True",  # (its 6 requests' TTFCs sampled, its 6 rows, one thread still)
        "point 1 0 6 6 True",
    ], done.stdout + done.stderr[-2000:]
    for point in ("0", "1"):
        (log,) = (tmp_path / point).glob("*/run.log")
        assert "(forked from this process)" in log.read_text(), point
