"""Capacity and cost of the built-in simulator (fast preset).

    python -m benchmarks.sim_capacity [--seconds 5] [--clients 2] [--concurrency 32] [--no-append]

Streams chat requests of 32 output tokens (``ignore_eos``) at the simulator from separate load
client processes (aiohttp on uvloop, bodies pre-encoded, responses read whole) and measures, over
a fixed window after a warm-up, the requests per second and the server's CPU seconds per 1,000
requests, read from /proc (utime + stime of every server process). It runs with 1 and 2 server
processes, prints the figures and appends them to BENCHMARKS.md with the machine, date and commit.
The issue's target: at most 0.2 CPU-s per 1,000 requests.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import multiprocessing
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from benchmarks.report import publish
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess

OUTPUT_TOKENS = 32
ROOT = Path(__file__).resolve().parent.parent


def _body() -> bytes:
    import msgspec

    return msgspec.json.encode(
        {
            "model": "veeksha-sim",
            "messages": [{"role": "user", "content": " ".join(["bada"] * 64)}],
            "max_completion_tokens": OUTPUT_TOKENS,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


async def _load(url: str, concurrency: int, start: float, warm: float, stop: float) -> list[int]:
    import aiohttp

    body = _body()
    headers = {"content-type": "application/json"}
    counts = [0, 0]  # requests completed in the window, failures

    async def one_loop(session: aiohttp.ClientSession) -> None:
        while True:
            now = time.monotonic()
            if now >= stop:
                return
            async with session.post(url, data=body, headers=headers) as resp:
                data = await resp.read()
            done = time.monotonic()
            if warm <= done < stop:
                ok = resp.status == 200 and data.endswith(b"data: [DONE]\n\n")
                counts[0 if ok else 1] += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.sleep(max(start - time.monotonic(), 0))
        await asyncio.gather(*(one_loop(session) for _ in range(concurrency)))
    return counts


def _client(url: str, concurrency: int, start: float, warm: float, stop: float, out: Any) -> None:
    import uvloop

    out.send(uvloop.run(_load(url, concurrency, start, warm, stop)))
    out.close()


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def measure(processes: int, seconds: float, clients: int, concurrency: int) -> dict[str, Any]:
    """One measurement: requests/s and server CPU-s per 1,000 requests."""
    config = SimulatorConfig(preset="fast", processes=processes)
    with SimulatorProcess(config) as sim:
        assert sim.pid is not None
        root = psutil.Process(sim.pid)
        pids = [sim.pid] + [c.pid for c in root.children(recursive=True)]
        url = f"{sim.base_url}/chat/completions"
        ctx = multiprocessing.get_context("spawn")
        warmup = 1.0
        start = time.monotonic() + 1.5  # the clients' start-up
        warm, stop = start + warmup, start + warmup + seconds
        pipes, procs = [], []
        for _ in range(clients):
            receiver, sender = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_client, args=(url, concurrency, start, warm, stop, sender))
            proc.start()
            pipes.append(receiver)
            procs.append(proc)
        time.sleep(max(warm - time.monotonic(), 0))
        cpu0, t0 = _cpu_seconds(pids), time.monotonic()
        time.sleep(max(stop - time.monotonic(), 0))
        cpu1, t1 = _cpu_seconds(pids), time.monotonic()
        results = [pipe.recv() for pipe in pipes]
        for proc in procs:
            proc.join(30)
    ok = sum(r[0] for r in results)
    failed = sum(r[1] for r in results)
    elapsed = t1 - t0
    cpu = cpu1 - cpu0
    return {
        "processes": processes,
        "requests": ok,
        "failed": failed,
        "seconds": elapsed,
        "requests_per_s": ok / elapsed,
        "cpu_s": cpu,
        "cpu_s_per_1000": cpu / ok * 1000 if ok else float("nan"),
        "server_cpu_util": cpu / elapsed,
    }


def _machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0))
    return f"{cores} cores, {model}, Python {platform.python_version()}"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main() -> None:
    """Measure with 1 and 2 server processes, print, append to BENCHMARKS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window")
    parser.add_argument("--clients", type=int, default=2, help="load client processes")
    parser.add_argument("--concurrency", type=int, default=32, help="requests in flight per client")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args()
    rows = [measure(p, args.seconds, args.clients, args.concurrency) for p in args.processes]
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "",
        f"## Simulator capacity (fast preset, streamed chat, {OUTPUT_TOKENS} tokens) — {when}",
        "",
        f"Machine: {_machine()}. Commit: {_commit()}. Load: {args.clients} aiohttp client "
        f"processes × {args.concurrency} in flight, {args.seconds:g} s window after a 1 s warm-up "
        "(clients share the machine with the server). "
        "Command: `python -m benchmarks.sim_capacity`.",
        "",
        "| server processes | requests/s | server CPU-s per 1,000 requests "
        "| server CPU use | failed |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['processes']} | {r['requests_per_s']:,.0f} | {r['cpu_s_per_1000']:.3f} "
            f"| {r['server_cpu_util']:.2f} cores | {r['failed']} |"
        )
    text = "\n".join(lines) + "\n"
    publish(text, not args.no_append)


if __name__ == "__main__":
    main()
