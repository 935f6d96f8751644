"""The figures of issue 7, one function each: a real ``veeksha run`` against the simulator.

Each function takes a ``Plan`` (quick or full sizes, the working folder) and returns one
``Sample`` per repetition: named numbers, plus the simulator's CPU beside veeksha's. The table
(``report``) takes medians and min–max over the samples. Definitions:

cpu        CPU-s of veeksha's whole process tree (start-up and evaluation included) per 1,000
           completed requests: single-request sessions at a constant 500 req/s, 128-token
           prompts, 32 streamed output tokens, completions API. ``marginal`` subtracts the
           start-up figure's CPU-s (a 2 s run at 10 req/s) measured in the same invocation.
           Split by the run's own account (summary.json ``run``): ``main_cpu_s`` (the main
           process from t0 to the drain's end), ``workers_cpu_s`` (all workers, start-up to
           exit) and ``main_rest_cpu_s`` (the main process' start-up and evaluation).
mainrate   the main process' CPU per request during an open-loop run (summary.json ``run``:
           ``main_cpu_s``, t0 to the drain's end; start-up and evaluation excluded), in CPU-ms
           per request, at 500 req/s (10 s; quick 4 s) and 100 req/s (20 s; quick 5 s): the
           cpu figure's scenario. At these rates nothing batches, so it is what each arrival,
           dispatch, result and row costs the main process one by one. The workers' CPU-ms
           per request beside (start-up to exit).
rate       the highest constant rate (of a ladder) whose achieved rate, counted by the server
           per second (its /metrics counter polled every second; first and last second
           dropped), is within 2 % of the target with a coefficient of variation ≤ 5 %.
closed     requests/s with 64 concurrent single-request sessions (server counter, per second).
precision  sent_at − ready_at (``generator_delay``) at 1,000 req/s: p50 and p99, µs; the
           release's own lateness (``dispatch_lag``: dispatched_at − ready_at) beside. ``light_*``:
           the same at 10 req/s (10 s; quick 4 s), where a worker sleeps between releases and
           wakes for each (its wake-up latency is what the workers' wake-up lead absorbs:
           ``veeksha.timers``).
ttfc       measured TTFC minus the server's own time to first token (``server_ttft``: its first
           token instant minus its arrival instant): mean and p99, ms; fixed timing, TTFT 50 ms,
           inter-token 5 ms, 20 req/s.
startup    a 2 s run at 10 req/s (20 requests): CPU-s, wall time and peak memory of the whole
           tree (the main process' RSS plus its helpers' USS: ``benchmarks/harness.py``);
           ``builtin_*``: the same run against the built-in simulator (no api_base), which
           veeksha starts and stops, so its CPU is in the tree. Both split by the run's own
           account as in ``cpu`` (``traffic_main_cpu_s``, ``workers_cpu_s``,
           ``main_rest_cpu_s``: the main process' start-up and evaluation).
startup_plots  the startup figure's built-in-simulator run as a plain ``veeksha run`` makes it:
           with its plots (every figure above runs ``--no-plots``). ``builtin_cpu_s`` and
           ``builtin_wall_s`` are what a user pays for a 2 s run; the plots' own cost is this
           minus startup's ``builtin_*`` (same invocation). ``plots`` is the number of PNGs
           drawn.
imports    CPU-s of a fresh interpreter (no bytecode written) importing what each process of a
           run imports when it starts (``IMPORTS``): the main process, a worker, the simulator;
           ``python``: the bare interpreter's start, the floor under each. (``veeksha run``
           forks its worker and simulator from the main process: their figures are what each
           costs where it cannot fork, and a sweep's points, which start fresh ones.)
scale      a dry run of linear sessions (3 turns, no think time, history inherited), 1,000 kept
           alive (1,000,000 sessions, as issue 7 defines it; quick 5,000): sessions/s from the
           first start to the last end; the main process' peak RSS over the whole run
           (evaluation included) and over the traffic alone (t0 to the last session's end), and
           its RSS growth during the traffic, from a quarter of it to 90 % of it (flat means ~0).
           One repetition per invocation (``REPEATS``): a run is ~55 s of traffic, its own
           average, and three would take the invocation past 10 minutes.
           ``python_floor_sessions_per_s``: 200,000 of the same sessions pushed through the
           minimal data flow in bare CPython (``benchmarks.python_floor``: a lower bound, not
           veeksha), measured in the same repetition.
memory     RSS of the tree per 1,000 in-flight requests: one run whose concurrency ramps up to C
           (1,000; quick 300) over 5 s against a server holding long streams; the tree's RSS is
           sampled beside the server's count of running requests, and the least-squares slope
           over the samples from C/10 to C running, scaled to 1,000, is the figure; also split
           into the worker processes' part and the rest (main). ``burst_rss_mb_per_1000``: the
           figure's method until 2026-11-25, two runs that open 10 and C streams at once, their
           difference scaled to 1,000: it adds what opening C streams in one instant leaves
           behind, and the few MB by which the main process' RSS differs between runs.
trace      a 10,000,000-row request log replayed at its own timestamps: time to the first
           request sent (cold: the trace converted first; warm: from its cache), rows/s, the
           main process' peak RSS (``benchmarks/trace_replay.py``). Not in ``--quick``.

streams    many-stream fidelity (``benchmarks.streams``, which defines every value): 128
           concurrent streams closed loop against a paced server (TTFT 50 ms, 5 ms a token,
           64 tokens; the light C server ``benchmarks/paced_server.c``, or the built-in
           simulator's fixed timing) and a light 20 req/s reference; TTFC bias (the first
           chunk's read − its write) mean and p99, ttfc − server_ttft, the TBC p99 against the
           server's own gaps, and where each chunk's delay goes. Quick: those two
           configurations against the C server pinned to CPU 0, away from the worker (the
           simulator without a C compiler), 3 s each; full: also the C server unpinned,
           without the probe, 2 workers, and the simulator.

Only startup and scale sample RSS (``run_veeksha(sample_rss=True)``): the other figures run with
no thread of the harness awake beside veeksha, since a sampler on a worker's CPU delays its
release timers (BENCHMARKS.md, 2026-11-25 05:51).

``vm_steal_pct`` (precision, ttfc): the share of CPU time the hypervisor took from this virtual
machine during the run (/proc/stat ``steal``): a vCPU taken away for a few ms shows up in the
tails of the timing figures whatever the process on it does.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.agents import fig_agents
from benchmarks.harness import (
    ROOT,
    RunMeasure,
    Simulator,
    check_complete,
    python_cpu_s,
    run_veeksha,
    scale_scenario,
    scenario,
)
from benchmarks.python_floor import run_floor, scale_sessions
from benchmarks.streams import FULL, quick_configs, streams_figure
from benchmarks.trace_replay import fig_trace

__all__ = ["FIGURES", "REPEATS", "SLOW", "Plan", "Sample"]


@dataclass(frozen=True)
class Plan:
    """Sizes of one invocation."""

    quick: bool
    workdir: Path
    repeats: int
    rates: list[int] | None = None  # the rate figure's ladder instead of the default one
    root: Path = ROOT  # the source tree measured (another revision's: ``--against``)

    def pick(self, quick: Any, full: Any) -> Any:
        return quick if self.quick else full


@dataclass
class Sample:
    """One repetition's numbers (name → value) and notes."""

    values: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _rate(per_s: float) -> dict[str, Any]:
    return {"type": "rate", "interval_generator": {"type": "fixed", "interval": 1.0 / per_s}}


