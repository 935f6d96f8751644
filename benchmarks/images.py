"""What images cost veeksha: building a picture, a request body, and a run's timing with them.

    python -m benchmarks.images [--repeats N] [--no-append]

* **Pictures** (in this process): ``veeksha.generate.images.png`` at 512 × 512, 1024 × 768 and
  2048 × 2048, the median time to build one of a width already seen and of a width not seen
  before (its rows' block made too), and its bytes on the wire (the base64 data: URL).
* **Bodies** (in this process): ``RequestBuilder.body`` of a 3-message conversation without
  images and with one 1024 × 768 image in its first message (its data: URL cached, as a
  conversation's later turns find it): µs a body and its bytes.
* **Runs**: ``veeksha run`` (``-q --no-plots``) of 2-turn chats with history at 10 sessions/s
  for 6 s against the built-in simulator (fast preset, its own process), once without images
  and once with 1 or 2 images a conversation of widths drawn from 256 to 1024 (nearly every
  image a width not seen before) and heights 448 or 896: the p99 of ``sent_at −
  dispatched_at`` (the worker's part of a request's lag), the run's generator delay p99 and
  its workers' CPU per 1,000 requests. Medians of ``--repeats`` runs (1 by default).

Printed, and appended to BENCHMARKS.md with the machine, date and commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import timeit
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from benchmarks.harness import Simulator, check_complete, machine, run_veeksha, scenario
from benchmarks.report import publish
from veeksha.dispatch.openai import RequestBuilder
from veeksha.generate.images import data_url, png

SIZES = ((512, 512), (1024, 768), (2048, 2048))
CONVERSATION = [("user", "what is in the picture " * 8), ("assistant", "a cat " * 40)]
CONVERSATION.append(("user", "and what colour is it"))


def _best_us(statement: Any, number: int) -> float:
    """The median of 5 timings of ``number`` calls, in µs a call."""
    runs = timeit.repeat(statement, number=number, repeat=5)
    return statistics.median(runs) / number * 1e6


def pictures() -> dict[str, float]:
    out: dict[str, float] = {}
    for width, height in SIZES:
        png(width, height, 0)  # (its width's rows made)
        key = f"{width}x{height}"
        out[f"png_us_{key}"] = _best_us(_seen_width(width, height), 50)
        out[f"png_new_width_us_{key}"] = _best_us(_new_width(width, height), 10)
        out[f"url_kb_{key}"] = len(data_url(width, height, 1)) / 1024
    return out


def _seen_width(width: int, height: int) -> Any:
    seeds = iter(range(1, 1_000_000))
    return lambda: png(width, height, next(seeds))


def _new_width(width: int, height: int) -> Any:
    widths = iter(range(width + 1, width + 1_000))
    return lambda: png(next(widths), height, 1)


def bodies() -> dict[str, float]:
    builder = RequestBuilder(chat=True, model="m", stream=True, max_tokens_param="max_tokens")
    images = [(0, 1024, 768, 7)]
    data_url(1024, 768, 7)
    return {
        "body_us_text": _best_us(lambda: builder.body(CONVERSATION, 64), 2000),
        "body_us_image": _best_us(lambda: builder.body(CONVERSATION, 64, images), 2000),
        "body_kb_text": len(builder.body(CONVERSATION, 64)) / 1024,
        "body_kb_image": len(builder.body(CONVERSATION, 64, images)) / 1024,
    }


def _spec(api_base: str, with_images: bool) -> dict[str, Any]:
    spec = scenario(
        api_base=api_base,
        scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 0.1}},
        max_sessions=60,
        graph={
            "type": "linear",
            "num_request_generator": {"type": "fixed", "value": 2},
            "request_wait_generator": {"type": "fixed", "interval": 0.05},
            "inherit_history": True,
        },
        prompt_tokens=32,
        output_tokens=16,
    )
    spec["client"]["type"] = "openai_chat_completions"
    if with_images:
        spec["session_generator"]["channels"].append(
            {
                "type": "image",
                "count_generator": {"type": "uniform", "min": 1, "max": 2},
                "width_generator": {"type": "uniform", "min": 256, "max": 1024},
                "height_generator": {"type": "fixed_stair", "values": [448, 896]},
            }
        )
    return spec


def _run_figures(run_dir: Path) -> dict[str, float]:
    table = pq.read_table(run_dir / "requests.parquet", columns=["sent_at", "dispatched_at"])
    sent = table.column("sent_at").to_numpy(zero_copy_only=False)
    dispatched = table.column("dispatched_at").to_numpy(zero_copy_only=False)
    summary = json.loads((run_dir / "summary.json").read_text())
    requests = len(sent)
    return {
        "dispatch_to_sent_p99_ms": float(np.nanpercentile(sent - dispatched, 99)) * 1e3,
        "generator_delay_p99_ms": summary["latency"]["generator_delay"]["p99"] * 1e3,
        "workers_cpu_s_per_1000": summary["run"]["worker_cpu_s"] / requests * 1000,
    }


def runs(repeats: int, workdir: Path) -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = {"text": [], "images": []}
    with Simulator() as sim:
        for i in range(repeats):
            for name, figures in out.items():
                run = run_veeksha(_spec(sim.base_url, name == "images"), workdir, f"{name}-{i}")
                check_complete(run, name)
                figures.append(_run_figures(run.run_dir))
    return out


def render(figures: dict[str, float], results: dict[str, list[dict[str, float]]]) -> str:
    where = machine()
    lines = [
        f"## Images: what a picture, a body and a run with them cost — {where.date}",
        "",
        where.line(),
        "Command: `python -m benchmarks.images`. Medians (see benchmarks/images.py).",
        "",
        "| picture | build (µs), width seen | build (µs), new width | data: URL (KB) |",
        "|---|---:|---:|---:|",
    ]
    for width, height in SIZES:
        key = f"{width}x{height}"
        lines.append(
            f"| {width} × {height} | {figures[f'png_us_{key}']:.0f} |"
            f" {figures[f'png_new_width_us_{key}']:.0f} | {figures[f'url_kb_{key}']:.1f} |"
        )
    lines += [
        "",
        "| body of 3 messages | µs | KB |",
        "|---|---:|---:|",
        f"| text only | {figures['body_us_text']:.1f} | {figures['body_kb_text']:.1f} |",
        f"| one 1024 × 768 image | {figures['body_us_image']:.1f} |"
        f" {figures['body_kb_image']:.1f} |",
        "",
        "| run: 2-turn chats, 10 sessions/s, 6 s | text only | 1-2 images a chat |",
        "|---|---:|---:|",
    ]
    for label, key in (
        ("dispatch → sent p99 (ms)", "dispatch_to_sent_p99_ms"),
        ("generator delay p99 (ms)", "generator_delay_p99_ms"),
        ("workers' CPU-s per 1,000 requests", "workers_cpu_s_per_1000"),
    ):
        cells = [statistics.median(r[key] for r in results[name]) for name in results]
        lines.append(f"| {label} | " + " | ".join(f"{c:.3g}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.images")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--no-append", action="store_true", help="do not write BENCHMARKS.md")
    args = parser.parse_args(argv)
    figures = {**pictures(), **bodies()}
    with tempfile.TemporaryDirectory(prefix="veeksha-images-") as tmp:
        results = runs(args.repeats, Path(tmp))
    text = render(figures, results)
    return publish(text, not args.no_append)


if __name__ == "__main__":
    raise SystemExit(main())
