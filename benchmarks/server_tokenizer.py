"""What ``client.tokenizer: server`` costs: the calibration at start-up, and prompt building.

    python -m benchmarks.server_tokenizer [--repeats 3] [--no-append]

Against the built-in simulator with its ``subword`` tokenizer (a real server process over
loopback), in this process:

- **calibrate**: a fresh calibration (``veeksha.generate.calibration``): wall seconds, the main
  process' CPU seconds and the server calls; also with every tokenizer answer 5 ms late
  (``tokenize_delay_ms``), as a busy server might;
- **cache hit**: the start-up with a cached calibration (one probe call);
- **blocks**: CPU seconds to generate one block of 256 sessions (``SessionGenerator.block``) of
  the default scenario with prompts from the builtin vocabulary and from the calibrated one.

Medians of ``--repeats`` runs; printed, and appended to BENCHMARKS.md with machine, date, commit.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import machine
from benchmarks.report import publish
from veeksha.generate.calibration import TokenizerCache, calibrated_tokenizer
from veeksha.generate.server_tokenizer import ServerTokenizer
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.tokenizer import BuiltinTokenizer, TokenizerLike
from veeksha.scenario.models import Scenario
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess


def _calibrate(root: str, cache_dir: Path, use_cache: bool) -> dict[str, float]:
    client = ServerTokenizer(root + "/tokenize", "veeksha-sim")
    wall, cpu = time.perf_counter(), time.process_time()
    tok = calibrated_tokenizer(client, use_cache, TokenizerCache(cache_dir))
    return {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "calls": client.calls,
        "words": len(tok.calibration.words),
    }


def _block_cpu(tokenizer: TokenizerLike, repeats: int) -> float:
    scenario = Scenario(seed=1)
    generator = SessionGenerator(scenario, tokenizer)
    generator.block(0)  # (the corpus is built once per run, before t0: not counted)
    times = []
    for block in range(1, repeats + 1):
        cpu = time.process_time()
        generator.block(block)
        times.append(time.process_time() - cpu)
    return statistics.median(times)


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def measure(repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="veeksha-bench-") as tmp:
        for label, delay in (("calibrate", 0.0), ("calibrate_slow", 5.0)):
            config = SimulatorConfig(tokenizer="subword", faults={"tokenize_delay_ms": delay})
            with SimulatorProcess(config) as sim:
                root = sim.root_url
                rows = [
                    _calibrate(root, Path(tmp) / f"{label}{i}", use_cache=False)
                    for i in range(repeats)
                ]
                out[label] = rows
                if delay == 0.0:
                    _calibrate(root, Path(tmp) / "hit", use_cache=True)
                    out["cache_hit"] = [
                        _calibrate(root, Path(tmp) / "hit", use_cache=True) for _ in range(repeats)
                    ]
                    client = ServerTokenizer(root + "/tokenize", "veeksha-sim")
                    calibrated = calibrated_tokenizer(
                        client, True, TokenizerCache(Path(tmp) / "hit")
                    )
        out["block_builtin_s"] = _block_cpu(BuiltinTokenizer(), max(repeats, 5))
        out["block_server_s"] = _block_cpu(calibrated, max(repeats, 5))
    return out


def render(out: dict[str, Any], repeats: int) -> str:
    lines = [
        "### Server tokenizer: calibration and prompt building",
        "",
        "`python -m benchmarks.server_tokenizer`",
        "",
        machine().line(),
        "",
        f"Against the simulator's subword tokenizer, medians of {repeats}:",
        "",
    ]
    for label, what in (
        ("calibrate", "fresh calibration"),
        ("calibrate_slow", "fresh calibration, every answer 5 ms late"),
        ("cache_hit", "start-up with a cached calibration"),
    ):
        rows = out[label]
        lines.append(
            f"- {what}: {_median(rows, 'wall_s') * 1000:.0f} ms wall, "
            f"{_median(rows, 'cpu_s') * 1000:.0f} ms CPU (main process), "
            f"{_median(rows, 'calls'):.0f} calls, {_median(rows, 'words'):.0f} words"
        )
    lines.append(
        f"- one block of 256 sessions (default scenario): {out['block_builtin_s'] * 1000:.1f} ms "
        f"CPU with builtin prompts, {out['block_server_s'] * 1000:.1f} ms with the calibrated "
        "vocabulary (lead words at every 16th corpus word: no work a body)"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.server_tokenizer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args(argv)
    text = render(measure(args.repeats), args.repeats)
    return publish(text, not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
