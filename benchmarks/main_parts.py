"""Where the main process' CPU goes during an open-loop run, per part.

    python -m benchmarks.main_parts [--rate 500] [--seconds 10] [--repeats 3]
                                    [--python PATH] [--root PATH] [--against ROOT]

A run of single requests at a constant rate against the built-in simulator (the ``mainrate``
figure's scenario, ``benchmarks.figures``) in its own process. The main process is veeksha's
own ``veeksha run`` with a few of its methods wrapped (``PARTS``): each wrapper adds the main
thread's CPU time (``time.thread_time_ns``, ~0.3 µs a call) spent inside the method, so the
parts are *inclusive* and exact, not sampled; nested parts are subtracted from their parents
in the table (``exclusive``). The whole main thread from ``TrafficLoop.start`` to the end of
the traffic (``LoopTimers.close``) and the process' other threads (the Parquet writer, the
server watch's reader) over the same span close the account; ``event loop + rest`` is the
main thread's CPU outside every wrapped part (uvloop's C loop, epoll, callbacks not wrapped).
Wrapping costs its own CPU (two clock reads per call): the totals are a little above an
unwrapped run's ``main_cpu_s``. The Results' wake-ups are counted whole (a normal link's
batch, the bulk links' timer: read, decode, loop and rows); the bulk links' reads at an arrival
are inside ``arrivals``; decode, the loop and the rows are also shown as "(in several)" parts,
wherever they ran.

``--python``/``--root`` measure another checkout (its interpreter and its source tree);
``--against ROOT`` runs another tree (e.g. ``git archive main veeksha`` extracted into ROOT)
alternating with it, one column each. A method a tree does not have is left out. Prints a table
of medians (CPU-µs per request); appends nothing. The exclusive parts and ``event loop + rest``
assume the tree's call structure of ``PARTS`` (e.g. ``session_done`` inside ``on_results``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import ROOT, Simulator, scenario

# (label, module, class, method, parent): the main thread's inclusive CPU inside the method; a
# part's parent is the part it always runs in ("" for a callback of the event loop itself);
# parent "*": called from several parts, shown as is and not added up
PARTS: tuple[tuple[str, str, str, str, str], ...] = (
    # the Results' wake-ups, whole (read, decode, loop, rows): a normal link's batch, and the
    # bulk links' timer (Results nobody waits for, read on the main process' own cadence)
    ("results: normal link wake-up", "veeksha.dispatch.channel", "Link", "_on_readable", ""),
    ("results: bulk timer wake-up", "veeksha.dispatch.pool", "WorkerPool", "_on_bulk_timer", ""),
    ("(in several) bulk links read", "veeksha.dispatch.pool", "WorkerPool", "_bulk_results", "*"),
    ("(in several) decode", "veeksha.dispatch.channel", "Link", "_frames", "*"),
    ("(in several) results: loop", "veeksha.engine.loop", "TrafficLoop", "on_results", "*"),
    (
        "row: recorder",
        "veeksha.engine.recorder",
        "RunRecorder",
        "request_done",
        "(in several) results: loop",
    ),
    ("row: columns", "veeksha.record.columnar", "RequestColumns", "add_result", "row: recorder"),
    ("row: streaming", "veeksha.evaluate.streaming", "StreamingMetrics", "add", "row: recorder"),
    (
        "row: session",
        "veeksha.engine.recorder",
        "RunRecorder",
        "session_done",
        "(in several) results: loop",
    ),
    ("timers: fire", "veeksha.timers", "LoopTimers", "_on_fire", ""),
    (
        "arrivals",
        "veeksha.engine.session_starts",
        "SessionStarts",
        "_on_arrival_timer",
        "timers: fire",
    ),
    ("dispatch timer", "veeksha.engine.loop", "TrafficLoop", "_on_dispatch_timer", "timers: fire"),
    ("progress line", "veeksha.engine.progress", "ProgressLine", "_emit", ""),
    (
        "(in several) session start",
        "veeksha.engine.session_starts",
        "SessionStarts",
        "_start_session",
        "*",
    ),
    ("(in several) dispatch", "veeksha.engine.loop", "TrafficLoop", "_dispatch", "*"),
    ("(in several) flush to workers", "veeksha.dispatch.pool", "WorkerPool", "flush", "*"),
    (
        "(in several) arm dispatch timer",
        "veeksha.engine.loop",
        "TrafficLoop",
        "_arm_dispatch_timer",
        "*",
    ),
)

# run inside the measured ``veeksha run``: wraps PARTS, prints the account as JSON at the end
_CHILD = r"""
import atexit, importlib, json, sys, threading, time, os
parts = json.loads(sys.argv.pop(1))
out = sys.argv.pop(1)
acc = {}
calls = {}
depth = {}
main = threading.main_thread()
tt = time.thread_time_ns

