"""CPU-s of each process of one ``veeksha run`` tree, by kind: the main process, the workers,
the built-in simulator, the server watch (``veeksha.server.watch_process``).

``python -m benchmarks.process_split [--repeats N] [--sessions N] [--rate R]``: a run of
single requests (the start-up figure's scenario by default: 20 at 10 req/s) against the
built-in simulator, its process tree polled every 5 ms (psutil): each process' last CPU reading
before it exits (up to 5 ms of a process' CPU can be missed: ``unseen`` is the tree's total from
``getrusage`` minus the sum). Prints the medians; appends nothing. Run it with another
checkout's interpreter (its own venv, whose editable install points at that checkout: the
watch's process runs ``python -I``, which ignores PYTHONPATH) to compare revisions.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.harness import scenario


def _kind(cmdline: list[str], name: str = "") -> str:
    """A process' kind by its command line (a fresh interpreter) or its name (a process
    forked from veeksha's main one names itself: ``veeksha.forked``)."""
    text = " ".join([name, *cmdline])
    for needle, kind in (
        ("veeksha-wor", "workers"),
        ("veeksha-wat", "watch"),
        ("veeksha-sim", "simulator"),
        ("veeksha.dispatch.worker", "workers"),
        ("watch_process", "watch"),
        ("veeksha.simulator", "simulator"),
        ("veeksha.cli", "main"),
    ):
        if needle in text:
            return kind
    return "other"


def measure(spec: dict[str, object], workdir: Path) -> dict[str, float]:
    """One run: CPU-s by process kind, the tree's total and the wall time."""
    folder = Path(tempfile.mkdtemp(prefix="split", dir=workdir))
    path = folder / "scenario.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "veeksha.cli", "run", str(path), "--output-dir", str(folder)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.Popen(
        [*command, "-q", "--no-plots"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    last: dict[int, float] = {}
    kinds: dict[int, str] = {}
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []
        for child in tree:
            try:
                times = child.cpu_times()
                last[child.pid] = times.user + times.system
                # (asked each time: a child just forked still shows veeksha's command line
                # and name, one that has exited none)
                kind = "main" if child.pid == proc.pid else _kind(child.cmdline(), child.name())
                if kind != "other" or child.pid not in kinds:
                    kinds[child.pid] = kind
            except psutil.Error:
                pass
        time.sleep(0.005)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 4):
        assert proc.stderr is not None
        raise SystemExit(f"veeksha exited {proc.returncode}: {proc.stderr.read()[-2000:]!r}")
    parts: dict[str, float] = collections.Counter()
    for pid, cpu in last.items():
        parts[kinds.get(pid, "other")] += cpu
    total = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    parts["unseen"] = total - sum(parts.values())
    parts["tree"] = total
    parts["wall_s"] = wall
    return dict(parts)


def startup_run_args(doc: str) -> tuple[argparse.Namespace, dict[str, object]]:
    """The command line of a start-up benchmark (``--repeats``, ``--sessions``, ``--rate``,
    ``--workdir``) and its run's scenario: single requests against the built-in simulator."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rate", type=float, default=10.0)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    interval = {"type": "fixed", "interval": 1.0 / args.rate}
    spec = scenario(
        api_base=None,
        scheduler={"type": "rate", "interval_generator": interval},
        max_sessions=args.sessions,
    )
    return args, spec


def main() -> None:
    args, spec = startup_run_args(__doc__ or "")
    samples = [measure(spec, args.workdir) for _ in range(args.repeats)]
    keys = sorted({key for sample in samples for key in sample})
    for key in keys:
        values = [sample.get(key, 0.0) for sample in samples]
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"{key:10} median {statistics.median(values):.3f}  ({shown})")


if __name__ == "__main__":
    main()