def _check(m: RunMeasure, what: str) -> None:
    check_complete(m, what)


def _requests(m: RunMeasure, *columns: str) -> Any:
    table = pq.read_table(m.run_dir / "requests.parquet", columns=["phase", "status", *columns])
    df = table.to_pandas()
    return df[(df.phase == "measured") & (df.status == "ok")]


def _q(values: Any, q: float) -> float:
    return float(values.quantile(q))


class _CounterPoll:
    """Polls the server's request counter every second while veeksha runs."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.points: list[tuple[float, int]] = []

    def __call__(self, proc: Any) -> None:
        next_t = time.monotonic()
        while proc.poll() is None:
            with contextlib.suppress(OSError):
                self.points.append((time.monotonic(), self.sim.requests_total()))
            next_t += 1.0
            time.sleep(max(0.0, next_t - time.monotonic()))

    def per_second(self) -> list[float]:
        """Per-second rates while traffic flowed: first and last active second dropped."""
        rates = [
            (c1 - c0) / (t1 - t0)
            for (t0, c0), (t1, c1) in zip(self.points, self.points[1:], strict=False)
        ]
        active = [i for i, r in enumerate(rates) if r > 0]
        if len(active) < 3:
            return []
        return rates[active[0] + 1 : active[-1]]


# ------------------------------------------------------------------------------------- figures


def fig_startup(plan: Plan, sim: Simulator) -> Sample:
    spec = scenario(api_base=sim.base_url, scheduler=_rate(10), max_sessions=20)
    cpu0 = sim.cpu_s()
    m = run_veeksha(spec, plan.workdir, "startup", sample_rss=True, root=plan.root)
    _check(m, "startup")
    sim_cpu = sim.cpu_s() - cpu0
    # the same run against the built-in simulator: veeksha starts it, so it is in the tree
    builtin = run_veeksha(
        scenario(api_base=None, scheduler=_rate(10), max_sessions=20),
        plan.workdir,
        "startup_builtin",
        root=plan.root,
    )
    _check(builtin, "startup (built-in simulator)")
    return Sample(
        {
            "cpu_s": m.cpu_s,
            "peak_rss_mb": m.peak_tree_rss_mb,
            "wall_s": m.wall_s,
            "sim_cpu_s": sim_cpu,
            "builtin_cpu_s": builtin.cpu_s,
            "builtin_wall_s": builtin.wall_s,
            **_cpu_parts(m, "traffic_"),
        }
    )


def fig_startup_plots(plan: Plan, _sim: Simulator) -> Sample:
    m = run_veeksha(
        scenario(api_base=None, scheduler=_rate(10), max_sessions=20),
        plan.workdir,
        "startup_plots",
        root=plan.root,
        plots=True,
    )
    _check(m, "startup with plots (built-in simulator)")
    drawn = len(list((m.run_dir / "plots").glob("*.png")))
    return Sample({"builtin_cpu_s": m.cpu_s, "builtin_wall_s": m.wall_s, "plots": drawn})


#: What each process of a run imports when it starts (``imports``), as Python code, after the
#: library settings ``veeksha`` commands make (``veeksha.cli.set_library_defaults``, where the
#: revision has it; the workers and the simulator inherit them). ``{scenario}``: a scenario file.
_DEFAULTS = "import veeksha.cli as c; getattr(c, 'set_library_defaults', lambda: None)()\n"
IMPORTS: dict[str, str] = {
    "python": "pass",
    "main": _DEFAULTS + "import veeksha.engine.run\n"
    "from veeksha.scenario.loader import load_scenario\n"
    "load_scenario({scenario!r}, [])",
    "worker": _DEFAULTS + "import veeksha.dispatch.worker",
    "simulator": _DEFAULTS + "import veeksha.simulator.cli, veeksha.simulator.runner",
}


def fig_imports(plan: Plan, sim: Simulator) -> Sample:
    """CPU-s of a fresh interpreter importing what each process of a run imports first (the
    main process also loads the start-up figure's scenario)."""
    path = plan.workdir / "imports.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(scenario(api_base=sim.base_url, scheduler=_rate(10), max_sessions=20))
    )
    repeats = plan.pick(3, 5)
    return Sample(
        {
            f"{name}_import_cpu_s": python_cpu_s(
                code.format(scenario=str(path)), plan.root, repeats
            )
            for name, code in IMPORTS.items()
        }
    )


