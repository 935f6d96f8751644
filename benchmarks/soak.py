"""Soak: what grows with a run's length, and what its end costs against its length.

    python -m benchmarks.soak [--seconds 180] [--rate 400] [--graph chat|single]
                              [--trace | --no-trace] [--every 5] [--tracemalloc T1,T2]
                              [--output-dir D] [--json FILE]

One ``veeksha run`` subprocess (the main process, its forked workers) against the built-in
simulator (fast preset) in its own process, open loop (Poisson) at ``--rate`` requests/s for
``--seconds``: ``chat`` is multi-turn sessions of 2-5 turns with history inherited and ~1 s of
think time (``scenarios/chat_multiturn.yaml``'s shape; the session rate is ``rate / 3.5``),
``single`` one request a session. Progress lines (``stream_metrics``) are on, as by default;
the trace recorder on or off.

Every ``--every`` seconds it samples, from /proc through psutil: the main process' and each
worker's RSS, their open file descriptors and threads, the main process' CPU per second over
the interval, and the run folder's file count and bytes (``parts/`` apart). After the run it
reads the run's t0 (``run.log``) and its last answer (``requests.parquet``'s ``completed_at``)
and reports the end: from the last answer to the process' exit (the last Parquet part, the
evaluation, the merge of the parts), in wall time and in the main process' CPU-s (read every
0.25 s: on a shared machine the wall time says more about the neighbours). Run it at two
lengths to see how the end scales.

``--tracemalloc 60,170`` runs the main process under ``tracemalloc`` (slower: use a lower rate)
and writes a snapshot at each of those seconds after start into the output folder; the script
prints the top differences between the first and the last (by file and line).

Prints a table; appends nothing (BENCHMARKS.md's soak section was written from its output).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.harness import COMPLETE_RUN, ROOT, Simulator

_TURNS_MEAN = 3.5  # uniform 2..5

_TRACEMALLOC_MAIN = """
import os, sys, threading, time, tracemalloc, runpy
tracemalloc.start(8)
start = time.monotonic()
out = os.environ["SOAK_TRACEMALLOC_DIR"]
times = [float(t) for t in os.environ["SOAK_TRACEMALLOC_AT"].split(",")]
def snap():
    for t in times:
        time.sleep(max(0.0, start + t - time.monotonic()))
        tracemalloc.take_snapshot().dump(os.path.join(out, f"snap-{int(t)}.tm"))
threading.Thread(target=snap, daemon=True).start()
sys.argv = ["veeksha"] + sys.argv[1:]
runpy.run_module("veeksha.cli", run_name="__main__")
"""


def soak_scenario(
    api_base: str, *, seconds: float, rate: float, graph: str, trace: bool
) -> dict[str, Any]:
    """The soak's scenario: open loop, chat (history inherited) or single requests."""
    if graph == "chat":
        session_graph: dict[str, Any] = {
            "type": "linear",
            "num_request_generator": {"type": "uniform", "min": 2, "max": 5},
            "request_wait_generator": {"type": "poisson", "arrival_rate": 1.0},
            "inherit_history": True,
        }
        session_rate = rate / _TURNS_MEAN
    else:
        session_graph = {"type": "single_request"}
        session_rate = rate
    return {
        "seed": 7,
        "traffic_scheduler": {
            "type": "rate",
            "interval_generator": {"type": "poisson", "arrival_rate": session_rate},
        },
        "session_generator": {
            "type": "synthetic",
            "session_graph": session_graph,
            "channels": [
                {
                    "type": "text",
                    "body_length_generator": {"type": "uniform", "min": 20, "max": 200},
                }
            ],
            "output_spec": {
                "text": {"output_length_generator": {"type": "uniform", "min": 10, "max": 60}}
            },
        },
        "client": {
            "type": "openai_chat_completions",
            "api_base": api_base,
            "model": "veeksha-sim",
            "request_timeout": 30,
        },
        "runtime": {
            "max_sessions": int(session_rate * seconds * 10) + 1000,
            "benchmark_timeout": seconds,
            "post_timeout_grace_seconds": 5,
        },
        "trace_recorder": {"enabled": trace},
        "evaluators": [{"type": "performance", "stream_metrics": True}],
    }


