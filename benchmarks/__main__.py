"""Run veeksha's own benchmarks against the simulator and append the figures to BENCHMARKS.md.

    python -m benchmarks [NAME ...] [--quick] [--no-append] [--repeats N] [--rates R,R,...]
                         [--against REVISION]

NAMEs: imports startup startup_plots cpu mainrate rate closed precision ttfc streams scale memory
trace agents ray (default: all; ``--quick`` leaves out trace and ray unless named).
``--against REV`` measures that revision's ``veeksha`` side by side in the same invocation (its
package from ``git archive``, run by this interpreter): each repetition runs each figure for
both, in alternating order, and the table shows both medians. ``--quick`` uses short runs and
one repetition (under a minute; what CI runs, with ``--no-append``): it prints the figures and
never fails on them, since a slow or busy machine must not break the build. See
``benchmarks/figures.py`` for the definitions and ``benchmarks/harness.py`` for the method.
"""

from __future__ import annotations

import argparse
import compileall
import sys
import tempfile
import time
import traceback
from pathlib import Path

from benchmarks.figures import FIGURES, REPEATS, SLOW, Plan, Sample
from benchmarks.harness import ROOT, Simulator, baseline_tree, machine
from benchmarks.report import append, render


def _warm_bytecode(package: Path) -> None:
    """Compile ``package``'s missing or stale bytecode (what ``veeksha.bytecode.warm`` does after
    a run): a baseline extracted by ``git archive`` has none, and with PYTHONDONTWRITEBYTECODE
    its every process would compile every module, which a user's install does only once."""
    compileall.compile_dir(package, quiet=2, workers=1)


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the figures, print the table and append it (unless told not)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"of: {' '.join(FIGURES)}")
    parser.add_argument("--quick", action="store_true", help="short runs, one repetition")
    parser.add_argument("--no-append", action="store_true", help="print only")
    parser.add_argument("--repeats", type=int, default=None, help="default 3; quick 1")
    parser.add_argument(
        "--rates",
        type=_rates,
        default=None,
        help="the rate figure's ladder, e.g. 4000,6000,8000 (default 500 to 4,000 by 500)",
    )
    parser.add_argument(
        "--against",
        metavar="REVISION",
        default=None,
        help="also measure this git revision, alternating with this checkout (e.g. HEAD~1)",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {unknown}; choose from {' '.join(FIGURES)}")
    names = args.names or [n for n in FIGURES if not (args.quick and n in SLOW)]
    repeats = args.repeats or (1 if args.quick else 3)
    results: dict[str, list[Sample]] = {}
    before: dict[str, list[Sample]] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="veeksha-bench-") as tmp, Simulator() as sim:
        trees = [("", ROOT, results)]
        against = None
        if args.against is not None:
            tree, against = baseline_tree(args.against, Path(tmp) / "baseline")
            trees.append((f" {against}", tree, before))
        for _, root, _ in trees:  # both warm, as a user's install is from its second run on
            _warm_bytecode(root / "veeksha")
        # one figure after the other, repeated round-robin so drift spreads over all of them;
        # side by side, the two trees alternate which goes first
        for rep in range(repeats):
            for name in names:
                if rep >= REPEATS.get(name, repeats):
                    continue
                for label, root, into in trees if rep % 2 == 0 else trees[::-1]:
                    plan = Plan(
                        quick=args.quick,
                        workdir=Path(tmp) / (label.strip() or "this"),
                        repeats=repeats,
                        rates=args.rates,
                        root=root,
                    )
                    _measure(name, plan, sim, rep, label, into)
    command = "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(
        results,
        machine(),
        command.strip(),
        args.quick,
        baseline=(against, before) if against else None,
    )
    print()
    print(text)
    print(f"total {time.monotonic() - started:.0f} s")
    if not args.no_append:
        append(text)
    return 0


def _measure(
    name: str, plan: Plan, sim: Simulator, rep: int, label: str, into: dict[str, list[Sample]]
) -> None:
    """One repetition of one figure into ``into``; a failure is printed, not raised."""
    t = time.monotonic()
    try:
        sample = FIGURES[name](plan, sim)
    except Exception:  # noqa: BLE001 - one broken figure must not hide the others
        print(f"[{name}{label}] failed:\n{traceback.format_exc()}", file=sys.stderr)
        return
    into.setdefault(name, []).append(sample)
    values = ", ".join(f"{k}={v:.4g}" for k, v in sample.values.items())
    print(f"[{name}{label} #{rep + 1}] {values} ({time.monotonic() - t:.1f} s)", flush=True)


def _rates(text: str) -> list[int]:
    """``--rates``: comma-separated positive integers, ascending (the ladder stops at the first
    rate that does not hold)."""
    try:
        rates = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not rates or min(rates) <= 0 or rates != sorted(rates):
        raise argparse.ArgumentTypeError(f"want ascending positive rates, got {text!r}")
    return rates


if __name__ == "__main__":
    sys.exit(main())