def fig_cpu(plan: Plan, sim: Simulator) -> Sample:
    rate = 500
    n = rate * plan.pick(4, 20)
    spec = scenario(api_base=sim.base_url, scheduler=_rate(rate), max_sessions=n)
    cpu0 = sim.cpu_s()
    m = run_veeksha(spec, plan.workdir, "cpu", root=plan.root)
    _check(m, "cpu")
    done = len(_requests(m, "request_id"))
    per_k = 1000.0 / max(done, 1)
    parts = _cpu_parts(m, "")
    return Sample(
        {
            "cpu_s_per_1000": m.cpu_s * per_k,
            "requests": done,
            "sim_cpu_s_per_1000": (sim.cpu_s() - cpu0) * per_k,
            **{f"{k}_per_1000": v * per_k for k, v in parts.items()},
        }
    )


def fig_mainrate(plan: Plan, sim: Simulator) -> Sample:
    values: dict[str, float] = {}
    for rate, seconds in ((500, plan.pick(4, 10)), (100, plan.pick(5, 20))):
        spec = scenario(api_base=sim.base_url, scheduler=_rate(rate), max_sessions=rate * seconds)
        m = run_veeksha(spec, plan.workdir, f"mainrate{rate}", root=plan.root)
        _check(m, "mainrate")
        done = max(len(_requests(m, "request_id")), 1)
        parts = _cpu_parts(m, "")
        values[f"main_cpu_ms_per_request_{rate}"] = parts["main_cpu_s"] * 1000.0 / done
        values[f"workers_cpu_ms_per_request_{rate}"] = parts["workers_cpu_s"] * 1000.0 / done
    return Sample(values)


