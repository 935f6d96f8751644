"""How exact the GPUs' energy per output token is: veeksha's figure against the power model of
the simulator's simulated GPUs, by load and scrape interval, from the energy counter and (as
nvidia-smi gives no counter) from the power samples alone.

    python -m benchmarks.gpu_energy [--seconds S] [--no-append]

The built-in simulator in its own process serves 2 simulated GPUs (``simulator.gpus``: 100 W
idle, 500 W while any request runs; ``/dcgm/metrics``, an exact energy counter of that model).
``veeksha run`` (``-q --no-plots``) sends Poisson single requests (32 streamed tokens, 20 ms to
the first, 5 ms between: ~0.18 s an answer) at a light and a heavy rate for ``--seconds`` (10),
scraping the exporter every 1 s and every 0.25 s. Per run:

- the truth: 2 × (100 W × the throughput window + 400 W × the time inside it during which some
  request held a slot of the server: each answer's own prefill and decode times, from its
  ``timings``, placed at its first chunk's arrival, and their union);
- summary.json's ``gpus.energy_j`` (the counter's increase between the window's ends, each
  interpolated between the scrapes around it) and its error;
- the same section computed without the counter (``energy_from: power``: each power sample held
  over the interval before it, as nvidia-smi's are) and its error;
- J per output token, and the utilisation veeksha reads against the busy share.

Printed, and appended to BENCHMARKS.md with the machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.harness import Simulator, check_complete, machine, run_veeksha, scenario
from benchmarks.report import publish
from veeksha.evaluate.gpus import gpu_section
from veeksha.evaluate.server_view import load_server_view

IDLE_W, BUSY_W, GPUS = 100.0, 500.0, 2
RATES = (2.0, 8.0)
INTERVALS = (1.0, 0.25)


def busy_seconds(run_dir: Path, start: float, end: float) -> float:
    """Seconds of [start, end] during which some request held a slot of the server: each
    request's from its slot to its last token (its answer's own prefill and decode times)
    placed at its first chunk's arrival (``sent_at + ttfc``: the loopback's ~0.1 ms shifts
    both ends alike), then their union."""
    names = ["sent_at", "ttfc", "server_prefill_time", "server_decode_time"]
    table = pq.read_table(run_dir / "requests.parquet", columns=names)
    columns = [table.column(name).to_pylist() for name in names]
    spans = sorted(
        (sent + ttfc - prefill, sent + ttfc + decode)
        for sent, ttfc, prefill, decode in zip(*columns, strict=True)
        if None not in (sent, ttfc, prefill, decode)
    )
    busy, reach = 0.0, start
    for begin, finish in spans:
        low, high = max(begin, reach), min(finish, end)
        if high > low:
            busy += high - low
            reach = high
    return busy


def _figures(run_dir: Path) -> dict[str, float]:
    summary = json.loads((run_dir / "summary.json").read_text())
    throughput, gpus = summary["throughput"], summary["gpus"]
    start, end = throughput["window_start"], throughput["window_end"]
    busy = busy_seconds(run_dir, start, end)
    truth = GPUS * (IDLE_W * (end - start) + (BUSY_W - IDLE_W) * busy)
    view = load_server_view(run_dir)
    assert view is not None
    view.gpu = {k: v for k, v in view.gpu.items() if not k.startswith("energy_")}
    by_power = gpu_section(view, throughput)
    assert by_power is not None
    return {
        "window_s": end - start,
        "busy_share": busy / (end - start),
        "truth_j": truth,
        "counter_j": gpus["energy_j"],
        "counter_error_pct": 100 * (gpus["energy_j"] / truth - 1),
        "power_error_pct": 100 * (by_power["energy_j"] / truth - 1),
        "joules_per_output_token": gpus["joules_per_output_token"],
        "truth_per_output_token": truth / throughput["output_tokens"],
        "utilization_mean": gpus["utilization_mean"],
    }


def runs(seconds: float, workdir: Path) -> list[tuple[float, float, dict[str, float]]]:
    out = []
    settings: dict[str, Any] = {"ttft_ms": 20, "itl_ms": 5, "gpus": GPUS}
    settings |= {"gpu_idle_watts": IDLE_W, "gpu_busy_watts": BUSY_W}
    with Simulator(**settings) as sim:
        root = sim.base_url.removesuffix("/v1")
        for rate in RATES:
            for interval in INTERVALS:
                spec = scenario(
                    api_base=sim.base_url,
                    scheduler={
                        "type": "rate",
                        "interval_generator": {"type": "poisson", "arrival_rate": rate},
                    },
                    max_sessions=int(rate * seconds),
                )
                spec["server_metrics"] = {
                    "interval": interval,
                    "gpu_urls": [f"{root}/dcgm/metrics"],
                }
                run = run_veeksha(spec, workdir, f"r{rate:g}-i{interval:g}")
                check_complete(run, f"rate {rate:g}, interval {interval:g}")
                out.append((rate, interval, _figures(run.run_dir)))
    return out


def render(seconds: float, results: list[tuple[float, float, dict[str, float]]]) -> str:
    where = machine()
    lines = [
        f"## GPU energy per output token against the simulator's power model — {where.date}",
        "",
        where.line(),
        f"Command: `python -m benchmarks.gpu_energy --seconds {seconds:g}`. 2 simulated GPUs "
        f"({IDLE_W:g} W idle, {BUSY_W:g} W busy), Poisson single requests of 32 streamed tokens "
        "(~0.18 s an answer); the truth from the answers' own slot times "
        "(benchmarks/gpu_energy.py).",
        "",
        "| rate (req/s) | scrape (s) | window (s) | busy | truth (J) | counter (J) | counter "
        "error | power-only error | J / token | truth J / token | utilisation read |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for rate, interval, f in results:
        lines.append(
            f"| {rate:g} | {interval:g} | {f['window_s']:.2f} | {100 * f['busy_share']:.1f} % "
            f"| {f['truth_j']:.0f} | {f['counter_j']:.0f} | {f['counter_error_pct']:+.2f} % "
            f"| {f['power_error_pct']:+.2f} % | {f['joules_per_output_token']:.3f} "
            f"| {f['truth_per_output_token']:.3f} | {f['utilization_mean']:.1f} % |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_energy")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="veeksha-gpu-energy-") as tmp:
        results = runs(args.seconds, Path(tmp))
    return publish(render(args.seconds, results), not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