def wrap(label, owner, name):
    fn = owner.__dict__.get(name)
    if fn is None:
        return
    acc[label] = 0
    calls[label] = 0
    depth[label] = 0

    def wrapper(*args, **kwargs):
        if depth[label] or threading.current_thread() is not main:
            return fn(*args, **kwargs)
        depth[label] = 1
        t = tt()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[label] += tt() - t
            calls[label] += 1
            depth[label] = 0

    setattr(owner, name, wrapper)

for label, module, cls, name, _parent in parts:
    try:
        owner = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError):
        continue
    wrap(label, owner, name)

span = {}
import gc
gc_at = [0]
acc["(in several) collector passes"] = 0
calls["(in several) collector passes"] = 0

def on_gc(phase, info):
    if threading.current_thread() is not main or "main0" not in span or "main1" in span:
        return
    if phase == "start":
        gc_at[0] = tt()
    elif gc_at[0]:
        acc["(in several) collector passes"] += tt() - gc_at[0]
        calls["(in several) collector passes"] += 1

gc.callbacks.append(on_gc)

def threads_ns():
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total * 1_000_000_000 // os.sysconf("SC_CLK_TCK")

from veeksha.engine.loop import TrafficLoop
from veeksha.timers import LoopTimers
start, close = TrafficLoop.start, LoopTimers.close

def on_start(self, t0_ns):
    span["main0"], span["proc0"] = tt(), time.process_time_ns()
    return start(self, t0_ns)

def on_close(self):
    if "main0" in span and "main1" not in span:
        span["main1"], span["proc1"] = tt(), time.process_time_ns()
    return close(self)

TrafficLoop.start, LoopTimers.close = on_start, on_close

def dump():
    with open(out, "w") as f:
        json.dump({"span": span, "acc": acc, "calls": calls}, f)

atexit.register(dump)
from veeksha.cli import main as cli_main
sys.argv[0] = "veeksha"
cli_main(prog_name="veeksha")
"""


def measure(sim: Simulator, rate: int, seconds: int, python: str, root: Path) -> dict[str, float]:
    """One run: each part's CPU-µs per request (exclusive of its wrapped children)."""
    folder = Path(tempfile.mkdtemp(prefix="parts"))
    spec = scenario(
        api_base=sim.base_url,
        scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 1 / rate}},
        max_sessions=rate * seconds,
    )
    path = folder / "scenario.json"
    path.write_text(json.dumps(spec))
    account = folder / "account.json"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    parts = json.dumps([list(p) for p in PARTS])
    cmd = [python, "-c", _CHILD, parts, str(account), "run", str(path)]
    subprocess.run(
        [*cmd, "--output-dir", str(folder), "-q", "--no-plots"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        check=True,
        timeout=seconds + 120,
    )
    data = json.loads(account.read_text())
    span, acc = data["span"], data["acc"]
    requests = rate * seconds
    scale = 1e-3 / requests  # ns → µs per request
    main_ns = span["main1"] - span["main0"]
    proc_ns = span["proc1"] - span["proc0"]
    values: dict[str, float] = {}
    for label, *_rest in PARTS:
        if label not in acc:
            continue
        children = sum(acc.get(c, 0) for c, *_r, p in PARTS if p == label)
        values[label] = (acc[label] - children) * scale
    top = sum(acc.get(label, 0) for label, *_r, parent in PARTS if parent == "")
    if "(in several) collector passes" in acc:
        values["(in several) collector passes"] = acc["(in several) collector passes"] * scale
    values["event loop + rest"] = (main_ns - top) * scale
    values["main thread"] = main_ns * scale
    values["other threads"] = (proc_ns - main_ns) * scale
    values["total (process)"] = proc_ns * scale
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run")
    parser.add_argument("--root", type=Path, default=ROOT, help="its source tree")
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        metavar="ROOT",
        help="another source tree (e.g. a git archive of main), run alternating with --root",
    )
    args = parser.parse_args()
    roots = [args.root] if args.against is None else [args.against, args.root]
    samples: dict[Path, list[dict[str, float]]] = {root: [] for root in roots}
    with Simulator() as sim:
        for rep in range(args.repeats):
            for root in roots if rep % 2 == 0 else roots[::-1]:
                values = measure(sim, args.rate, args.seconds, args.python, root)
                samples[root].append(values)
                print(root, json.dumps({k: round(v, 1) for k, v in values.items()}), flush=True)
    print(f"main process, CPU-µs per request at {args.rate} req/s ({args.repeats} runs, medians)")
    names = list(samples[roots[-1]][0])
    print("| part | " + " | ".join(str(r) for r in roots) + " |")
    print("|---|" + "---:|" * len(roots))
    for name in names:
        cells = [statistics.median(s.get(name, 0.0) for s in samples[r]) for r in roots]
        print(f"| {name} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
