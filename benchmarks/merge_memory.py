"""The distributed merge's memory and time: N shard folders of M requests each, merged by
``merge_shards`` in a fresh process, with this checkout's merge and another revision's.

    python -m benchmarks.merge_memory [--against main] [--shards 4] [--rows 250000]
                                      [--repeats 3] [--plots] [--append]

The shard folders are written once, as finished shards write them (veeksha.record's schema,
rows in the order a shard handles them, sessions in the order they ended were handled, one
trace line per request in dispatch order, summary.json's ``run``), from numpy: 2 requests a
session, 16 chunk stamps a request, sessions arriving at 1,000/s over the whole experiment,
each shard's clock 1-3 ms off the driver's. Then each repetition merges them in a child
process per merge (``python -m benchmarks.merge_memory --child``, with the CLI's library
settings), alternating which revision goes first; the child reports its peak RSS (VmHWM of
/proc/self/status: ``ru_maxrss`` would count the parent's RSS at the fork, which Linux keeps
across exec), its RSS before the merge (imports and scenario done), and its CPU and wall time
of ``merge_shards``. The
other revision's ``veeksha/distributed/merge.py`` is loaded from git beside this checkout's
package (the rest of the package is this checkout's), so only the merge differs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.revision import ROOT, module_at
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA

S = 1_000_000_000
T0 = 1_800_000_000 * S
CHUNKS = 16
GROUP = 65_536
SCENARIO = """
seed: 1
traffic_scheduler: {{type: rate, interval_generator: {{type: poisson, arrival_rate: 1000}}}}
session_generator:
  type: synthetic
  session_graph: {{type: linear, num_request_generator: {{type: fixed, value: 2}}}}
  channels: [{{type: text, body_length_generator: {{type: uniform, min: 5, max: 30}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: {chunks}}}}}}}
