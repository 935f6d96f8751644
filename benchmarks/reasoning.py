"""A reasoning model's latencies as veeksha measures them, against what the server did.

    python -m benchmarks.reasoning [--against REV] [--repeats N] [--no-append]

The built-in simulator (this checkout's, its own process) answers as a reasoning model: TTFT
50 ms, 10 ms between tokens, 64 tokens an answer of which the first 48 are its thinking,
streamed in ``delta.reasoning_content`` (``simulator.reasoning_tokens``), then 16 of answer.
So the server's first token is written at 50 ms, its first answer token at 50 + 48 × 10 = 530
ms, and every token 10 ms after the one before. ``veeksha run`` sends it 30 single chat
requests at 5/s (``-q --no-plots``), and the figures are the run's own summary: TTFC, TPOT,
TBC and, where the revision records it, ``answer_ttfc``; the chunks a request counted. With
``--against REV`` the same run of that revision's ``veeksha`` (``harness.baseline_tree``)
against the same simulator, side by side. Medians of ``--repeats`` runs (1 by default: the
figures are the server's timing, not noise); printed, and appended to BENCHMARKS.md with the
machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.harness import (
    ROOT,
    Simulator,
    baseline_tree,
    check_complete,
    machine,
    run_veeksha,
    scenario,
)
from benchmarks.report import publish

TTFT_MS, ITL_MS, THINKING, OUTPUT = 50.0, 10.0, 48, 64
SESSIONS = 30


def _spec(api_base: str) -> dict[str, Any]:
    spec = scenario(
        api_base=api_base,
        scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 0.2}},
        max_sessions=SESSIONS,
        output_tokens=OUTPUT,
    )
    spec["client"]["type"] = "openai_chat_completions"
    return spec


def _figures(run_dir: Path) -> dict[str, float]:
    summary = json.loads((run_dir / "summary.json").read_text())
    latency = summary["latency"]
    chunks = pq.read_table(run_dir / "requests.parquet", columns=["chunk_times"]).column(0)
    out = {
        "ttfc_p50_ms": latency["ttfc"]["p50"] * 1e3,
        "tpot_p50_ms": latency["tpot"]["p50"] * 1e3,
        "tbc_p50_ms": latency["tbc"]["p50"] * 1e3,
        "tbc_gaps": float(latency["tbc"]["count"]),
        "chunks_per_request": statistics.mean(len(c) for c in chunks.to_pylist()),
        "ok": float(summary["requests"]["ok"]),
    }
    if "answer_ttfc" in latency and latency["answer_ttfc"]["count"]:
        out["answer_ttfc_p50_ms"] = latency["answer_ttfc"]["p50"] * 1e3
    return out


def measure(against: str | None, repeats: int, workdir: Path) -> dict[str, list[dict[str, float]]]:
    trees = {"this": ROOT}
    if against is not None:
        trees[against] = baseline_tree(against, workdir / "baseline")[0]
    out: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    with Simulator(ttft_ms=TTFT_MS, itl_ms=ITL_MS, reasoning_tokens=THINKING) as sim:
        for i in range(repeats):
            for name, root in trees.items():
                run = run_veeksha(_spec(sim.base_url), workdir, f"{name}-{i}", root=root)
                check_complete(run, name)
                out[name].append(_figures(run.run_dir))
    return out


_ROWS = (
    ("TTFC p50 (ms)", "ttfc_p50_ms", f"{TTFT_MS:g}: the first token, thinking"),
    (
        "answer TTFC p50 (ms)",
        "answer_ttfc_p50_ms",
        f"{TTFT_MS + THINKING * ITL_MS:g}: the first answer token",
    ),
    ("TPOT p50 (ms)", "tpot_p50_ms", f"{ITL_MS:g}"),
    ("TBC p50 (ms)", "tbc_p50_ms", f"{ITL_MS:g}"),
    ("TBC gaps", "tbc_gaps", f"{SESSIONS * (OUTPUT - 1)}"),
    ("chunks a request", "chunks_per_request", f"{OUTPUT}"),
)


def render(results: dict[str, list[dict[str, float]]], against: str | None, repeats: int) -> str:
    names = list(results)
    header = "| figure | the server | " + " | ".join(names) + " |"
    where = machine()
    lines = [
        f"## A reasoning model's latencies — {where.date}",
        "",
        where.line(),
        "Command: `python -m benchmarks.reasoning"
        + (f" --against {against}" if against else "")
        + f" --repeats {repeats}`. The built-in simulator thinks for {THINKING} of {OUTPUT}"
        f" tokens (TTFT {TTFT_MS:g} ms, {ITL_MS:g} ms a token); {SESSIONS} chat requests at"
        f" 5/s; medians of {repeats} run(s). The server column is what the simulator did.",
        "",
        header,
        "|---|---:|" + "---:|" * len(names),
    ]
    for label, key, truth in _ROWS:
        cells = []
        for name in names:
            values = [r[key] for r in results[name] if key in r]
            cells.append(f"{statistics.median(values):.4g}" if values else "not recorded")
        lines.append(f"| {label} | {truth} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reasoning")
    parser.add_argument("--against", help="another revision, measured side by side")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="veeksha-reasoning-") as tmp:
        results = measure(args.against, args.repeats, Path(tmp))
    text = render(results, args.against, args.repeats)
    return publish(text, not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
