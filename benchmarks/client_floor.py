"""How little CPU a bare Python open-loop streaming client needs: the ``cpu`` figure's floor.

    python -m benchmarks.client_floor [--rate 500] [--seconds 20] [--repeats 3] [--no-append]

The ``cpu`` figure (``benchmarks.figures.fig_cpu``) measures veeksha's whole process tree per
1,000 requests at an open-loop 500 req/s for 20 s (completions API, 128-token prompts, 32
streamed tokens, the built-in simulator's fast preset in its own process on the same cores).
Issue 20 item 3 sets it a target of 0.3 CPU-s. This script measures, in the same conditions and
the same invocation, what CPython itself costs for that traffic with nothing of veeksha in it: one
process (no hand-over, no main process, no Parquet, no evaluation), uvloop, one ``call_at`` per
release on a fixed 2-ms grid, a prebuilt request written on a kept-alive connection, and per read
only what any client measuring TTFC and TBC must do: stamp the read, split its SSE events and
decode each (msgspec) to count the text, and per request keep one tuple. Two variants:

- ``bare``: exactly that;
- ``bare_no_decode``: the events counted by ``bytes.count`` and not decoded (a client that could
  not tell a token from an error: below what a benchmark may do, shown as the floor's floor).

Both run as a fresh interpreter (``benchmarks/bare_client.py``), so their figure includes an
interpreter's start-up and imports as the ``cpu`` figure includes veeksha's; the child's CPU is
read from outside (``RUSAGE_CHILDREN``). veeksha's own ``cpu`` figure runs alternately with them
in the same invocation.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.figures import Plan, fig_cpu
from benchmarks.harness import ROOT, Simulator, machine
from benchmarks.report import append

_CLIENT = Path(__file__).with_name("bare_client.py")


def run_floor(base_url: str, rate: float, seconds: float, decode: bool) -> dict[str, float]:
    """One bare client run: its whole CPU from outside, per 1,000 requests."""
    host_port = base_url.removeprefix("http://").split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [sys.executable, str(_CLIENT), host, port, str(rate), str(seconds), str(int(decode))],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds * 3 + 30,
        env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"cpu_s_per_1000": cpu * 1000.0 / result["requests"], **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-append", action="store_true", help="print only")
    args = parser.parse_args()
    figures: dict[str, list[float]] = {"veeksha": [], "bare": [], "bare_no_decode": []}
    with tempfile.TemporaryDirectory() as tmp, Simulator() as sim:
        plan = Plan(quick=False, workdir=Path(tmp), repeats=1, root=ROOT)
        for rep in range(args.repeats):
            order = ["veeksha", "bare", "bare_no_decode"]
            for name in order[rep % 3 :] + order[: rep % 3]:
                if name == "veeksha":
                    value = fig_cpu(plan, sim).values["cpu_s_per_1000"]
                else:
                    value = run_floor(sim.base_url, args.rate, args.seconds, name == "bare")[
                        "cpu_s_per_1000"
                    ]
                figures[name].append(value)
                print(f"[{rep + 1}/{args.repeats}] {name}: {value:.3f} CPU-s per 1,000 requests")
    rows = [
        f"| {name} | {statistics.median(v):.3f} ({min(v):.3f}–{max(v):.3f}) |"
        for name, v in figures.items()
    ]
    table = "\n".join(
        [
            "| client | CPU-s per 1,000 requests, median (min–max) |",
            "|---|---:|",
            *rows,
        ]
    )
    print(table)
    if not args.no_append:
        m = machine()
        append(
            f"## Bare Python client floor at {args.rate:g} req/s (benchmarks.client_floor)"
            f" — {m.date}\n\n{m.line()}\n\n{table}\n"
        )


if __name__ == "__main__":
    t = time.monotonic()
    main()
    print(f"{time.monotonic() - t:.0f} s")
