"""trace.jsonl's writer: CPU per line of ``add`` (on the event loop) and of ``flush`` (on the
results writer thread), and bytes per line, for this checkout and another revision's writer.

    python -m benchmarks.trace_writer [--against main] [--lines 100000] [--repeats 7] [--append]

Each repetition writes ``--lines`` lines of each kind (an LLM request; the same with several
clients, so the line names its client; a tool node) with each writer, alternating, and takes
CPU time (``time.process_time``); the table shows medians. The other revision's
``veeksha/record/trace.py`` is loaded from git beside this checkout's package (the rest of the
package is this checkout's), so only the writer differs.
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.harness import machine
from benchmarks.report import append
from benchmarks.revision import module_at
from veeksha.dispatch.messages import WorkItem
from veeksha.generate.spec import NodeSpec
from veeksha.record import trace as this_trace

KINDS = ("llm", "llm, 2 clients", "tool")


def _figure(module: ModuleType, kind: str, lines: int, folder: Path) -> tuple[float, float, float]:
    """(add ns/line, flush ns/line, bytes/line) of one writer and line kind."""
    if kind == "tool":
        node = NodeSpec(2, (0,), 0, 0.25, "a result", 8, 8, kind="tool", latency_s=0.05)
        items = [WorkItem(i, [], 8, 1_000_000 + i) for i in range(lines)]
    else:
        node = NodeSpec(1, (0,), 0, 0.25, "hello", 20, 3)
        items = [WorkItem(i, [("user", "x")], 3, 1_000_000 + i) for i in range(lines)]
    clients = ["a", "b"] if kind == "llm, 2 clients" else None
    path = folder / "trace.jsonl"
    writer: Any = module.TraceWriter(path, False, t0_ns=0, clients=clients)
    add = writer.add
    extra = (0,) if len(inspect.signature(add).parameters) > 4 else ()  # (the attempt)
    started = time.process_time()
    for item in items:
        add("measured", 3, node, item, *extra)
    added = time.process_time() - started
    started = time.process_time()
    writer.flush()
    flushed = time.process_time() - started
    writer.close()
    size = os.path.getsize(path)
    return added / lines * 1e9, flushed / lines * 1e9, size / lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--against", default="main", help="the other revision (default main)")
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--append", action="store_true", help="append to BENCHMARKS.md")
    args = parser.parse_args(argv)
    samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="veeksha-trace-") as tmp:
        folder = Path(tmp)
        writers = {
            "this": this_trace,
            args.against: module_at(args.against, "veeksha/record/trace.py", folder),
        }
        for _ in range(args.repeats):
            for kind in KINDS:
                for name, module in writers.items():
                    figure = _figure(module, kind, args.lines, folder)
                    samples.setdefault((kind, name), []).append(figure)
    rows = [
        "| line | writer | add ns/line | flush ns/line | bytes/line |",
        "|---|---|---:|---:|---:|",
    ]
    for (kind, name), figures in samples.items():
        add, flush, size = (statistics.median(f[i] for f in figures) for i in range(3))
        rows.append(f"| {kind} | {name} | {add:.0f} | {flush:.0f} | {size:.1f} |")
    text = "\n".join(
        [
            "## trace.jsonl writer (benchmarks/trace_writer.py)",
            "",
            machine().line(),
            "",
            f"CPU per line, medians of {args.repeats} x {args.lines:,} lines, this checkout"
            f" against {args.against}:",
            "",
            *rows,
            "",
        ]
    )
    print(text)
    if args.append:
        append(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
