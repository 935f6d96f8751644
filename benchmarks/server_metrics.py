"""What scraping the server's metrics costs a run (``server_metrics:``, on by default).

    python -m benchmarks.server_metrics [--repeats 3] [--no-append]

- **parse**: CPU to parse one /metrics answer (``veeksha.server.scraper.parse_metrics``, the
  GIL hold the traffic can feel): the simulator's own answer, and one ten times its size (a
  vLLM with several models, or data-parallel engines);
- **runs**: the same scenario against the built-in simulator (single requests at 100/s, 1,500
  sessions), alternating ``server_metrics.enabled`` false / true (interval 1 s and 0.1 s): the
  main process' CPU seconds per 1,000 requests (the scraper thread included: ``process_time``
  counts every thread) and the p99 of the generator's delay (``latency.generator_delay``).

Medians of ``--repeats``; printed, and appended to BENCHMARKS.md with machine, date, commit.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import machine
from benchmarks.report import append
from veeksha.experiment.point import run_point
from veeksha.net import fetch
from veeksha.scenario.models import Scenario
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.server.scraper import parse_metrics
from veeksha.simulator.process import SimulatorProcess

_SCENARIO: dict[str, Any] = {
    "traffic_scheduler": {
        "type": "rate",
        "interval_generator": {"type": "fixed", "interval": 0.01},
    },
    "session_generator": {"type": "synthetic", "session_graph": {"type": "single_request"}},
    "runtime": {"max_sessions": 1500, "benchmark_timeout": 120, "num_workers": 1},
    "trace_recorder": {"enabled": False},
    "evaluators": [{"type": "performance", "stream_metrics": False}],
}
_MODES = {"off": {"enabled": False}, "1 s": {"interval": 1.0}, "0.1 s": {"interval": 0.1}}


def _parse_cpu_us(text: str, repeats: int = 200) -> float:
    parse_metrics(text)  # (the parser's import is not counted)
    cpu = time.process_time()
    for _ in range(repeats):
        parse_metrics(text)
    return (time.process_time() - cpu) / repeats * 1e6


def measure(repeats: int) -> dict[str, Any]:
    # (before the runs: a run pins this process to one CPU)
    out: dict[str, Any] = {"machine": machine().line()}
    with SimulatorProcess(SimulatorConfig()) as sim:
        fetch(
            "POST",
            sim.base_url + "/completions",
            json_body={"model": "veeksha-sim", "prompt": "hi"},
        )
        text = fetch("GET", sim.root_url + "/metrics").body.decode()
    out["lines"] = text.count("\n")
    out["parse_us"] = _parse_cpu_us(text)
    out["parse_10x_us"] = _parse_cpu_us(
        "".join(text.replace('model_name="', f'model_name="m{i}-') for i in range(10)), 50
    )
    rows: dict[str, list[tuple[float, float]]] = {mode: [] for mode in _MODES}
    with tempfile.TemporaryDirectory(prefix="veeksha-bench-") as tmp:
        for _ in range(repeats):
            for mode, settings in _MODES.items():
                scenario = Scenario.model_validate({**_SCENARIO, "server_metrics": settings})
                point = run_point(scenario, Path(tmp), quiet=True, plots=False)
                run = point.summary["run"]
                requests = point.summary["requests"]["total"]
                lag = point.summary["latency"]["generator_delay"]["p99"]
                rows[mode].append((run["main_cpu_s"] / requests * 1000, lag * 1000))
    out["runs"] = rows
    return out


def render(out: dict[str, Any], repeats: int) -> str:
    lines = [
        "### Server metrics: what scraping costs a run",
        "",
        "`python -m benchmarks.server_metrics`",
        "",
        out["machine"],
        "",
        f"- parsing one /metrics answer of the simulator ({out['lines']} lines, vLLM names with"
        f" two histograms): {out['parse_us']:.0f} µs CPU; ten times that answer:"
        f" {out['parse_10x_us']:.0f} µs",
        f"- runs against the simulator, 1,500 single requests at 100/s, medians of {repeats}"
        " (alternating):",
        "",
        "| server_metrics | main CPU s / 1,000 requests | generator delay p99 (ms) |",
        "|---|---|---|",
    ]
    for mode, rows in out["runs"].items():
        cpu = statistics.median(r[0] for r in rows)
        lag = statistics.median(r[1] for r in rows)
        lines.append(f"| {mode} | {cpu:.3f} | {lag:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server_metrics")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args(argv)
    text = render(measure(args.repeats), args.repeats)
    print(text)
    if not args.no_append:
        append(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
