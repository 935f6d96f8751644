"""What a server's warm prefix cache does to repeats, and what ``prefix_cache_reset`` undoes.

    python -m benchmarks.cache_reset [--repeats 3] [--sessions 12] [--prompt 2000] [--no-append]

One external simulator with the realistic preset (engine timing: 20,000 prompt tokens/s of
prefill, a 400,000-token prefix cache) serves two invocations of ``veeksha run --repeats N`` of
the same scenario (3-turn conversations, ``--prompt`` tokens a first turn, 2 sessions/s): the
first with ``prefix_cache_reset`` off, the second with it on. Per repeat: the TTFC median and
mean (ms) and the cached share of prompt tokens (requests.parquet's ``cached_tokens`` over its
prompt tokens). Off, the repeats after the first find its prompts cached and read faster for
that alone; on, every repeat reads as the first. Appended to BENCHMARKS.md unless
``--no-append``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.harness import ROOT, Simulator, machine
from benchmarks.report import publish

_SCENARIO = """\
seed: 7
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.5}}}}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {{type: fixed, value: 3}}
    request_wait_generator: {{type: fixed, interval: 0.2}}
  channels: [{{type: text, body_length_generator: {{type: fixed, value: {prompt}}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 16}}}}}}
client: {{api_base: "{api_base}", model: veeksha-sim}}
runtime: {{max_sessions: {sessions}, benchmark_timeout: 120, num_workers: 1}}
"""


def _repeat_figures(run_dir: Path) -> dict[str, float]:
    columns = ["ttfc", "cached_tokens", "prompt_tokens_total"]
    table = pq.read_table(run_dir / "requests.parquet", columns=columns)
    prompt_tokens = pc.sum(table.column("prompt_tokens_total")).as_py()
    ttfc = table.column("ttfc")
    return {
        "ttfc_p50_ms": float(pc.approximate_median(ttfc).as_py()) * 1000,
        "ttfc_mean_ms": float(pc.mean(ttfc).as_py()) * 1000,
        "cached_share": float(pc.sum(table.column("cached_tokens")).as_py()) / prompt_tokens,
    }


def _invocation(path: Path, out: Path, repeats: int, reset: bool) -> list[dict[str, float]]:
    command = [sys.executable, "-m", "veeksha.cli", "run", str(path), "--repeats", str(repeats)]
    command += ["--output-dir", str(out), "--no-plots", "-q"]
    command += ["--set", f"prefix_cache_reset.enabled={str(reset).lower()}"]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True)
    (sweep,) = out.iterdir()
    return [_repeat_figures(run) for run in sorted(p for p in sweep.iterdir() if p.is_dir())]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=12)
    parser.add_argument("--prompt", type=int, default=2000)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    with Simulator(preset="realistic") as sim, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "scenario.yaml"
        path.write_text(
            _SCENARIO.format(api_base=sim.base_url, prompt=args.prompt, sessions=args.sessions)
        )
        off = _invocation(path, folder / "off", args.repeats, reset=False)
        on = _invocation(path, folder / "on", args.repeats, reset=True)
    rows = [
        "| repeat | TTFC p50, off (ms) | TTFC p50, on (ms) | TTFC mean, off (ms) | "
        "TTFC mean, on (ms) | cached share, off | cached share, on |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, (a, b) in enumerate(zip(off, on, strict=True), start=1):
        rows.append(
            f"| {k} | {a['ttfc_p50_ms']:.1f} | {b['ttfc_p50_ms']:.1f} | {a['ttfc_mean_ms']:.1f} "
            f"| {b['ttfc_mean_ms']:.1f} | {a['cached_share']:.1%} | {b['cached_share']:.1%} |"
        )
    text = "\n".join(
        [
            f"## A warm prefix cache across repeats, and `prefix_cache_reset` — {machine().date}",
            "",
            machine().line()
            + f" Command: `python -m benchmarks.cache_reset --repeats {args.repeats} "
            f"--sessions {args.sessions} --prompt {args.prompt}`.",
            "One external simulator (realistic preset: 20,000 prompt tokens/s of prefill, a "
            "400,000-token prefix cache) serves `veeksha run --repeats` of the same scenario "
            f"twice: {args.sessions} three-turn conversations ({args.prompt}-token first turns, "
            "2 sessions/s), first with `prefix_cache_reset` off, then on.",
            "",
            *rows,
            "",
        ]
    )
    return publish(text, not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