def _folder(run_dir: Path | None) -> tuple[int, int, int, int]:
    """Files and bytes of the run folder, and of its ``parts/``."""
    if run_dir is None or not run_dir.exists():
        return 0, 0, 0, 0
    files = size = pfiles = psize = 0
    for dirpath, _, names in os.walk(run_dir):
        in_parts = "parts" in Path(dirpath).relative_to(run_dir).parts
        for name in names:
            try:
                n = os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            files += 1
            size += n
            if in_parts:
                pfiles += 1
                psize += n
    return files, size, pfiles, psize


def _proc_sample(proc: psutil.Process) -> tuple[float, int, int, float]:
    """RSS (MiB), open fds, threads, CPU seconds so far; zeros if it has gone."""
    try:
        with proc.oneshot():
            t = proc.cpu_times()
            return (
                proc.memory_info().rss / 2**20,
                proc.num_fds(),
                proc.num_threads(),
                t.user + t.system,
            )
    except psutil.Error:
        return 0.0, 0, 0, 0.0


def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run one soak and return its samples and end timings."""
    out = Path(args.output_dir or tempfile.mkdtemp(prefix="veeksha-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    with Simulator() as sim:
        spec = soak_scenario(
            sim.base_url, seconds=args.seconds, rate=args.rate, graph=args.graph, trace=args.trace
        )
        scenario_path = out / "soak.yaml"
        scenario_path.write_text(json.dumps(spec))
        runs = out / "runs"
        env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable]
        if args.tracemalloc:
            env["SOAK_TRACEMALLOC_DIR"] = str(out)
            env["SOAK_TRACEMALLOC_AT"] = args.tracemalloc
            cmd += ["-c", _TRACEMALLOC_MAIN]
        else:
            cmd += ["-m", "veeksha.cli"]
        cmd += ["run", str(scenario_path), "--output-dir", str(runs), "--no-plots"]
        log = (out / "stdout.txt").open("w")
        started = time.time()
        child = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        main = psutil.Process(child.pid)
        samples: list[dict[str, Any]] = []
        last_cpu, last_t = 0.0, time.monotonic()
        t_start = last_t
        run_dir: Path | None = None
        cpu_trail: list[tuple[float, float]] = []  # (wall time, main CPU-s), every 0.25 s
        while child.poll() is None:
            while child.poll() is None and time.monotonic() < last_t + args.every:
                time.sleep(0.25)
                cpu_trail.append((time.time(), _proc_sample(main)[3]))
            if child.poll() is not None:
                break
            now = time.monotonic()
            if run_dir is None and runs.exists():
                dirs = [d for d in runs.iterdir() if d.is_dir()]
                run_dir = dirs[0] if dirs else None
            rss, fds, threads, cpu = _proc_sample(main)
            try:
                workers = [w for w in main.children() if w.is_running()]
            except psutil.Error:
                workers = []
            wsamples = [_proc_sample(w) for w in workers]
            files, size, pfiles, psize = _folder(run_dir)
            samples.append(
                {
                    "t": round(now - t_start, 1),
                    "main_rss_mb": round(rss, 1),
                    "main_fds": fds,
                    "main_threads": threads,
                    "main_cpu_per_s": round((cpu - last_cpu) / (now - last_t), 3),
                    "children_rss_mb": [round(w[0], 1) for w in wsamples],
                    "children_fds": [w[1] for w in wsamples],
                    "children_threads": [w[2] for w in wsamples],
                    "files": files,
                    "bytes": size,
                    "parts_files": pfiles,
                    "parts_bytes": psize,
                }
            )
            last_cpu, last_t = cpu, now
            print(json.dumps(samples[-1]), flush=True)
        exited = time.time()
        log.close()
    return {
        "command": " ".join(sys.argv),
        "seconds": args.seconds,
        "rate": args.rate,
        "graph": args.graph,
        "trace": args.trace,
        "exit_code": child.returncode,
        "wall_s": exited - started,
        "samples": samples,
        **_end(run_dir, exited, [(t, c) for t, c in cpu_trail if c > 0]),
    }


def _end(
    run_dir: Path | None, exited: float, cpu_trail: list[tuple[float, float]]
) -> dict[str, Any]:
    """The run's rows, the time from its last answer to the process' exit and the main
    process' CPU-s over it (to its last reading, at most 0.25 s before the exit)."""
    if run_dir is None:
        return {}
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t0 = None
    for line in (run_dir / "run.log").read_text().splitlines():
        if " t0 = " in line:
            t0 = datetime.datetime.fromisoformat(line.split(" t0 = ", 1)[1].strip()).timestamp()
    table = pq.read_table(run_dir / "requests.parquet", columns=["completed_at"])
    last = pc.max(table["completed_at"]).as_py()
    end = {"rows": table.num_rows, "run_dir": str(run_dir)}
    if t0 is not None and last is not None:
        end["last_answer_to_exit_s"] = round(exited - (t0 + last), 2)
        after = [c for t, c in cpu_trail if t >= t0 + last]
        before = [c for t, c in cpu_trail if t < t0 + last]
        if after and before:
            end["end_main_cpu_s"] = round(after[-1] - before[-1], 2)
    finalized = [ln for ln in (run_dir / "run.log").read_text().splitlines() if "ended (" in ln]
    if finalized:
        end["ended_line"] = finalized[-1]
    return end