client: {{api_base: "http://127.0.0.1:9/v1", model: m}}
runtime: {{max_sessions: {sessions}, num_workers: 1}}
"""


def _column(field: pa.Field, values: dict[str, Any], n: int) -> pa.Array:
    if field.name in values:
        value = values[field.name]
        return value if isinstance(value, pa.Array) else pa.array(value, type=field.type)
    if not field.nullable:
        raise KeyError(field.name)
    return pa.nulls(n, type=field.type)


def _table(schema: pa.Schema, values: dict[str, Any], n: int) -> pa.Table:
    return pa.Table.from_arrays([_column(f, values, n) for f in schema], schema=schema)


def _lists(starts: np.ndarray, step: np.ndarray, count: int) -> pa.Array:
    values = (starts[:, None] + step[:, None] * np.arange(count)[None, :]).reshape(-1)
    offsets = np.arange(0, starts.size * count + 1, count, dtype=np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=pa.float64()))


def write_shard(folder: Path, index: int, count: int, rows: int, rng: np.random.Generator) -> None:
    """A finished shard's folder: ``rows`` requests (2 a session) of the sessions it owns."""
    folder.mkdir(parents=True)
    sessions = np.arange(index, index + count * (rows // 2), count, dtype=np.int64)
    start = sessions / 1000.0
    ready0 = start
    ttfc = rng.uniform(0.02, 0.05, (2, sessions.size))
    itl = rng.uniform(0.002, 0.006, (2, sessions.size))
    done0 = ready0 + 0.001 + ttfc[0] + itl[0] * (CHUNKS - 1)
    ready1 = done0 + 0.05
    done1 = ready1 + 0.001 + ttfc[1] + itl[1] * (CHUNKS - 1)
    ready = np.concatenate([ready0, ready1])
    done = np.concatenate([done0, done1])
    first = ready + 0.001 + ttfc.reshape(-1)
    gaps = itl.reshape(-1)
    session_of = np.concatenate([sessions, sessions])
    node = np.repeat(np.array([0, 1], dtype=np.int64), sessions.size)
    processed = done + rng.uniform(0.0001, 0.0005, done.size)
    order = np.argsort(processed, kind="stable")  # the order a shard handles its rows
    n = order.size
    request_values: dict[str, Any] = {
        "run_id": pa.array(["shard"] * n),
        "phase": pa.array(["measured"] * n),
        "session_id": session_of[order],
        "node_id": node[order].astype(np.int32),
        "request_id": (session_of * 2 + node)[order],
        "client": pa.array(["default"] * n),
        "model": pa.array(["m"] * n),
        "kind": pa.array(["llm"] * n),
        "status": pa.array(["ok"] * n),
        "attempt": np.zeros(n, dtype=np.int32),
        "ready_at": ready[order],
        "dispatched_at": ready[order],
        "sent_at": (ready + 0.001)[order],
        "first_chunk_at": first[order],
        "completed_at": done[order],
        "processed_at": processed[order],
        "ttfc": (first - ready - 0.001)[order],
        "e2e": (done - ready - 0.001)[order],
        "target_prompt_tokens": np.full(n, 20, dtype=np.int32),
        "prompt_tokens_new": np.full(n, 20, dtype=np.int32),
        "prompt_tokens_total": (20 + 20 * node)[order].astype(np.int32),
        "requested_output_tokens": np.full(n, CHUNKS, dtype=np.int32),
        "output_tokens": np.full(n, CHUNKS, dtype=np.int32),
        "tpot": gaps[order],
        "normalized_e2e": ((done - ready - 0.001) / CHUNKS)[order],
        "output_throughput": (CHUNKS / (done - ready - 0.001))[order],
        "generator_delay": np.full(n, 0.0001),
        "dispatch_lag": np.full(n, 0.0002),
        "chunk_times": _lists(first[order], gaps[order], CHUNKS),
        "tbc": _lists(gaps[order], np.zeros(n), CHUNKS - 1),
        "shard": np.full(n, index, dtype=np.int32),
    }
    for name in list(request_values):
        field = REQUESTS_SCHEMA.field(name)
        value = request_values[name]
        if isinstance(value, np.ndarray):
            request_values[name] = pa.array(value, type=field.type)
    requests = _table(REQUESTS_SCHEMA, request_values, n)
    metadata = {"t0_wall_ns": str(T0 + index * 1000), "run_id": "shard"}
    pq.write_table(
        requests.replace_schema_metadata(metadata),
        folder / "requests.parquet",
        compression="zstd",
        row_group_size=GROUP,
    )
    handled = np.maximum(processed[: sessions.size], processed[sessions.size :])
    session_order = np.argsort(handled, kind="stable")
    m = sessions.size
    session_values = {
        "run_id": pa.array(["shard"] * m),
        "phase": pa.array(["measured"] * m),
        "session_id": pa.array(sessions[session_order]),
        "status": pa.array(["ok"] * m),
        "started_at": pa.array(start[session_order]),
        "ended_at": pa.array(done1[session_order]),
        "duration": pa.array((done1 - start)[session_order]),
        "num_nodes": pa.array(np.full(m, 2, dtype=np.int32), type=pa.int32()),
        "num_requests": pa.array(np.full(m, 2, dtype=np.int32), type=pa.int32()),
        "num_ok": pa.array(np.full(m, 2, dtype=np.int32), type=pa.int32()),
        "num_error": pa.array(np.zeros(m, dtype=np.int32), type=pa.int32()),
        "num_cancelled": pa.array(np.zeros(m, dtype=np.int32), type=pa.int32()),
        "think_time_total": pa.array(np.full(m, 0.05)),
        "shard": pa.array(np.full(m, index, dtype=np.int32), type=pa.int32()),
    }
    for name, value in list(session_values.items()):
        session_values[name] = value.cast(SESSIONS_SCHEMA.field(name).type)
    sessions_table = _table(SESSIONS_SCHEMA, session_values, m)
    pq.write_table(
        sessions_table.replace_schema_metadata(metadata),
        folder / "sessions.parquet",
        compression="zstd",
        row_group_size=GROUP,
    )
    dispatch = np.argsort(ready, kind="stable")
    encoder = msgspec.json.Encoder()
    with (folder / "trace.jsonl").open("wb") as trace:
        for i in dispatch.tolist():
            line = {
                "phase": "measured",
                "session_id": int(session_of[i]),
                "node_id": int(node[i]),
                "request_id": int(session_of[i] * 2 + node[i]),
                "parents": [0] if node[i] else [],
                "history_parent": 0 if node[i] else None,
                "wait_after_ready": 0.05 if node[i] else 0.0,
                "dispatched_at": float(ready[i]),
                "target_prompt_tokens": 20,
                "requested_output_tokens": CHUNKS,
            }
            trace.write(encoder.encode(line) + b"\n")
    run = {
        "t0_wall_ns": T0 + index * 1000,
        "measured_window": [0.0, float(done.max())],
        "interrupted": False,
        "stop_reason": "max_sessions",
        "main_cpu_s": 1.0,
        "worker_cpu_s": 1.0,
        "num_workers": 1,
        "target": "http://127.0.0.1:9/v1 (m)",
    }
    (folder / "summary.json").write_text(json.dumps({"run": run}))


def _rss_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _child(args: argparse.Namespace) -> int:
    from veeksha.distributed.clock import OffsetEstimate
    from veeksha.distributed.results import ShardResult
    from veeksha.scenario.loader import load_scenario_text
    from veeksha.schedule.shards import ShardSpec

    if args.child == "this":
        from veeksha.distributed import merge
    else:
        merge = module_at(args.child, "veeksha/distributed/merge.py", Path(args.out).parent)
    shards_dir = Path(args.shards_dir)
    count = len(list(shards_dir.iterdir()))
    sessions = count * (args.rows // 2)
    scenario = load_scenario_text(SCENARIO.format(sessions=sessions, chunks=CHUNKS), "bench.yaml")
    results = [
        ShardResult(
            ShardSpec(i, count),
            shards_dir / f"shard-{i}",
            offset_before=OffsetEstimate(i * 1000 - (i + 1) * 1_000_000, 40_000, 80_000, 8),
        )
        for i in range(count)
    ]
    rss_before = _rss_mb("VmRSS")
    cpu, wall = time.process_time(), time.perf_counter()
    report = merge.merge_shards(
        results, Path(args.out), driver_t0_wall_ns=T0, scenario=scenario, plots=args.plots
    )
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = _rss_mb("VmHWM")
    print(
        json.dumps(
            {
                "peak_rss_mb": peak,
                "rss_before_mb": rss_before,
                "cpu_s": cpu,
                "wall_s": wall,
                "requests": report.requests,
                "sessions": report.sessions,
            }
        )
    )
    return 0


def _measure(revision: str, shards_dir: Path, out: Path, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    env.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # (the CLI's: veeksha.cli)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    command = [sys.executable, "-m", "benchmarks.merge_memory", "--child", revision]
    command += ["--shards-dir", str(shards_dir), "--out", str(out), "--rows", str(args.rows)]
    if args.plots:
        command.append("--plots")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"merge at {revision} failed: {done.stderr[-2000:]}")
    figures: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--against", default="main", help="the other revision (default main)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--rows", type=int, default=250_000, help="requests per shard")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plots", action="store_true", help="the merge draws the plots too")
    parser.add_argument("--append", action="store_true", help="append to BENCHMARKS.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--shards-dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # (the measured process: none of the benchmarks' own imports)
        return _child(args)
    from benchmarks.harness import machine
    from benchmarks.report import append

    against = subprocess.run(
        ["git", "rev-parse", "--short", args.against],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    samples: dict[str, list[dict]] = {"this": [], against: []}
    with tempfile.TemporaryDirectory(prefix="veeksha-merge-") as tmp:
        shards_dir = Path(tmp) / "shards"
        rng = np.random.default_rng(7)
        started = time.perf_counter()
        for index in range(args.shards):
            write_shard(shards_dir / f"shard-{index}", index, args.shards, args.rows, rng)
        print(f"shard folders written in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for repeat in range(args.repeats):
            order = ["this", against] if repeat % 2 == 0 else [against, "this"]
            for revision in order:
                out = Path(tmp) / f"{revision}-{repeat}" / "merged"
                out.parent.mkdir()
                figures = _measure(revision, shards_dir, out, args)
                print(revision, figures, file=sys.stderr)
                samples[revision].append(figures)
                subprocess.run(["rm", "-rf", str(out.parent)], check=True)
    rows = [
        f"| figure | {against} median (min–max) | this median (min–max) |",
        "|---|---:|---:|",
    ]
    for key, label in (
        ("peak_rss_mb", "peak RSS of the merging process (MB)"),
        ("rss_before_mb", "RSS before the merge, imports done (MB)"),
        ("cpu_s", "CPU of merge_shards (s)"),
        ("wall_s", "wall time of merge_shards (s)"),
    ):
        cells = []
        for revision in (against, "this"):
            values = [s[key] for s in samples[revision]]
            low, mid, high = min(values), statistics.median(values), max(values)
            cells.append(f"{mid:,.1f} ({low:,.1f}–{high:,.1f})")
        rows.append(f"| {label} | {cells[0]} | {cells[1]} |")
    total = samples["this"][0]
    text = "\n".join(
        [
            f"## Distributed merge: memory and time (benchmarks/merge_memory.py) — "
            f"{machine().date}",
            "",
            machine().line(),
            "",
            f"{args.shards} shards × {args.rows:,} requests ({total['requests']:,} requests, "
            f"{total['sessions']:,} sessions, {CHUNKS} chunk stamps a request), merged with"
            f"{'' if args.plots else 'out'} plots; each merge in a fresh process (its RSS before"
            f" the merge: Python, the imports, the scenario), {against} and"
            f" this checkout alternating, {args.repeats} repetitions:",
            "",
            *rows,
            "",
        ]
    )
    print(text)
    if args.append:
        append(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
