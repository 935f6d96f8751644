"""The overhead of a sweep point: what each point costs beyond its own traffic.

    python -m benchmarks.sweep_overhead [--points 5] [--seconds 1] [--repeats 3] [--no-append]

Runs ``veeksha run -q --no-plots`` of a sweep of tiny points (``!expand`` over a fixed interval,
each point sending for ``--seconds``, ``benchmark_timeout``) and measures from outside the
wall time and the CPU seconds of the whole process tree (start-up, every point's set-up, traffic
and evaluation, the sweep's table). Per point:

- overhead wall = (sweep wall - the points' own traffic time) / points, the traffic time being
  each point's measured window (summary.json ``throughput.window_s``);
- CPU per point = tree CPU / points (the built-in simulator included when it is in the tree);
- from each point's run.log: set-up (its first line to t0), evaluation (the traffic's stop to
  the run's end) and the gap before the next point (this point's end to the next one's first
  line: the simulator's stop, the next folder, loading), medians over the points.

Three targets: the built-in simulator (spawned and stopped by every point, as `veeksha run` does
today), one external simulator shared by all points (``client.api_base``: what one server
lifecycle per group of points would give), and the simulator as a managed server
(``server.type: veeksha_sim``: started once for the sweep under its supervisor, scraped).
Then ``veeksha report SWEEP_DIR`` (the table and the latency-throughput plot rebuilt) is
measured alone. Medians of ``--repeats``, min-max beside; the figures are appended to
BENCHMARKS.md with the machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import ROOT, Simulator, machine
from benchmarks.report import publish

_SCENARIO = """\
seed: 1
traffic_scheduler:
  type: rate
  interval_generator: {{type: fixed, interval: !expand {intervals}}}
session_generator:
  type: synthetic
  session_graph: {{type: single_request}}
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 32}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 8}}}}}}
runtime: {{max_sessions: 100000, benchmark_timeout: {seconds}, num_workers: 1}}
simulator: {{ttft_ms: 2, itl_ms: 1}}
"""


def _measured(command: list[str]) -> tuple[float, float, int, str]:
    """Wall s, CPU s of the child tree, exit code and stderr of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, cwd=ROOT, env=env, timeout=900
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode, done.stderr[-2000:]


def _stamp(line: str) -> float:
    hours, minutes, seconds = line[:12].split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def _phases(run_logs: list[Path]) -> dict[str, float]:
    """Median set-up, evaluation and between-points seconds from the points' run.log stamps."""
    setup, evaluation, gaps = [], [], []
    previous_end = None
    for log in run_logs:
        lines = [line for line in log.read_text().splitlines() if line[:2].isdigit()]
        first = _stamp(lines[0])
        t0 = next(_stamp(x) for x in lines if " t0 = " in x)
        stop = next(_stamp(x) for x in lines if " stopping " in x)
        end = next(_stamp(x) for x in lines if " ended " in x)
        setup.append(t0 - first)
        evaluation.append(end - stop)
        if previous_end is not None:
            gaps.append(first - previous_end)
        previous_end = end
    return {
        "setup_s": statistics.median(setup),
        "evaluation_s": statistics.median(evaluation),
        "between_s": statistics.median(gaps) if gaps else 0.0,
    }


def _one(
    workdir: Path, points: int, seconds: float, api_base: str | None, managed: bool = False
) -> dict[str, float]:
    intervals = [round(0.05 / (i + 1), 5) for i in range(points)]
    spec = workdir / "sweep.yaml"
    spec.write_text(_SCENARIO.format(intervals=intervals, seconds=seconds), encoding="utf-8")
    out = workdir / "out"
    command = [sys.executable, "-m", "veeksha.cli", "run", str(spec), "-q", "--no-plots"]
    command += ["--output-dir", str(out)]
    if api_base is not None:
        command += ["--set", f"client.api_base={api_base}", "--set", "client.model=veeksha-sim"]
    if managed:
        command += ["--set", "server.type=veeksha_sim"]
    wall, cpu, code, stderr = _measured(command)
    if code not in (0, 4):
        raise SystemExit(f"the sweep failed (exit {code}): {stderr}")
    (sweep_dir,) = out.glob("sweep-*")
    traffic = 0.0
    folders = sorted(p for p in sweep_dir.iterdir() if (p / "summary.json").is_file())
    for point in folders:
        summary = json.loads((point / "summary.json").read_text())
        window = summary["run"].get("measured_window") or [0.0, 0.0]
        traffic += window[1] - window[0]
    report = [sys.executable, "-m", "veeksha.cli", "report", str(sweep_dir), "-q"]
    report_wall, report_cpu, code, stderr = _measured(report)
    if code != 0:
        raise SystemExit(f"veeksha report failed (exit {code}): {stderr}")
    return {
        "wall_s": wall,
        "traffic_s": traffic,
        "overhead_wall_s_per_point": (wall - traffic) / points,
        "cpu_s_per_point": cpu / points,
        "report_wall_s": report_wall,
        "report_cpu_s": report_cpu,
        **_phases([p / "run.log" for p in folders]),
    }


def _median(samples: list[dict[str, float]], key: str) -> str:
    values = [s[key] for s in samples]
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    """Measure, print, append to BENCHMARKS.md (unless --no-append)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep_overhead")
    parser.add_argument("--points", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0, help="traffic per point")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {"built-in": [], "external": [], "managed": []}
    with tempfile.TemporaryDirectory(prefix="veeksha-sweep-") as tmp, Simulator() as sim:
        for rep in range(args.repeats):
            order = list(results) if rep % 2 == 0 else list(reversed(results))
            for target in order:
                workdir = Path(tmp) / f"{target}-{rep}"
                workdir.mkdir()
                api_base = sim.base_url if target == "external" else None
                sample = _one(workdir, args.points, args.seconds, api_base, target == "managed")
                results[target].append(sample)
                print(target, rep, json.dumps(results[target][-1]), flush=True)
    where = machine()
    command = " ".join(["python -m benchmarks.sweep_overhead", *(argv or sys.argv[1:])])
    lines = [
        f"## Sweep point overhead — {where.date}",
        "",
        f"{where.line()} Command: `{command}`.",
        f"A sweep of {args.points} tiny points (`!expand` over a fixed interval, each point "
        f"sending for {args.seconds:g} s), `veeksha run -q --no-plots`, measured from outside; "
        "per point: (sweep wall - the points' measured windows) / points, and the tree's CPU / "
        "points. `report` = `veeksha report SWEEP_DIR` (table and plot rebuilt). Median of "
        f"{args.repeats} (min-max); the load average during the runs: {os.getloadavg()[0]:.1f}.",
        "",
        "| target | overhead wall per point (s) | CPU per point (CPU-s) | set-up (s) "
        "| evaluation (s) | between points (s) | sweep wall (s) | traffic (s) "
        "| report wall (s) | report CPU (CPU-s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for target, samples in results.items():
        lines.append(
            f"| {target} simulator | {_median(samples, 'overhead_wall_s_per_point')} "
            f"| {_median(samples, 'cpu_s_per_point')} | {_median(samples, 'setup_s')} "
            f"| {_median(samples, 'evaluation_s')} | {_median(samples, 'between_s')} "
            f"| {_median(samples, 'wall_s')} "
            f"| {_median(samples, 'traffic_s')} | {_median(samples, 'report_wall_s')} "
            f"| {_median(samples, 'report_cpu_s')} |"
        )
    text = "\n".join(lines) + "\n"
    return publish(text, not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
