"""What the scenario's models cost a process to build: importing them, and loading a scenario.

    python -m benchmarks.scenario_models [--repeats 10] [--against PYTHON] [--callgrind]

Each figure is a fresh interpreter (PYTHONDONTWRITEBYTECODE=1, PYDANTIC_DISABLE_PLUGINS=__all__,
run outside the checkout so that the interpreter's own install of veeksha is what runs; bytecode
as the install has it), its CPU read from the parent's ``RUSAGE_CHILDREN``:

* ``bare``: ``python -c pass`` (the interpreter alone);
* ``pydantic``: ``import pydantic``;
* ``cli``: importing ``veeksha.cli``, setting its library defaults and turning the collector off
  (as ``veeksha run`` does before it reads a scenario; pydantic's plugin loader is stubbed, which
  spares ``importlib.metadata``);
* ``models``: ``cli``, then ``import veeksha.scenario.models``;
* ``load``: ``cli``, then ``load_scenario`` of scenarios/quickstart.yaml (the models, the YAML
  reader, the validation).

``models`` less ``cli`` is what building the scenario's models costs a run.

``--against PYTHON`` runs the same figures with another checkout's interpreter (e.g.
``/work/main/.venv/bin/python``), alternating, which goes first swapped each repetition; the
table shows both medians. ``--callgrind`` adds the instruction counts of ``models`` and
``load`` (one run each under valgrind, far less noisy than CPU time on a shared machine).
Prints; appends nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"

#: What ``veeksha run`` does before it reads a scenario (the CLI; pydantic's plugin loader
#: stubbed, the collector off).
CLI = "import gc, veeksha.cli; veeksha.cli.set_library_defaults(); gc.disable(); "
SNIPPETS = {
    "bare": "pass",
    "pydantic": "import pydantic",
    "cli": CLI,
    "models": CLI + "import veeksha.scenario.models",
    "load": CLI
    + "from veeksha.scenario.loader import load_scenario; "
    + f"load_scenario({str(QUICKSTART)!r})",
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    return env


def cpu_seconds(python: str, snippet: str) -> float:
    """User + system CPU seconds of one fresh interpreter running ``snippet``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as cwd:
        subprocess.run([python, "-c", snippet], env=_env(), cwd=cwd, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(python: str, snippet: str) -> int:
    """Instructions (callgrind's Ir) of one fresh interpreter running ``snippet``."""
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(
            [
                *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"),
                *(python, "-c", snippet),
            ],
            env=_env(),
            cwd=cwd,
            check=True,
            capture_output=True,
            text=True,
        )
    match = re.search(r"Collected : (\d+)", done.stderr)
    if match is None:
        raise RuntimeError(done.stderr[-2000:])
    return int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    """Measure, alternating the interpreters, and print the medians."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--against", default=None, help="another checkout's python")
    parser.add_argument("--callgrind", action="store_true", help="also count instructions")
    parser.add_argument("--only", default=",".join(SNIPPETS), help="figures, comma-separated")
    args = parser.parse_args(argv)
    pythons = {"this": sys.executable}
    if args.against:
        pythons["against"] = args.against
    names = args.only.split(",")
    samples: dict[tuple[str, str], list[float]] = {}
    for repeat in range(args.repeats):
        order = list(pythons.items())
        if repeat % 2:
            order.reverse()
        for name in names:
            for side, python in order:
                samples.setdefault((side, name), []).append(cpu_seconds(python, SNIPPETS[name]))
    if args.repeats:
        print(f"CPU-s, median (min-max) of {args.repeats}")
    for name in names if args.repeats else ():
        cells = []
        for side in pythons:
            values = samples[(side, name)]
            cells.append(
                f"{side} {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
            )
        print(f"  {name:9s} " + "   ".join(cells))
    if args.callgrind:
        print("instructions (callgrind Ir, millions)")
        for name in ("cli", "models", "load"):
            cells = [
                f"{side} {instructions(python, SNIPPETS[name]) / 1e6:,.0f} M"
                for side, python in pythons.items()
            ]
            print(f"  {name:9s} " + "   ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
