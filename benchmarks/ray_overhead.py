"""The Ray path's overhead on one host, and the highest open-loop rate 2 shards hold here.

    python -m benchmarks.ray_overhead [--rate 200] [--seconds 5] [--repeats 3]
                                      [--ladder 500,1000,2000] [--no-append]

Needs ``pip install -e '.[ray]'``. Every run is ``veeksha run -q --no-plots`` of single-request
sessions against one external simulator, measured from outside:

- **overhead**: the same scenario (``--rate`` sessions/s for ``--seconds``) as a plain run and
  as ``--ray local`` with one shard (``runtime.distributed.shards: 1``: the same engine, one
  worker, plus Ray: a cluster started and stopped, the actor, the pulls, the merge). Figures:
  wall time; set-up (plain: the run.log's first line to t0; Ray: ``shards.json`` ``setup_s``,
  the driver's connect, placement, actor, offsets and start margin, ``start_margin_s`` = 5 s of
  it); CPU-s of the tree per 1,000 requests (``RUSAGE_CHILDREN`` of the command: its reaped
  descendants, which includes the local Ray cluster's processes, stopped with the run);
  dispatch lag (``dispatched_at − ready_at``) p50 and p99 in µs.
- **2-shard rate**: ``--ray local`` with ``shards: 2`` at each rate of ``--ladder``: held when
  the achieved rate (requests − 1 over the span of their dispatch times) is within 2 % of the
  target and the ``dispatch_rate`` health check passes; the dispatch lag p99 is shown beside
  (on a shared 2-core machine it exceeds the 5 ms of ``generator_saturation`` even for the
  plain run at 200/s).
  The highest held rate is the figure.

Medians of ``--repeats`` (min-max); appended to BENCHMARKS.md with machine, date and commit.
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
from typing import Any

from benchmarks.harness import ROOT, Simulator, machine

_SCENARIO = """\
seed: 1
traffic_scheduler:
  type: rate
  interval_generator: {{type: fixed, interval: {interval}}}
