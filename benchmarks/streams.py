"""Many-stream fidelity: TTFC and TBC bias at 128 concurrent streams, and where the delay goes.

    python -m benchmarks streams [--quick]              (one figure of the set)
    python -m benchmarks.streams [--compare REV] [--repeats N] [--seconds S] [--quick]
                                 [--configs NAME,...] [--no-append]

Two targets, the same timing (TTFT 50 ms, 5 ms between tokens, 64 streamed tokens a request,
completions API), both reporting when they wrote each content chunk, right before the write:

- the paced C server (``benchmarks/paced_server.c``, ``benchmarks/paced.py``): one thread,
  epoll, ~25 % of a core at 128 streams (most of it the kernel's loopback TCP path, which
  runs the receiving side in the sender's system call), so the client has the machine;
  compiled with ``gcc`` on first use (without a compiler its configurations are skipped, with
  a note);
- the built-in simulator, fixed timing, ``record_chunk_times`` (Python: ~0.8 of a core at 128
  streams, which shares the 2 cores with the client and reads its requests late).

A full ``veeksha run`` drives it (``Config``):

- ``128c``: closed loop, 128 concurrent single-request sessions (~350 req/s, ~22,000
  chunks/s through the client) against the C server (unpinned), the default workers and
  pinning (on 2 cores: one worker, on CPU 1; the main process on CPU 0); ``128c0``: the C
  server pinned to CPU 0 (the main process's), away from the worker; ``128cw2``: 2 workers;
  every configuration stamps chunks as the measured revision does by default (``kernel``
  from 16b0806 on; ``read`` before); ``128c0k``, ``128cnpk``, ``lightck`` set
  ``runtime.chunk_timestamps: kernel`` and ``128c0rd``, ``128cnprd``, ``lightcrd`` set
  ``read`` (a chunk stamped when the worker reads it), whatever the default;
  ``128c0r``: ``128c0`` with the streams started over 2 s (a ramp-up), so that they do not
  stay in step (with no ramp-up all 128 start at once, and the fixed timing keeps their chunks
  in bursts, as a batching server's decode steps do); ``128cnp``: ``128c`` without the probe
  (its own cost: the values from requests.parquet and the worker's CPU only); ``lightc``: the
  reference, 20 req/s open loop;
- ``128``, ``light``: the same against the simulator; ``128w2``: 2 workers (both on CPU 1
  with ``auto``); ``128off``: pinning off; ``128sim0``: the simulator pinned to CPU 0.

The full set (``FULL``) is the C configurations and ``128``/``light``; the quick set
``128c0`` and ``lightc`` (``128`` and ``light`` without a compiler); any by ``--configs``.
The targets are the client's, so the report (``benchmarks/report.py``) takes them from
``128c0``, where the server does not take the worker's CPU.

Clocks: one CLOCK_MONOTONIC for every process on Linux, so the server's write times and the
client's read times are comparable. Per run:

- ``first_delay_*``: the TTFC bias as issue 20 defines it, the first content chunk's read
  (client) − its write (server), mean and p99 (the probe's chunk times);
- ``ttfc_bias_*``: ttfc − server_ttft per request (requests.parquet; as the ``ttfc`` figure):
  (first read − sent) − (first write − server arrival) = the first chunk's delay + the
  request's way up (``upstream``: server arrival − sent, which holds the server's own wait to
  read it);
- ``tbc_p99_bias_ms``: the client's TBC p99 minus the server's p99 of the gaps between its
  writes (the same chunks); ``tbc_p99_vs_itl_ms``: minus the nominal 5 ms;
- ``coalesced_pct``: chunks that shared a read with the chunk before (``chunks_coalesced``);
- ``sim_cpu_s``: the server's CPU-s during the run, ``server_core_pct`` the same per second of
  traffic; ``others_cores``: the CPU the rest of the machine used meanwhile (/proc/stat's busy
  time less veeksha's and the server's), in cores: on a shared machine, the noise of the run.

Where the delay of a chunk (client read time − server write time) goes, from the probe
(``benchmarks/streams_probe``: in the workers only, per read and per loop pass; see there).
For a chunk written at ``a`` and read in pass ``p`` (which started at ``P``; the previous pass
ended at ``Q``), the parts add up to the delay exactly:

- ``busy_ms``: ``Q − a`` when the chunk came while the loop was still in the previous pass;
- ``wake_ms``: from ``max(a, Q)`` to ``P``: the kernel's path (loopback TCP, the wake-up, the
  loop's poll), less the part spent runnable on a taken CPU: ``cpu_wait_ms`` (the worker's
  run-queue wait between the two passes, from schedstat);
- ``in_pass_ms``: from ``max(a, P)`` to the read: the reads (and their parsing) before it in
  the same pass;
- the stamp itself (the read to the clock reading, < 1 µs) is left in ``delay``.

``*_tail_ms``: the same parts for the slowest 1 % of the chunks (delay ≥ its p99), and the
worker's garbage collections within the delay; ``pass_*``: a loop pass's length and the
worker's own CPU in it (a long pass with little CPU was preempted).

``--compare REV`` measures the same configurations with the veeksha of ``REV`` (``git
archive`` into a temporary folder, run with it first on ``PYTHONPATH``) alternately with this
checkout, in one invocation, and prints both side by side (the probe wraps the same two http1
methods in both).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow.parquet as pq

from benchmarks.harness import (
    ROOT,
    RunMeasure,
    Simulator,
    baseline_tree,
    check_complete,
    machine,
    run_veeksha,
    scenario,
)
from benchmarks.paced import PacedServer, build

__all__ = ["CONFIGS", "Config", "Servers", "measure", "quick_configs", "streams_figure"]

PROBE_PATH = Path(__file__).resolve().parent / "streams_probe"
TTFT_MS = 50.0
ITL_MS = 5.0
TOKENS = 64
LIGHT_RATE = 20.0
Server = Simulator | PacedServer


@dataclass(frozen=True)
class Config:
    """One way of running the load: streams (0: the light open-loop reference), workers,
    pinning, the server (``sim``: the built-in simulator, ``c``: the paced C server) and
    whether the server is pinned to CPU 0 (the main process's)."""

    name: str
    streams: int
    workers: int | None = None
    affinity: str | None = None
    sim_cpu0: bool = False
    server: str = "sim"
    probe: bool = True
    rampup_s: float = 0.0
    chunk_timestamps: str | None = None  # None: the revision's default


CONFIGS = {
    c.name: c
    for c in (
        Config("128c", 128, server="c"),
        Config("128c0", 128, sim_cpu0=True, server="c"),
        Config("128c0r", 128, sim_cpu0=True, server="c", rampup_s=2.0),
        Config("128cw2", 128, workers=2, server="c"),
        Config("128cnp", 128, server="c", probe=False),
        Config("lightc", 0, server="c"),
        Config("128c0k", 128, sim_cpu0=True, server="c", chunk_timestamps="kernel"),
        Config("128cnpk", 128, server="c", probe=False, chunk_timestamps="kernel"),
        Config("lightck", 0, server="c", chunk_timestamps="kernel"),
        Config("128c0rd", 128, sim_cpu0=True, server="c", chunk_timestamps="read"),
        Config("128cnprd", 128, server="c", probe=False, chunk_timestamps="read"),
        Config("lightcrd", 0, server="c", chunk_timestamps="read"),
        Config("128", 128),
        Config("128w2", 128, workers=2),
        Config("128off", 128, affinity="off"),
        Config("128sim0", 128, sim_cpu0=True),
        Config("light", 0),
    )
}
QUICK = ("128c0", "lightc")
QUICK_NO_C = ("128", "light")
FULL = ("128c", "128c0", "128cnp", "128cw2", "lightc", "128", "light")


def _spec(config: Config, base_url: str, seconds: float) -> dict[str, Any]:
    runtime: dict[str, Any] = {}
    if config.chunk_timestamps is not None:
        runtime["chunk_timestamps"] = config.chunk_timestamps
    if config.workers is not None:
        runtime["num_workers"] = config.workers
    if config.affinity is not None:
        runtime["cpu_affinity"] = config.affinity
    if config.streams:
        scheduler = {
            "type": "concurrent",
            "target_concurrent_sessions": config.streams,
            "rampup_seconds": config.rampup_s,
        }
        return scenario(
            api_base=base_url,
            scheduler=scheduler,
            max_sessions=-1,
            output_tokens=TOKENS,
            timeout_s=seconds,
            **runtime,
        )
    interval = {"type": "fixed", "interval": 1 / LIGHT_RATE}
    scheduler = {"type": "rate", "interval_generator": interval}
    return scenario(
        api_base=base_url,
        scheduler=scheduler,
        max_sessions=max(int(LIGHT_RATE * seconds), 10),
        output_tokens=TOKENS,
        **runtime,
    )


def measure(
    config: Config, sim: Server, workdir: Path, seconds: float, root: Path = ROOT
) -> dict[str, float]:
    """One ``veeksha run`` of ``config`` (the veeksha of ``root``) with the probe; its figures."""
    name = f"streams-{config.name}-{time.monotonic_ns()}"
    probe_dir = workdir / f"{name}-probe"
    probe_dir.mkdir(parents=True)
    env = {"VEEKSHA_PROBE_DIR": str(probe_dir), "PYTHONPATH": str(PROBE_PATH)}
    if not config.probe:
        env = {}
    pinned = _pin(sim, [0] if config.sim_cpu0 else None)
    try:
        cpu0 = sim.cpu_s()
        busy0 = _busy_s()
        m = run_veeksha(_spec(config, sim.base_url, seconds), workdir, name, env=env, root=root)
        busy = _busy_s() - busy0
        sim_cpu = sim.cpu_s() - cpu0
    finally:
        _pin(sim, pinned)
    check_complete(m, f"streams {config.name}")
    values = _from_rows(m)
    values.update(_from_probe(sorted(probe_dir.glob("probe-*.msgpack"))))
    values["cpu_s"] = m.cpu_s
    # what the rest of the machine took meanwhile (other engineers' runs): in cores
    values["others_cores"] = max(busy - m.cpu_s - sim_cpu, 0.0) / m.wall_s
    if "worker_cpu_s" in values and values["requests"]:
        values["worker_cpu_ms_per_request"] = 1e3 * values["worker_cpu_s"] / values["requests"]
    values["sim_cpu_s"] = sim_cpu
    values["server_core_pct"] = 100 * sim_cpu / seconds
    values["vm_steal_pct"] = m.steal_pct
    return values


def _busy_s() -> float:
    """CPU seconds all CPUs have been busy (not idle, not waiting for I/O) since boot."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:8]]
    except (OSError, ValueError):
        return 0.0
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _pin(sim: Server, cpus: list[int] | None) -> list[int] | None:
    """Pin the server's processes to ``cpus`` (None: leave them); their previous CPUs."""
    if cpus is None:
        return None
    before: list[int] | None = None
    for proc in sim._procs():
        with contextlib.suppress(OSError):
            before = before or proc.cpu_affinity()
            proc.cpu_affinity(cpus)
    return before


def _from_rows(m: RunMeasure) -> dict[str, float]:
    """The TTFC bias from requests.parquet (ttfc − server_ttft), and the run's CPU waits."""
    table = pq.read_table(
        m.run_dir / "requests.parquet", columns=["phase", "status", "ttfc", "server_ttft", "tbc"]
    )
    phase, status = table["phase"].to_pylist(), table["status"].to_pylist()
    ok = np.array([p == "measured" and s == "ok" for p, s in zip(phase, status, strict=True)])
    ttfc = table["ttfc"].to_numpy(zero_copy_only=False)[ok]
    server = table["server_ttft"].to_numpy(zero_copy_only=False)[ok]
    bias = (ttfc - server) * 1e3
    gaps = np.array(
        [g for row, k in zip(table["tbc"].to_pylist(), ok, strict=True) if k for g in row or ()]
    )
    out = {"requests": float(len(bias))}
    if len(bias):
        out["ttfc_bias_mean_ms"] = float(np.mean(bias))
        out["ttfc_bias_p99_ms"] = float(np.percentile(bias, 99))
        out["server_ttft_p99_late_ms"] = float(np.percentile(server, 99) * 1e3 - TTFT_MS)
    if len(gaps):
        out["tbc_p99_vs_itl_ms"] = float(np.percentile(gaps, 99) * 1e3 - ITL_MS)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        run = json.loads((m.run_dir / "summary.json").read_text())["run"]
        start, end = run["measured_window"]
        window = float(end) - float(start or 0)
        out["worker_cpu_s"] = float(run["worker_cpu_s"])
        out["worker_cpu_wait_s"] = float(run["worker_cpu_wait_s"])
        out["main_cpu_wait_s"] = float(run["main_cpu_wait_s"])
        if window:
            out["worker_cpu_wait_pct"] = 100 * out["worker_cpu_wait_s"] / window
    return out


def _from_probe(paths: list[Path]) -> dict[str, float]:
    """Per-chunk delay and its parts (see the module docstring) from the workers' probes."""
    names = (
        *("delay", "busy", "wake", "cpu", "in_pass", "preempted", "first", "up", "cgap", "sgap"),
        *("gc", "pass", "pass_cpu", "all"),
    )
    gc_ns = gc_count = gc_full = 0
    parts: dict[str, list[np.ndarray]] = {k: [] for k in names}
    coalesced = chunks = skipped = reads_total = passes_total = 0
    for path in paths:
        doc = msgspec.msgpack.decode(path.read_bytes())
        reads = np.frombuffer(doc["reads"], dtype=np.int64).reshape(-1, 6)
        passes = np.frombuffer(doc["passes"], dtype=np.int64).reshape(-1, 6)
        reads_total += len(reads)
        passes_total += len(passes)
        collected = np.frombuffer(doc.get("gc", b""), dtype=np.int64).reshape(-1, 3)
        gc_ns += int((collected[:, 1] - collected[:, 0]).sum())
        gc_count += len(collected)
        gc_full += int((collected[:, 2] == 2).sum())
        parts["pass"].append(passes[:, 1] - passes[:, 0])
        parts["pass_cpu"].append(passes[:, 5] - passes[:, 4])
        meta = np.frombuffer(doc["responses"], dtype=np.int64).reshape(-1, 5)
        n_client, n_server = meta[:, 2], meta[:, 3]
        valid = (n_client > 0) & (n_client == n_server)
        skipped += int((~valid).sum())
        if not valid.any() or not len(reads) or not len(passes):
            continue
        client = np.frombuffer(doc["client"], dtype=np.int64)[np.repeat(valid, n_client)]
        server = np.frombuffer(doc["server"], dtype=np.int64)[np.repeat(valid, n_server)]
        rows = meta[valid]
        rid = np.repeat(rows[:, 0], rows[:, 2])
        starts = np.concatenate([[0], np.cumsum(rows[:, 2])[:-1]])
        chunks += len(client)
        same = np.diff(client) == 0
        same[starts[1:] - 1] = False
        coalesced += int(same.sum())
        # the read of each chunk: the last read of its request that began at or before it
        base = int(reads[:, 1].min())
        key = (reads[:, 0] << 36) | (reads[:, 1] - base)
        order = np.argsort(key)
        found = np.searchsorted(key[order], (rid << 36) | (client - base), side="right") - 1
        idx = order[np.clip(found, 0, None)]
        good = (found >= 0) & (reads[idx, 0] == rid) & (reads[idx, 2] >= client)
        pass_of = reads[idx, 3]
        good &= (pass_of >= 0) & (pass_of < len(passes))
        pass_of = np.clip(pass_of, 0, len(passes) - 1)
        start = passes[pass_of, 0]
        prev = np.clip(pass_of - 1, 0, None)
        prev_end = np.where(pass_of > 0, passes[prev, 1], start)
        run_wait = np.where(pass_of > 0, passes[pass_of, 2] - passes[prev, 3], 0)
        a = server
        busy = np.where(a < prev_end, prev_end - a, 0)
        idle = np.where(a < start, start - np.maximum(a, prev_end), 0)
        cpu = np.minimum(idle, np.maximum(run_wait, 0))
        in_pass = reads[idx, 1] - np.maximum(a, start)
        # the worker's own CPU time in the pass before this read (the rest: preempted)
        own = np.minimum(np.maximum(reads[idx, 5] - passes[pass_of, 4], 0), np.maximum(in_pass, 0))
        g = good
        parts["gc"].append((_gc_before(collected, client) - _gc_before(collected, a))[g])
        # every chunk (with kernel stamps a chunk's time precedes its read: the breakdown's
        # parts, aligned with "delay", cover only the chunks matched to a read)
        parts["all"].append(client - a)
        parts["delay"].append((client - a)[g])
        parts["busy"].append(busy[g])
        parts["wake"].append((idle - cpu)[g])
        parts["cpu"].append(cpu[g])
        parts["in_pass"].append(own[g])
        parts["preempted"].append((in_pass - own)[g])
        first = np.zeros(len(client), dtype=bool)
        first[starts] = True
        parts["first"].append((client - a)[first])
        known = (rows[:, 4] != 0) & (rows[:, 1] != 0)
        parts["up"].append(rows[known, 4] - rows[known, 1])
        gap_ok = ~first[1:]
        parts["cgap"].append(np.diff(client)[gap_ok])
        parts["sgap"].append(np.diff(server)[gap_ok])
    cat = {k: np.concatenate(v) / 1e6 if v else np.zeros(0) for k, v in parts.items()}
    out: dict[str, float] = {"probe_chunks": float(chunks), "probe_skipped": float(skipped)}
    if chunks:
        out["coalesced_pct"] = 100 * coalesced / chunks
        out["reads_per_pass"] = reads_total / max(passes_total, 1)
    if len(cat["all"]):
        out["delay_mean_ms"] = float(cat["all"].mean())
        out["delay_p99_ms"] = float(np.percentile(cat["all"], 99))
    if len(cat["delay"]):
        for k in ("busy", "wake", "cpu", "in_pass", "preempted"):
            out[f"{k}_ms"] = float(cat[k].mean())
        # the slowest 1 % of the chunks: what their delay was made of (mean of each part)
        tail = cat["delay"] >= np.percentile(cat["delay"], 99)
        for k in ("busy", "wake", "cpu", "in_pass", "preempted", "gc"):
            out[f"{k}_tail_ms"] = float(cat[k][tail].mean())
        out["gc_ms"] = float(cat["gc"].mean())
        out["wake_p99_ms"] = float(np.percentile(cat["wake"], 99))
        out["cpu_p99_ms"] = float(np.percentile(cat["cpu"], 99))
    if len(cat["pass"]):
        out["pass_p99_ms"] = float(np.percentile(cat["pass"], 99))
        out["pass_max_ms"] = float(cat["pass"].max())
        out["pass_cpu_p99_ms"] = float(np.percentile(cat["pass_cpu"], 99))
        out["pass_cpu_max_ms"] = float(cat["pass_cpu"].max())
    out["gc_count"] = float(gc_count)
    out["gc_full_count"] = float(gc_full)
    out["gc_total_ms"] = gc_ns / 1e6
    if len(cat["first"]):
        out["first_delay_mean_ms"] = float(cat["first"].mean())
        out["first_delay_p99_ms"] = float(np.percentile(cat["first"], 99))
    if len(cat["up"]):
        out["upstream_mean_ms"] = float(cat["up"].mean())
        out["upstream_p99_ms"] = float(np.percentile(cat["up"], 99))
    if len(cat["cgap"]):
        out["tbc_p99_bias_ms"] = float(
            np.percentile(cat["cgap"], 99) - np.percentile(cat["sgap"], 99)
        )
        out["server_gap_p99_ms"] = float(np.percentile(cat["sgap"], 99))
    return out


def _gc_before(collected: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per instant of ``t``: the garbage collections' time before it (ns; they never overlap)."""
    if not len(collected):
        return np.zeros(len(t), dtype=np.int64)
    starts, ends = collected[:, 0], collected[:, 1]
    done = np.concatenate([[0], np.cumsum(ends - starts)])
    i = np.searchsorted(starts, t, side="right")
    running = np.where(i > 0, np.maximum(ends[np.maximum(i - 1, 0)] - t, 0), 0)
    return done[i] - running


def streams_figure(
    workdir: Path, seconds: float, configs: list[str], root: Path = ROOT
) -> dict[str, float]:
    """Every configuration once; values keyed ``<key>@<config>``."""
    out: dict[str, float] = {}
    with Servers() as servers:
        for name in configs:
            config = CONFIGS[name]
            secs = seconds if config.streams else max(seconds, 3.0)
            for key, value in measure(config, servers.get(config), workdir, secs, root).items():
                out[f"{key}@{name}"] = value
    return out


def quick_configs() -> list[str]:
    """The quick set: against the C server when it builds, else against the simulator."""
    binary, why = build()
    if binary is None:
        print(f"streams: the paced C server is skipped ({why}); the quick set uses the simulator")
        return list(QUICK_NO_C)
    return list(QUICK)


class Servers(contextlib.AbstractContextManager["Servers"]):
    """The targets of a set of configurations, each started when first needed: the built-in
    simulator (fixed timing, every chunk's write time recorded) and the paced C server, with
    the same timing."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._started: dict[str, Server] = {}

    def get(self, config: Config) -> Server:
        """The running server of ``config`` (started now if it is not yet)."""
        if config.server not in self._started:
            server: Server
            if config.server == "c":
                binary, why = build()
                if binary is None:
                    raise RuntimeError(f"the paced C server is not available: {why}")
                server = PacedServer(binary, TTFT_MS, ITL_MS, TOKENS)
            else:
                server = Simulator(
                    timing="fixed",
                    ttft_ms=TTFT_MS,
                    itl_ms=ITL_MS,
                    max_num_seqs=1024,
                    record_chunk_times=True,
                )
            self._stack.enter_context(server)  # (both return themselves)
            self._started[config.server] = server
        return self._started[config.server]

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


# ------------------------------------------------------------------------------ side by side

HEADLINE = (
    ("first_delay_mean_ms", "TTFC bias mean (first chunk: read − write)", 0.3),
    ("first_delay_p99_ms", "TTFC bias p99", 1.0),
    ("tbc_p99_bias_ms", "TBC p99 bias (vs server gaps)", 0.5),
    ("ttfc_bias_mean_ms", "ttfc − server_ttft mean", None),
    ("ttfc_bias_p99_ms", "ttfc − server_ttft p99", None),
    ("upstream_mean_ms", "  upstream (server arrival − sent) mean", None),
    ("upstream_p99_ms", "  upstream p99", None),
    ("tbc_p99_vs_itl_ms", "TBC p99 − 5 ms", None),
    ("delay_mean_ms", "chunk delay mean (read − write)", None),
    ("delay_p99_ms", "chunk delay p99", None),
    ("busy_ms", "  loop busy (previous pass)", None),
    ("wake_ms", "  kernel + wake-up", None),
    ("cpu_ms", "  CPU taken (run queue)", None),
    ("in_pass_ms", "  reads before it, same pass", None),
    ("preempted_ms", "  preempted within the pass", None),
    ("busy_tail_ms", "  slowest 1 %: loop busy", None),
    ("wake_tail_ms", "  slowest 1 %: kernel + wake-up", None),
    ("cpu_tail_ms", "  slowest 1 %: CPU taken", None),
    ("in_pass_tail_ms", "  slowest 1 %: reads before it", None),
    ("preempted_tail_ms", "  slowest 1 %: preempted", None),
    ("gc_tail_ms", "  slowest 1 %: garbage collection", None),
    ("gc_ms", "  garbage collection (within the delay)", None),
    ("gc_count", "worker garbage collections", None),
    ("gc_full_count", "  of them full (generation 2)", None),
    ("gc_total_ms", "worker garbage collection ms, total", None),
    ("pass_p99_ms", "loop pass p99 ms", None),
    ("pass_max_ms", "loop pass max ms", None),
    ("pass_cpu_p99_ms", "loop pass p99, the worker's own CPU ms", None),
    ("pass_cpu_max_ms", "loop pass max, the worker's own CPU ms", None),
    ("coalesced_pct", "chunks coalesced %", None),
    ("reads_per_pass", "reads per loop pass", None),
    ("worker_cpu_wait_pct", "worker run-queue wait %", None),
    ("server_ttft_p99_late_ms", "server TTFT p99 − 50 ms", None),
    ("cpu_s", "veeksha CPU-s (tree)", None),
    ("worker_cpu_ms_per_request", "worker CPU-ms per request (start-up in)", None),
    ("sim_cpu_s", "server CPU-s", None),
    ("server_core_pct", "server CPU, % of a core (traffic)", None),
    ("others_cores", "other processes on the machine, cores", None),
)


def _med(samples: list[dict[str, float]], key: str) -> str:
    values = [s[key] for s in samples if key in s and not np.isnan(s[key])]
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.3g}"
    return f"{med:.3g} ({min(values):.3g}–{max(values):.3g})"


def render(
    results: dict[str, dict[str, list[dict[str, float]]]], configs: list[str], command: str
) -> str:
    """Markdown: for each configuration, each value's median (min–max) per revision."""
    revisions = list(results)
    lines = [
        f"## Many-stream fidelity (issue 20 item 1) — {machine().date}",
        "",
        machine().line() + f" Command: `{command}`.",
        "Server: the paced C server (`…c` configurations, `benchmarks/paced_server.c`) or the",
        "built-in simulator (the others), both TTFT 50 ms, 5 ms a token, 64 tokens, their write",
        "time of every chunk recorded; completions API; medians (min–max) of the repetitions,",
        "alternating. Targets (128 streams): TTFC bias = the first chunk's read − its write.",
        "",
    ]
    for name in configs:
        header = " | ".join(revisions)
        rule = "|---|---:|" + "---:|" * len(revisions)
        lines += [f"**{name}**", "", f"| value | target | {header} |", rule]
        for key, label, target in HEADLINE:
            cells = [_med(results[rev].get(name, []), key) for rev in revisions]
            if all(c == "-" for c in cells):
                continue
            bound = f"≤ {target:g}" if target is not None and name.startswith("128") else ""
            lines.append(f"| {label} | {bound} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--compare", metavar="REV", help="also measure this git revision")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=None, help="default 8; quick 3")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--configs", default=None, help=f"of {','.join(CONFIGS)}")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args(argv)
    if args.configs:
        configs = args.configs.split(",")
    else:
        configs = quick_configs() if args.quick else list(FULL)
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {','.join(CONFIGS)}")
    binary, why = build()
    if binary is None and any(CONFIGS[c].server == "c" for c in configs):
        print(f"streams: the configurations against the paced C server are skipped ({why})")
        configs = [c for c in configs if CONFIGS[c].server != "c"]
    seconds = args.seconds or (3.0 if args.quick else 8.0)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="veeksha-streams-") as tmp, Servers() as servers:
        roots = {f"this ({head})": ROOT}
        if args.compare:
            tree, short = baseline_tree(args.compare, Path(tmp) / "rev")
            roots = {f"{args.compare} ({short})": tree, **roots}
        for rep in range(args.repeats):
            for name in configs:
                config = CONFIGS[name]
                secs = seconds if config.streams else max(seconds, 3.0)
                for label, root in roots.items():
                    t = time.monotonic()
                    values = measure(config, servers.get(config), Path(tmp), secs, root)
                    results.setdefault(label, {}).setdefault(name, []).append(values)
                    print(
                        f"[{name} #{rep + 1} {label}] first chunk delay mean "
                        f"{values.get('first_delay_mean_ms', float('nan')):.3f} p99 "
                        f"{values.get('first_delay_p99_ms', float('nan')):.3f}, ttfc − "
                        f"server_ttft mean {values.get('ttfc_bias_mean_ms', float('nan')):.3f}, "
                        f"tbc p99 bias "
                        f"{values.get('tbc_p99_bias_ms', float('nan')):.3f} ms; other "
                        f"processes {values.get('others_cores', float('nan')):.2f} cores "
                        f"({time.monotonic() - t:.1f} s)",
                        flush=True,
                    )
    command = "python -m benchmarks.streams " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(results, configs, command.strip())
    print()
    from benchmarks.report import publish  # (report imports figures, which imports this)

    return publish(text, not args.no_append)


if __name__ == "__main__":
    sys.exit(main())