def _cpu_parts(m: RunMeasure, prefix: str) -> dict[str, float]:
    """The tree's CPU-s split by the run's own account (summary.json ``run``): the main
    process during the traffic (t0 to the end of the drain), the workers (start-up to exit),
    and the rest: the main process' start-up (imports, scenario, sessions) and evaluation."""
    try:
        run = json.loads((m.run_dir / "summary.json").read_text())["run"]
        main, workers = float(run["main_cpu_s"]), float(run["worker_cpu_s"])
    except (OSError, KeyError, TypeError, ValueError):
        return {}
    return {
        f"{prefix}main_cpu_s": main,
        "workers_cpu_s": workers,
        "main_rest_cpu_s": m.cpu_s - main - workers,
    }


def fig_rate(plan: Plan, sim: Simulator) -> Sample:
    ladder = plan.rates or plan.pick([1000], [500, 1000, 1500, 2000, 2500, 3000, 3500, 4000])
    seconds = plan.pick(3, 8)
    best = 0.0
    sample = Sample()
    for rate in ladder:
        poll = _CounterPoll(sim)
        spec = scenario(api_base=sim.base_url, scheduler=_rate(rate), max_sessions=rate * seconds)
        cpu0 = sim.cpu_s()
        m = run_veeksha(spec, plan.workdir, f"rate{rate}", while_running=poll, root=plan.root)
        _check(m, f"rate {rate}")
        rates = poll.per_second()
        if not rates:
            sample.notes.append(f"{rate}/s: too few seconds")
            continue
        mean = statistics.fmean(rates)
        cv = statistics.pstdev(rates) / mean if mean else float("inf")
        ok = abs(mean - rate) / rate <= 0.02 and cv <= 0.05
        sample.values[f"achieved@{rate}"] = mean
        sample.values[f"cv@{rate}"] = cv
        sample.values[f"sim_cpu_share@{rate}"] = (sim.cpu_s() - cpu0) / max(m.wall_s, 1e-9)
        if ok:
            best = max(best, rate)
        else:
            break
    sample.values["sustained_rate"] = best
    return sample


def fig_closed(plan: Plan, sim: Simulator) -> Sample:
    poll = _CounterPoll(sim)
    spec = scenario(
        api_base=sim.base_url,
        scheduler={"type": "concurrent", "target_concurrent_sessions": 64, "rampup_seconds": 0},
        max_sessions=-1,
        timeout_s=plan.pick(3, 8),
    )
    cpu0 = sim.cpu_s()
    m = run_veeksha(spec, plan.workdir, "closed", while_running=poll, root=plan.root)
    _check(m, "closed")
    rates = poll.per_second()
    rps = statistics.median(rates) if rates else 0.0
    return Sample(
        {"requests_per_s": rps, "sim_cpu_share": (sim.cpu_s() - cpu0) / max(m.wall_s, 1e-9)}
    )


def fig_precision(plan: Plan, sim: Simulator) -> Sample:
    rate = 1000
    spec = scenario(
        api_base=sim.base_url, scheduler=_rate(rate), max_sessions=rate * plan.pick(2, 5)
    )
    m = run_veeksha(spec, plan.workdir, "precision", root=plan.root)
    _check(m, "precision")
    df = _requests(m, "generator_delay", "dispatch_lag")
    light_rate = 10
    light = run_veeksha(
        scenario(
            api_base=sim.base_url,
            scheduler=_rate(light_rate),
            max_sessions=light_rate * plan.pick(4, 10),
        ),
        plan.workdir,
        "precision_light",
        root=plan.root,
    )
    _check(light, "precision (light)")
    lf = _requests(light, "generator_delay", "dispatch_lag")
    return Sample(
        {
            "sent_minus_ready_p50_us": _q(df.generator_delay, 0.5) * 1e6,
            "sent_minus_ready_p99_us": _q(df.generator_delay, 0.99) * 1e6,
            "dispatch_lag_p50_us": _q(df.dispatch_lag, 0.5) * 1e6,
            "dispatch_lag_p99_us": _q(df.dispatch_lag, 0.99) * 1e6,
            "vm_steal_pct": m.steal_pct,
            "light_dispatch_lag_p50_us": _q(lf.dispatch_lag, 0.5) * 1e6,
            "light_dispatch_lag_p90_us": _q(lf.dispatch_lag, 0.9) * 1e6,
            "light_dispatch_lag_p99_us": _q(lf.dispatch_lag, 0.99) * 1e6,
            "light_sent_minus_ready_p50_us": _q(lf.generator_delay, 0.5) * 1e6,
        }
    )


