"""Cost and precision of the dispatch layer alone (WorkerPool + workers), against the simulator.

    python -m benchmarks.dispatch_overhead [--requests 5000] [--rate 500] [--workers 1]
                                           [--output-tokens 32] [--chat] [--dry-run]

Releases single-message streaming requests (completions API, ~128-token prompts, 32 output
tokens) open-loop on an absolute schedule (``t0 + i / rate``) from one uvloop event loop, straight
into ``WorkerPool.submit`` (no session generation, no recording), against the built-in simulator
(fast preset) in its own process. Prints, per 1,000 completed requests, the CPU seconds of the
worker processes and of the main process (start-up excluded: measured from the first release to
the last Result), the simulator's CPU beside them, and the latency percentiles of
ready → dispatched → received (worker) → sent (request written) in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import psutil
import uvloop

from veeksha.dispatch.affinity import pin_current_process, plan_affinity
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.pool import WorkerPool
from veeksha.dispatch.settings import WorkerSettings
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess

PROMPT = " ".join(f"word{i % 50}" for i in range(128))


def _cpu(pids: list[int]) -> float:
    return sum(_cpu_split(pids))


def _cpu_split(pids: list[int]) -> tuple[float, float]:
    """(user, system) CPU seconds of ``pids`` so far."""
    user = system = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        user += t.user
        system += t.system
    return user, system


def _pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000.0


async def run(args: argparse.Namespace, api_base: str, sim_pid: int | None) -> None:
    plan = plan_affinity("off" if args.no_pin else "auto", args.workers)
    pin_current_process(plan.main_cpus)
    settings = WorkerSettings(
        endpoint=api_base + ("/chat/completions" if args.chat else "/completions"),
        model="veeksha-sim",
        chat=args.chat,
        max_tokens_param="max_tokens",
        request_timeout_s=30,
        dry_run=args.dry_run,
    )
    results: list[Result] = []
    done = asyncio.Event()
    expected = args.workers * 4  # the warm-up first, then the measured requests

    def on_results(batch: list[Result]) -> None:
        results.extend(batch)
        if len(results) >= expected:
            done.set()

    pool = WorkerPool(settings, args.workers, plan.worker_cpus, on_results)
    await pool.start()
    loop = asyncio.get_running_loop()
    ready_at: dict[int, int] = {}
    dispatched_at: dict[int, int] = {}
    messages = [("user", PROMPT)]
    # warm the keep-alive connections so start-up is not billed to the measured window
    for i in range(args.workers * 4):
        pool.submit(WorkItem(-1 - i, messages, args.output_tokens, time.monotonic_ns()))
    await asyncio.wait_for(done.wait(), 30)
    results.clear()
    done.clear()
    expected = args.requests

    worker_pids = list(pool.worker_pids.values())
    cpu0_workers = _cpu_split(worker_pids)
    cpu0_main = time.process_time()
    cpu0_sim = _cpu([sim_pid]) if sim_pid else 0.0
    gap_ns = int(1e9 / args.rate)
    t0 = time.monotonic_ns() + 10_000_000

    def release(i: int) -> None:
        now = time.monotonic_ns()
        dispatched_at[i] = now
        pool.submit(WorkItem(i, messages, args.output_tokens, now))
        nxt = i + 1
        if nxt < args.requests:
            ready_at[nxt] = t0 + nxt * gap_ns
            loop.call_at(loop.time() + (ready_at[nxt] - time.monotonic_ns()) / 1e9, release, nxt)

    ready_at[0] = t0
    loop.call_at(loop.time() + (t0 - time.monotonic_ns()) / 1e9, release, 0)
    await asyncio.wait_for(done.wait(), args.requests / args.rate + 60)
    elapsed = (time.monotonic_ns() - t0) / 1e9
    user, system = (b - a for a, b in zip(cpu0_workers, _cpu_split(worker_pids), strict=True))
    cpu_workers = user + system
    cpu_main = time.process_time() - cpu0_main
    cpu_sim = (_cpu([sim_pid]) - cpu0_sim) if sim_pid else 0.0
    await pool.stop()

    ok = [r for r in results if r.status == "ok"]
    per_k = 1000.0 / len(results)
    print(
        f"{len(results)} requests ({len(ok)} ok) in {elapsed:.2f} s at {args.rate:g}/s, "
        f"{args.workers} worker(s), {'chat' if args.chat else 'completions'}, "
        f"{'dry run' if args.dry_run else 'streaming'}"
    )
    print(
        f"CPU-s per 1,000: workers {cpu_workers * per_k:.3f} (user {user * per_k:.3f}, "
        f"system {system * per_k:.3f}), main {cpu_main * per_k:.3f},"
    )
    print(f"                 simulator {cpu_sim * per_k:.3f} (not veeksha)")
    rows = {
        "ready→dispatched": [dispatched_at[r.request_id] - ready_at[r.request_id] for r in ok],
        "dispatched→received": [r.received_at_ns - dispatched_at[r.request_id] for r in ok],
        "received→sent": [r.sent_at_ns - r.received_at_ns for r in ok],
        "dispatched→sent": [r.sent_at_ns - dispatched_at[r.request_id] for r in ok],
        "ready→sent": [r.sent_at_ns - ready_at[r.request_id] for r in ok],
        "ttfc (sent→first)": [(r.first_chunk_at_ns or 0) - r.sent_at_ns for r in ok],
    }
    for name, values in rows.items():
        if values:
            print(
                f"  {name:<20} p50 {_pct(values, 0.5):9.1f} µs  p99 {_pct(values, 0.99):9.1f} µs"
                f"  max {max(values) / 1000:9.1f} µs"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--chat", action="store_true")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--no-pin", action="store_true")
    args = parser.parse_args()
    with SimulatorProcess(SimulatorConfig()) as sim:
        assert sim.base_url is not None
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run(args, sim.base_url, sim.pid))


if __name__ == "__main__":
    main()