def _tracemalloc_diff(out: Path, times: str, top: int = 15) -> None:
    import tracemalloc

    ats = [int(float(t)) for t in times.split(",")]
    first, last = out / f"snap-{ats[0]}.tm", out / f"snap-{ats[-1]}.tm"
    if not (first.exists() and last.exists()):
        print("tracemalloc: snapshots missing (did the run last that long?)")
        return
    a = tracemalloc.Snapshot.load(str(first))
    b = tracemalloc.Snapshot.load(str(last))
    print(f"tracemalloc: top {top} growths from {ats[0]} s to {ats[-1]} s")
    for stat in b.compare_to(a, "lineno")[:top]:
        print(f"  {stat}")


def table(result: dict[str, Any], every_s: float = 30.0) -> str:
    """A Markdown table of the samples, one row every ``every_s`` seconds and the last."""
    lines = [
        "| t (s) | main RSS (MiB) | worker RSS (MiB) | main fds | worker fds | main threads"
        " | main CPU/s | run folder files | parts/ files | parts/ MB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    samples = [x for x in result["samples"] if x["children_rss_mb"]]  # (the traffic's)
    shown, next_t = [], 0.0
    for i, x in enumerate(samples):
        if x["t"] >= next_t or i == len(samples) - 1:
            shown.append(x)
            next_t = x["t"] + every_s - 0.5
    for x in shown:
        workers = x["children_rss_mb"][:-1] or x["children_rss_mb"]  # (the last: server watch)
        wfds = x["children_fds"][:-1] or x["children_fds"]
        lines.append(
            f"| {x['t']:.0f} | {x['main_rss_mb']:.1f} | {', '.join(f'{w:.1f}' for w in workers)}"
            f" | {x['main_fds']} | {', '.join(str(f) for f in wfds)} | {x['main_threads']}"
            f" | {x['main_cpu_per_s']:.3f} | {x['files']} | {x['parts_files']}"
            f" | {x['parts_bytes'] / 1e6:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--rate", type=float, default=400.0, help="requests/s (open loop)")
    parser.add_argument("--graph", choices=("chat", "single"), default="chat")
    parser.add_argument("--trace", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--tracemalloc", default="", metavar="T1,T2")
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--json", default=None, help="write the samples and end here")
    args = parser.parse_args(argv)
    result = soak(args)
    print(
        f"exit {result['exit_code']}, {result.get('rows')} rows, "
        f"last answer to exit {result.get('last_answer_to_exit_s')} s, "
        f"main process CPU over it {result.get('end_main_cpu_s')} s"
    )
    print(result.get("ended_line", ""))
    print(table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if args.tracemalloc and args.output_dir:
        _tracemalloc_diff(Path(args.output_dir), args.tracemalloc)
    return 0 if result["exit_code"] in COMPLETE_RUN else 1


if __name__ == "__main__":
    sys.exit(main())