def fig_ttfc(plan: Plan, _sim: Simulator) -> Sample:
    with Simulator(timing="fixed", ttft_ms=50.0, itl_ms=5.0) as slow:
        rate = 20
        spec = scenario(
            api_base=slow.base_url, scheduler=_rate(rate), max_sessions=rate * plan.pick(3, 10)
        )
        m = run_veeksha(spec, plan.workdir, "ttfc", root=plan.root)
    _check(m, "ttfc")
    df = _requests(m, "ttfc", "server_ttft")
    bias = (df.ttfc - df.server_ttft) * 1e3
    return Sample(
        {
            "bias_mean_ms": float(bias.mean()),
            "bias_p99_ms": _q(bias, 0.99),
            "vm_steal_pct": m.steal_pct,
        }
    )


def fig_scale(plan: Plan, _sim: Simulator) -> Sample:
    n = plan.pick(5_000, 1_000_000)
    spec = scale_scenario(n, timeout_s=plan.pick(20, 600))
    launched = time.time()  # wall clock of the launch: the RSS samples' origin, within ms
    m = run_veeksha(spec, plan.workdir, "scale", dry_run=True, sample_rss=True, root=plan.root)
    _check(m, "scale")
    path = m.run_dir / "sessions.parquet"
    with pq.ParquetFile(path) as f:
        table = f.read(columns=["started_at", "ended_at"])
    first = float(pc.min(table.column("started_at")).as_py() or 0.0)
    last = float(pc.max(table.column("ended_at")).as_py() or 0.0)
    span = last - first
    done = table.num_rows
    # the traffic part of the samples: from t0 to the last session's end (the evaluation follows)
    meta = pq.read_schema(path).metadata or {}
    t0 = datetime.fromisoformat(meta[b"t0_wall_time"].decode()).timestamp() - launched
    traffic = [s[2] for s in m.rss_samples if t0 <= s[0] <= t0 + last]
    growth = (
        traffic[int(len(traffic) * 0.9)] - traffic[len(traffic) // 4] if len(traffic) > 8 else 0.0
    )
    floor_n = min(n, 200_000)  # (a rate: 200,000 are plenty)
    pool, generation_s = scale_sessions(floor_n)
    floor_s = run_floor(pool, floor_n)[0] + generation_s
    return Sample(
        {
            "sessions": done,
            "sessions_per_s": done / span if span else 0.0,
            "python_floor_sessions_per_s": floor_n / floor_s,
            "peak_main_rss_mb": m.peak_main_rss_mb,
            "traffic_peak_main_rss_mb": max(traffic, default=0.0),
            "main_rss_growth_mb": growth,
        }
    )


def fig_memory(plan: Plan, _sim: Simulator) -> Sample:
    high = plan.pick(300, 1000)
    rampup_s = plan.pick(3.0, 5.0)
    with Simulator(timing="fixed", ttft_ms=0.0, itl_ms=50.0, max_num_seqs=4096) as slow:
        ramp = _hold_streams(plan, slow, high, rampup_s, "memory")
        tree, workers = ramp.per_1000(low=high // 10, high=high)
        # the same at once (no ramp-up): two runs, at 10 and at C streams
        at = {c: _hold_streams(plan, slow, c, 0.0, f"memory{c}").rss_at(c) for c in (10, high)}
    return Sample(
        {
            "rss_mb_per_1000": tree,
            "workers_rss_mb_per_1000": workers,
            "main_rss_mb_per_1000": tree - workers,
            "burst_rss_mb_per_1000": (at[high] - at[10]) / (high - 10) * 1000,
            f"tree_rss_mb@{high}": ramp.rss_at(high),
            f"burst_tree_rss_mb@{high}": at[high],
        }
    )


def _hold_streams(
    plan: Plan, sim: Simulator, streams: int, rampup_s: float, name: str
) -> _InFlightRss:
    """A run that opens ``streams`` long streams (over ``rampup_s``), sampled by its probe."""
    spec = scenario(
        api_base=sim.base_url,
        scheduler={
            "type": "concurrent",
            "target_concurrent_sessions": streams,
            "rampup_seconds": rampup_s,
        },
        max_sessions=-1,
        output_tokens=2000,  # 100 s streams: nothing completes during the run
        timeout_s=rampup_s + plan.pick(2.0, 3.0),
        request_timeout_s=300,
        post_timeout_grace_seconds=0,
    )
    probe = _InFlightRss(sim)
    m = run_veeksha(spec, plan.workdir, name, while_running=probe, root=plan.root)
    _check(m, name)
    return probe


class _InFlightRss:
    """Samples the tree's RSS (and the workers' part of it) beside the number of requests the
    server is running, while a ramp-up raises it: one process tree, so the slope of RSS over
    requests in flight is free of the few MB by which a process' RSS differs between runs."""

    def __init__(self, sim: Simulator) -> None:
        self.url = sim.base_url.removesuffix("/v1") + "/metrics"
        self.samples: list[tuple[int, float, float]] = []  # running, tree MB, workers MB

    def _running(self) -> int:
        with urllib.request.urlopen(self.url, timeout=5) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith("veeksha_sim_num_requests_running{"):
                    return int(float(line.rsplit(" ", 1)[1]))
        return 0

    def __call__(self, proc: Any) -> None:
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                before = self._running()
                procs = [root, *root.children(recursive=True)]
                rss = [(p.memory_info().rss, _is_worker(p)) for p in procs]
                after = self._running()
                if before == after:  # (no request started while the processes were read)
                    tree = sum(r for r, _ in rss) / 2**20
                    self.samples.append((after, tree, sum(r for r, w in rss if w) / 2**20))
            except (OSError, psutil.NoSuchProcess):
                pass
            time.sleep(0.05)

    def per_1000(self, low: int, high: int) -> tuple[float, float]:
        """Least-squares slopes (MB per 1,000 in flight) of the tree's and the workers' RSS over
        the samples with ``low`` to ``high`` requests running."""
        points = [s for s in self.samples if low <= s[0] <= high]
        if len(points) < 3 or len({s[0] for s in points}) < 2:
            return float("nan"), float("nan")
        running = [float(s[0]) for s in points]
        tree = statistics.linear_regression(running, [s[1] for s in points]).slope
        workers = statistics.linear_regression(running, [s[2] for s in points]).slope
        return tree * 1000, workers * 1000

    def rss_at(self, running: int) -> float:
        """Median tree RSS (MB) of the samples with ``running`` requests running."""
        at = [s[1] for s in self.samples if s[0] == running]
        return statistics.median(at) if at else float("nan")


def _is_worker(proc: Any) -> bool:
    """A worker: forked from veeksha's main process (named ``veeksha-worker``: veeksha.forked)
    or a fresh interpreter (its command line)."""
    try:
        return proc.name() == "veeksha-worker" or "veeksha.dispatch.worker" in proc.cmdline()
    except (OSError, psutil.NoSuchProcess):
        return False


def fig_streams(plan: Plan, _sim: Simulator) -> Sample:
    configs = quick_configs() if plan.quick else list(FULL)
    return Sample(streams_figure(plan.workdir, plan.pick(3.0, 6.0), configs))


def fig_ray(plan: Plan, sim: Simulator) -> Sample:
    """The Ray path's overhead on one host (``benchmarks.ray_overhead``, which defines the
    values): a plain run and a ``--ray local`` run of one shard. Needs ``veeksha[ray]``."""
    from benchmarks.ray_overhead import overhead_sample

    rate, seconds = plan.pick(100.0, 200.0), plan.pick(3.0, 5.0)
    values = overhead_sample(plan.workdir / "ray", sim.base_url, rate, seconds)
    return Sample(values, [] if values else ["Ray is not installed: pip install -e '.[ray]'"])


#: Figures measured fewer times than ``--repeats`` asks (their one run is long).
REPEATS: dict[str, int] = {"scale": 1, "trace": 1, "ray": 1}

#: Figures left out of ``--quick`` unless named (each takes well over a minute).
SLOW: frozenset[str] = frozenset({"trace", "ray"})

FIGURES: dict[str, Callable[[Plan, Simulator], Sample]] = {
    "imports": fig_imports,
    "startup": fig_startup,
    "startup_plots": fig_startup_plots,
    "cpu": fig_cpu,
    "mainrate": fig_mainrate,
    "rate": fig_rate,
    "closed": fig_closed,
    "precision": fig_precision,
    "ttfc": fig_ttfc,
    "streams": fig_streams,
    "scale": fig_scale,
    "memory": fig_memory,
    "trace": fig_trace,
    "agents": fig_agents,
    "ray": fig_ray,
}
