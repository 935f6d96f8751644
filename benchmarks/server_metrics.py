"""What scraping the server's metrics costs a run (``server_metrics:``, on by default).

    python -m benchmarks.server_metrics [--repeats 3] [--sessions 1500] [--no-append]

- **parse**: CPU to parse one /metrics answer (``veeksha.server.scraper.parse_metrics``, the
  GIL hold the traffic can feel): the simulator's own answer, and one ten times its size (a
  vLLM with several models, or data-parallel engines);
- **runs**: the same scenario against the built-in simulator (single requests at 100/s, 1,500
  sessions), alternating ``server_metrics.enabled`` false / true (interval 1 s and 0.1 s),
  scraping a vLLM-sized answer (~1,000 lines: the simulator's own, ten times over, served as a
  static file by ``python -m http.server`` in a process of its own, ``server_metrics.url``
  pointing at it): the main process' CPU seconds per 1,000 requests (``process_time``: every
  thread of it, a scraper thread included) and the p99 of the generator's delay
  (``latency.generator_delay``).

Medians of ``--repeats``; printed, and appended to BENCHMARKS.md with machine, date, commit.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import machine
from benchmarks.report import publish
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
_TIMES = 10  # copies of the simulator's answer in the served one (~1,000 lines)


def _parse_cpu_us(text: str, repeats: int = 200) -> float:
    parse_metrics(text)  # (the parser's import is not counted)
    cpu = time.process_time()
    for _ in range(repeats):
        parse_metrics(text)
    return (time.process_time() - cpu) / repeats * 1e6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_static(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``folder`` served over loopback by ``python -m http.server`` (a process of its own)."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "-b", "127.0.0.1", "-d", str(folder), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    for _ in range(200):
        try:
            if fetch("GET", url, timeout_s=1.0).ok:
                return server, url
        except Exception:  # noqa: BLE001  (not listening yet)
            pass
        time.sleep(0.05)
    server.kill()
    raise RuntimeError("the static /metrics server did not start")


def measure(repeats: int, sessions: int = 1500) -> dict[str, Any]:
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
    big = "".join(text.replace('model_name="', f'model_name="m{i}-') for i in range(_TIMES))
    out["parse_10x_us"] = _parse_cpu_us(big, 50)
    out["big_lines"] = big.count("\n")
    with tempfile.TemporaryDirectory(prefix="veeksha-bench-") as tmp:
        static = Path(tmp) / "static"
        static.mkdir()
        (static / "metrics").write_text(big)
        server, url = _serve_static(static)
        base = {**_SCENARIO, "runtime": {**_SCENARIO["runtime"], "max_sessions": sessions}}
        try:
            rows = _runs(base, url, Path(tmp), repeats)
        finally:
            server.kill()
            server.wait()
    out["runs"] = rows
    return out


def _runs(
    base: dict[str, Any], url: str, folder: Path, repeats: int
) -> dict[str, list[tuple[float, float]]]:
    rows: dict[str, list[tuple[float, float]]] = {mode: [] for mode in _MODES}
    for _ in range(repeats):
        for mode, settings in _MODES.items():
            scenario = Scenario.model_validate({**base, "server_metrics": {**settings, "url": url}})
            point = run_point(scenario, folder, quiet=True, plots=False)
            run = point.summary["run"]
            requests = point.summary["requests"]["total"]
            lag = point.summary["latency"]["generator_delay"]["p99"]
            rows[mode].append((run["main_cpu_s"] / requests * 1000, lag * 1000))
    return rows


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
        f"- runs against the simulator, {out['sessions']:,} single requests at 100/s, scraping a"
        f" static answer of {out['big_lines']} lines (vLLM-sized), medians of {repeats}"
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
    parser.add_argument("--sessions", type=int, default=1500)
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args(argv)
    out = measure(args.repeats, args.sessions)
    out["sessions"] = args.sessions
    text = render(out, args.repeats)
    return publish(text, not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
