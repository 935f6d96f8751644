"""What abandoning requests costs veeksha's clock: how late the worker drops each one after its
time, and whether the other requests' timing moves.

    python -m benchmarks.abandonment [--repeats N] [--rate R] [--no-append]

``veeksha run`` (``-q --no-plots``) of single requests (64 output tokens, streamed) at ``--rate``
requests/s (100 by default) for 8 s against the built-in simulator in its own process, timed
(20 ms to the first token, 5 ms between tokens: ~0.34 s an answer, so ~34 streams at once), run
twice in turn: without ``abandonment`` and with half the requests abandoned 0.1 s after they
were sent. Per run: the abandoned requests' lateness (``summary.json``'s
``abandonment.lateness``: ``completed_at − sent_at − abandon_after``) p50, p99 and max; the
ok requests' TTFC p99 (the server's, here: the simulator's own queueing); the worker's part of
a request's lag (``sent_at − dispatched_at``) p99; the generator delay p99; the workers' CPU
per 1,000 requests; and whether the server's aborted requests (its
``vllm:request_success_total{finished_reason="abort"}``) equal the abandoned rows. Medians of
``--repeats`` pairs (1 by default). One simulator serves every run, so the machine's load
moves both columns alike.

Printed, and appended to BENCHMARKS.md with the machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from benchmarks.harness import Simulator, check_complete, machine, run_veeksha, scenario
from benchmarks.report import publish

SECONDS = 8
ABANDONED = {"probability": 0.5, "after_generator": {"type": "fixed", "interval": 0.1}}


def _spec(api_base: str, rate: float, abandon: bool) -> dict[str, Any]:
    spec = scenario(
        api_base=api_base,
        scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 1 / rate}},
        max_sessions=int(rate * SECONDS),
        output_tokens=64,
    )
    if abandon:
        spec["abandonment"] = ABANDONED
    return spec


def _aborted(run_dir: Path) -> float:
    """The requests the server aborted during the run: its counter's rise from the run's first
    scrape to its last (the simulator serves every run of the benchmark)."""
    table = pq.read_table(run_dir / "server_metrics.parquet").to_pandas()
    rows = table[
        (table.metric == "vllm:request_success_total")
        & table.labels.str.contains('"finished_reason":"abort"', regex=False)
    ].sort_values("t")
    return float(rows.value.iloc[-1] - rows.value.iloc[0]) if len(rows) else 0.0


def _figures(run_dir: Path) -> dict[str, float]:
    table = pq.read_table(run_dir / "requests.parquet", columns=["sent_at", "dispatched_at"])
    sent = table.column("sent_at").to_numpy(zero_copy_only=False)
    dispatched = table.column("dispatched_at").to_numpy(zero_copy_only=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    out = {
        "ttfc_p99_ms": summary["latency"]["ttfc"]["p99"] * 1e3,
        "dispatch_to_sent_p99_ms": float(np.nanpercentile(sent - dispatched, 99)) * 1e3,
        "generator_delay_p99_ms": summary["latency"]["generator_delay"]["p99"] * 1e3,
        "workers_cpu_s_per_1000": summary["run"]["worker_cpu_s"] / len(sent) * 1000,
        "abandoned": float(summary["requests"]["abandoned"]),
        "server_aborted": _aborted(run_dir),
    }
    section = summary.get("abandonment")
    if section is not None:
        lateness = section["lateness"]
        out |= {f"lateness_{k}_ms": lateness[k] * 1e3 for k in ("p50", "p99", "max")}
    return out


def runs(repeats: int, rate: float, workdir: Path) -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = {"none": [], "half": []}
    with Simulator(ttft_ms=20, itl_ms=5) as sim:
        for i in range(repeats):
            for name, figures in out.items():
                spec = _spec(sim.base_url, rate, name == "half")
                run = run_veeksha(spec, workdir, f"{name}-{i}")
                check_complete(run, name)
                figures.append(_figures(run.run_dir))
    return out


def render(rate: float, results: dict[str, list[dict[str, float]]]) -> str:
    where = machine()
    lines = [
        f"## Abandoned requests: how late they are dropped, what the others see — {where.date}",
        "",
        where.line(),
        f"Command: `python -m benchmarks.abandonment --rate {rate:g}`. Single requests at "
        f"{rate:g}/s for {SECONDS} s, 64 streamed tokens (~0.34 s an answer); medians of "
        f"{len(results['none'])} pair(s) (see benchmarks/abandonment.py).",
        "",
        "| figure | no abandonment | half abandoned after 0.1 s |",
        "|---|---:|---:|",
    ]
    rows = (
        ("abandoned requests", "abandoned"),
        ("server's aborted requests", "server_aborted"),
        ("lateness p50 (ms)", "lateness_p50_ms"),
        ("lateness p99 (ms)", "lateness_p99_ms"),
        ("lateness max (ms)", "lateness_max_ms"),
        ("ok requests' TTFC p99 (ms)", "ttfc_p99_ms"),
        ("dispatch → sent p99 (ms)", "dispatch_to_sent_p99_ms"),
        ("generator delay p99 (ms)", "generator_delay_p99_ms"),
        ("workers' CPU-s per 1,000 requests", "workers_cpu_s_per_1000"),
    )
    for label, key in rows:
        cells = []
        for name in ("none", "half"):
            values = [r[key] for r in results[name] if key in r]
            cells.append(f"{statistics.median(values):.3g}" if values else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.abandonment")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="veeksha-abandonment-") as tmp:
        results = runs(args.repeats, args.rate, Path(tmp))
    return publish(render(args.rate, results), not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
