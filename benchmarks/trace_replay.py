"""The trace figure: loading and replaying a big request log (issue 14).

``fig_trace`` writes a request log of 10,000,000 rows (quick: 1,000,000) into the working
folder (CSV: timestamp at 1,000 rows/s, input 16-512 tokens, output 1-32 tokens; seeded), then
runs ``veeksha run`` on it twice against the simulator with ``traffic_scheduler: {type: trace}``
for 10 s of traffic:

cold_first_send_s   from launching ``veeksha run`` to its first request sent, with no cache:
                    the whole file is read, validated and converted to the Parquet cache first
cold_rows_per_s     rows / cold_first_send_s (load and start)
warm_first_send_s   the same with the cache made by the cold run
*_peak_main_rss_mb  peak RSS of the main process over the run (sampled every 20 ms), the
                    conversion and the evaluation included
cache_mb            the cache's size on disk (the CSV's is csv_mb)
convert_cpu_s       CPU seconds of the conversion alone (in this process, after the runs):
                    robust to the other processes on the machine, unlike the wall times

Targets (issue 14): the first request within 5 s, main RSS ≤ 300 MB. Not in the quick set (the
file alone takes ~10 s to write): ``python -m benchmarks trace``.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from benchmarks.harness import RunMeasure, Simulator, check_complete, run_veeksha

__all__ = ["fig_trace", "write_request_log"]

RATE = 1000.0
TRAFFIC_S = 10.0


def write_request_log(path: Path, rows: int, seed: int = 0) -> None:
    """A seeded request log of ``rows`` rows (timestamp, input_length, output_length)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with pacsv.CSVWriter(
        str(path),
        pa.schema(
            [
                ("timestamp", pa.float64()),
                ("input_length", pa.int64()),
                ("output_length", pa.int64()),
            ]
        ),
    ) as writer:
        start = 0.0
        for lo in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - lo)
            ts = start + np.cumsum(rng.exponential(1 / RATE, n))
            start = float(ts[-1])
            writer.write_table(
                pa.table(
                    {
                        "timestamp": np.round(ts, 6),
                        "input_length": rng.integers(16, 513, n),
                        "output_length": rng.integers(1, 33, n),
                    }
                )
            )


def _spec(trace: Path, api_base: str) -> dict[str, Any]:
    return {
        "seed": 1,
        "traffic_scheduler": {"type": "trace", "speedup": 1.0},
        "session_generator": {
            "type": "trace",
            "trace_file": str(trace),
            "flavor": {"type": "request_log"},
            "wrap_mode": False,
        },
        "client": {"type": "openai_completions", "api_base": api_base, "model": "veeksha-sim"},
        "runtime": {
            "max_sessions": -1,
            "benchmark_timeout": TRAFFIC_S,
            "post_timeout_grace_seconds": 5,
        },
        "trace_recorder": {"enabled": False},
        "evaluators": [{"type": "performance", "stream_metrics": False}],
    }


def _first_send_s(m: RunMeasure, launched: float) -> float:
    path = m.run_dir / "requests.parquet"
    meta = pq.read_schema(path).metadata or {}
    t0 = datetime.fromisoformat(meta[b"t0_wall_time"].decode()).timestamp()
    sent = pq.read_table(path, columns=["sent_at"]).column("sent_at")
    return t0 + float(pc.min(sent).as_py() or 0.0) - launched


def _run(spec: dict[str, Any], workdir: Path, name: str) -> tuple[RunMeasure, float]:
    launched = time.time()
    m = run_veeksha(spec, workdir, name, sample_rss=True)
    check_complete(m, name)
    return m, _first_send_s(m, launched)


def fig_trace(plan: Any, sim: Simulator) -> Any:
    from benchmarks.figures import Sample

    rows = plan.pick(1_000_000, 10_000_000)
    trace = plan.workdir / "trace" / "log.csv"
    for old in trace.parent.glob(".log.csv.*"):
        old.unlink()  # a cold start each repetition
    if not trace.exists():
        write_request_log(trace, rows)
    spec = _spec(trace, sim.base_url)
    cold, cold_s = _run(spec, plan.workdir, "trace_cold")
    warm, warm_s = _run(spec, plan.workdir, "trace_warm")
    cache = sum(p.stat().st_size for p in trace.parent.glob(".log.csv.*.parquet"))
    convert_cpu_s, convert_wall_s = _convert_alone(trace)
    return Sample(
        {
            "rows": rows,
            "cold_first_send_s": cold_s,
            "cold_rows_per_s": rows / cold_s,
            "warm_first_send_s": warm_s,
            "cold_peak_main_rss_mb": cold.peak_main_rss_mb,
            "warm_peak_main_rss_mb": warm.peak_main_rss_mb,
            "csv_mb": trace.stat().st_size / 1e6,
            "cache_mb": cache / 1e6,
            "convert_cpu_s": convert_cpu_s,
            "convert_wall_s": convert_wall_s,
            "convert_rows_per_cpu_s": rows / convert_cpu_s,
        }
    )


def _convert_alone(trace: Path) -> tuple[float, float]:
    """CPU and wall seconds of converting ``trace`` (its cache removed first and after)."""
    from veeksha.generate.traces import open_trace
    from veeksha.scenario.models import Scenario

    for old in trace.parent.glob(".log.csv.*"):
        old.unlink()
    scenario = Scenario.model_validate(
        {"session_generator": {"type": "trace", "trace_file": str(trace), "flavor": "request_log"}}
    )
    cpu, wall = time.process_time(), time.perf_counter()
    open_trace(scenario)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    for old in trace.parent.glob(".log.csv.*"):
        old.unlink()
    return cpu, wall