session_generator:
  type: synthetic
  session_graph: {{type: single_request}}
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 32}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 8}}}}}}
client: {{api_base: "{api_base}", model: veeksha-sim}}
runtime:
  max_sessions: {sessions}
  benchmark_timeout: {timeout}
  num_workers: 1
  cpu_affinity: "off"
{distributed}
"""


def _run(workdir: Path, api_base: str, rate: float, seconds: float, shards: int | None) -> dict:
    sessions = int(rate * seconds)
    distributed = (
        ""
        if shards is None
        else f"  distributed: {{backend: ray, address: local, shards: {shards}}}"
    )
    spec = workdir / "s.yaml"
    spec.write_text(
        _SCENARIO.format(
            interval=1.0 / rate,
            api_base=api_base,
            sessions=sessions,
            timeout=seconds * 4 + 30,
            distributed=distributed,
        ),
        encoding="utf-8",
    )
    out = workdir / "out"
    command = [sys.executable, "-m", "veeksha.cli", "run", str(spec), "-q", "--no-plots"]
    command += ["--output-dir", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 4):
        raise SystemExit(f"the run failed (exit {done.returncode}): {done.stderr[-2000:]}")
    (run_dir,) = out.iterdir()
    return _figures(run_dir, wall, cpu)


def _figures(run_dir: Path, wall: float, cpu: float) -> dict[str, Any]:
    import pyarrow.parquet as pq

    table = pq.read_table(
        run_dir / "requests.parquet", columns=["ready_at", "dispatched_at", "status"]
    ).to_pandas()
    lag = (table.dispatched_at - table.ready_at) * 1e6
    health = json.loads((run_dir / "health.json").read_text())
    arrival = next((c for c in health["checks"] if c["name"] == "dispatch_rate"), {})
    sent = table.dispatched_at.sort_values()
    span = float(sent.iloc[-1] - sent.iloc[0]) if len(sent) > 1 else 0.0
    shards_file = run_dir / "shards.json"
    if shards_file.exists():
        setup = json.loads(shards_file.read_text())["setup_s"]
    else:
        setup = _plain_setup(run_dir / "run.log")
    return {
        "wall_s": wall,
        "setup_s": setup,
        "cpu_ms_per_request": cpu * 1000 / max(len(table), 1),
        "lag_p50_us": float(lag.quantile(0.5)),
        "lag_p99_us": float(lag.quantile(0.99)),
        "requests": len(table),
        "achieved_rate": (len(table) - 1) / span if span > 0 else 0.0,
        "arrival_ok": arrival.get("status") == "PASS",
    }


def _plain_setup(log: Path) -> float:
    def stamp(line: str) -> float:
        hours, minutes, seconds = line[:12].split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(seconds)

    lines = [line for line in log.read_text().splitlines() if line[:2].isdigit()]
    return next(stamp(x) for x in lines if " t0 = " in x) - stamp(lines[0])


def _median(samples: list[dict[str, Any]], key: str) -> str:
    values = [float(s[key]) for s in samples]
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    """Measure, print, append to BENCHMARKS.md (unless --no-append)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ray_overhead")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ladder", default="500,1000,2000")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args(argv)
    if _ray_version() is None:
        raise SystemExit("Ray is not installed: pip install -e '.[ray]'")
    results: dict[str, list[dict[str, Any]]] = {"plain": [], "ray, 1 shard": []}
    ladder: list[tuple[float, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="veeksha-ray-") as tmp, Simulator() as sim:
        for rep in range(args.repeats):
            order = [None, 1] if rep % 2 == 0 else [1, None]
            for shards in order:
                label = "plain" if shards is None else "ray, 1 shard"
                workdir = Path(tmp) / f"{shards}-{rep}"
                workdir.mkdir()
                results[label].append(_run(workdir, sim.base_url, args.rate, args.seconds, shards))
                print(label, rep, json.dumps(results[label][-1]), flush=True)
        for rate in (float(r) for r in args.ladder.split(",")):
            workdir = Path(tmp) / f"ladder-{rate:g}"
            workdir.mkdir()
            sample = _run(workdir, sim.base_url, rate, args.seconds, 2)
            ladder.append((rate, sample))
            print("2 shards", rate, json.dumps(sample), flush=True)
    where = machine()
    command = " ".join(["python -m benchmarks.ray_overhead", *(argv or sys.argv[1:])])
    lines = [
        f"## Distributed runs on Ray: overhead on one host (issue 18) — {where.date}",
        "",
        f"{where.line()} Command: `{command}`. Ray {_ray_version() or '(not installed)'}.",
        f"Single-request sessions at {args.rate:g}/s for {args.seconds:g} s against one "
        "external simulator, `veeksha run -q --no-plots`, measured from outside; median of "
        f"{args.repeats} (min-max); the load average during the runs: "
        f"{os.getloadavg()[0]:.1f} (a shared 2-core machine: the wall figures are noisy, "
        "prefer the CPU and lag figures).",
        "",
        "| run | wall (s) | set-up (s) | CPU per request (CPU-ms) | dispatch lag p50 (µs) "
        "| dispatch lag p99 (µs) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, samples in results.items():
        lines.append(
            f"| {label} | {_median(samples, 'wall_s')} | {_median(samples, 'setup_s')} "
            f"| {_median(samples, 'cpu_ms_per_request')} | {_median(samples, 'lag_p50_us')} "
            f"| {_median(samples, 'lag_p99_us')} |"
        )
    lines += [
        "",
        "2 shards (`--ray local`, `shards: 2`, one worker each), open loop, one try per rate:",
        "",
        "| target rate (/s) | achieved (/s) | arrival check | lag p99 (µs) | held |",
        "|---:|---:|---|---:|---|",
    ]
    held = 0.0
    for rate, sample in ladder:
        ok = sample["arrival_ok"] and abs(sample["achieved_rate"] - rate) <= 0.02 * rate
        held = max(held, rate) if ok else held
        lines.append(
            f"| {rate:g} | {sample['achieved_rate']:.0f} "
            f"| {'PASS' if sample['arrival_ok'] else 'FAIL'} | {sample['lag_p99_us']:.0f} "
            f"| {'yes' if ok else 'no'} |"
        )
    lines += ["", f"Highest rate held with 2 shards: {held:g} /s."]
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_append:
        from benchmarks.report import append  # (report imports figures, which imports this)

        append(text)
    return 0


def _ray_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ray")
    except PackageNotFoundError:
        return None


def overhead_sample(workdir: Path, api_base: str, rate: float, seconds: float) -> dict[str, float]:
    """The ``ray`` figure of ``python -m benchmarks`` (``figures.fig_ray``): one plain run and
    one ``--ray local`` run of one shard, their figures side by side (empty without Ray)."""
    if _ray_version() is None:
        return {}
    values: dict[str, float] = {}
    for label, shards in (("plain", None), ("ray", 1)):
        folder = workdir / label
        folder.mkdir(parents=True, exist_ok=True)
        sample = _run(folder, api_base, rate, seconds, shards)
        for key in ("wall_s", "setup_s", "cpu_ms_per_request", "lag_p50_us", "lag_p99_us"):
            values[f"{label}_{key}"] = float(sample[key])
    return values


if __name__ == "__main__":
    raise SystemExit(main())
