"""Where the wall time of a short ``veeksha run`` goes, in stretches cut at run.log's lines.

``python -m benchmarks.startup_stretches [--repeats N] [--sessions N] [--rate R]``: the
start-up figure's run (20 single requests at 10 req/s by default) against the built-in
simulator, PYTHONDONTWRITEBYTECODE=1, timed from the command's start to its exit and cut at
run.log's first line (interpreter, scenario, engine imported, run folder), "workers ready"
(target, sessions' source, workers), t0 (the fixed lead), "ended" (arrivals, drain, last
scrape, evaluation) and the exit. Prints the medians (s); appends nothing. The run's
``veeksha`` is this checkout's (run from its folder, as ``benchmarks.harness.run_veeksha``
does), whichever interpreter runs it: to compare revisions, run each checkout's copy.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.process_split import startup_run_args

STRETCHES = ("to_first_log", "to_workers_ready", "to_t0", "to_ended", "to_exit", "total")


def _stamp(line: str, day: datetime) -> float:
    """run.log's ``HH:MM:SS.mmm`` (UTC) on ``day`` as a Unix time."""
    clock = datetime.strptime(line[:12], "%H:%M:%S.%f").time()
    return datetime.combine(day.date(), clock, tzinfo=UTC).timestamp()


def measure(spec: dict[str, object], workdir: Path) -> dict[str, float]:
    """One run: the seconds of each stretch."""
    folder = Path(tempfile.mkdtemp(prefix="stretch", dir=workdir))
    path = folder / "scenario.json"
    path.write_text(json.dumps(spec))
    # (from this checkout's folder, without PYTHONPATH: this checkout's veeksha runs, not the
    # interpreter's own install of it)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [sys.executable, "-m", "veeksha.cli", "run", str(path), "--output-dir", str(folder)]
    start = time.time()
    subprocess.run(
        [*command, "-q", "--no-plots"], env=env, check=True, capture_output=True, cwd=ROOT
    )
    end = time.time()
    (log,) = folder.glob("*/run.log")
    lines = log.read_text().splitlines()
    day = datetime.fromtimestamp(start, UTC)
    first = _stamp(lines[0], day)
    ready = next(_stamp(line, day) for line in lines if "workers ready" in line)
    t0_line = next(line for line in lines if " t0 = " in line)
    t0 = datetime.fromisoformat(t0_line.split(" t0 = ")[1]).timestamp()
    ended = next(_stamp(line, day) for line in lines if " ended (" in line)
    marks = [start, first, ready, t0, ended, end]
    parts = [b - a for a, b in itertools.pairwise(marks)]
    return dict(zip(STRETCHES, [*parts, end - start], strict=True))


def main() -> None:
    args, spec = startup_run_args(__doc__ or "")
    samples = [measure(spec, args.workdir) for _ in range(args.repeats)]
    for key in STRETCHES:
        values = [sample[key] for sample in samples]
        shown = ", ".join(f"{v:.3f}" for v in values)
        print(f"{key:16} median {statistics.median(values):.3f}  ({shown})")


if __name__ == "__main__":
    main()
