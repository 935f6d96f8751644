"""The microbenchmarks' PNG plots, drawn with matplotlib's Agg canvas (imported only here).

- ``prefill.png``: every TTFC sample against its input length, the per-length medians, and the
  fitted line with its slope (ms per 1k tokens) and intercept (with ``image_sides``: against
  the image's megapixels, ms per megapixel);
- ``decode.png``: TBC p50 (solid) and p99 (dashed) against batch size, one colour per input
  length, with the fitted p50 line;
- ``stress.png``: left, TTFC and E2E (p50 solid, p99 dashed) against output throughput (the
  throughput–latency curve); right, output and input throughput against the load level.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from veeksha.evaluate.png import agg_figure, save_png
from veeksha.experiment.microbench.results import prefill_x

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["decode_plot", "prefill_plot", "stress_plot"]


def _figure(width: float = 7) -> Figure:
    return agg_figure(figsize=(width, 4.2), layout="constrained")


def prefill_plot(
    samples: dict[int, list[float]],
    table: list[dict[str, Any]],
    fit: dict[str, Any] | None,
    path: Path,
) -> Path:
    """TTFC (ms) against input length (tokens), with the fit; with images (``image_side`` in
    the table, ``samples`` keyed by side) against the image's megapixels."""
    fig = _figure()
    ax = fig.add_subplot()
    x_key = prefill_x(table)
    images = x_key == "megapixels"
    for key, values in samples.items():
        x = key * key / 1e6 if images else key
        ax.scatter([x] * len(values), values, s=12, alpha=0.4, color="tab:blue")
    usable = [p for p in table if p["ttfc_p50_ms"] is not None]
    ax.plot(
        [p[x_key] for p in usable],
        [p["ttfc_p50_ms"] for p in usable],
        "o",
        color="tab:blue",
        label="median",
    )
    if fit is not None:
        xs = np.array([0, max(p[x_key] for p in usable)], dtype=float)
        intercept = fit["intercept_ms"]
        if images:
            slope = fit["slope_ms_per_megapixel"]
            ys, shown = intercept + slope * xs, f"{slope:.2f} ms per megapixel"
        else:
            slope = fit["slope_ms_per_1k_tokens"]
            ys, shown = intercept + slope * xs / 1000, f"{slope:.2f} ms per 1k tokens"
        ax.plot(xs, ys, "--", color="tab:orange", label=f"fit: {intercept:.2f} ms + {shown}")
    if images:
        text = table[0]["input_length"]
        ax.set_xlabel(f"image (megapixels; one a request, with {text} tokens of text)")
        ax.set_title("prefill: time to first chunk against image size")
    else:
        ax.set_xlabel("input length (tokens)")
        ax.set_title("prefill: time to first chunk against prompt length")
    ax.set_ylabel("TTFC (ms)")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    save_png(fig, path, dpi=100)
    return path


def decode_plot(table: list[dict[str, Any]], fits: list[dict[str, Any]], path: Path) -> Path:
    """TBC p50 and p99 (ms) against batch size, per input length, with the p50 fits."""
    fig = _figure()
    ax = fig.add_subplot()
    colours = ["tab:blue", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:olive"]
    lengths = list(dict.fromkeys(p["input_length"] for p in table))
    for i, length in enumerate(lengths):
        colour = colours[i % len(colours)]
        rows = sorted(
            (p for p in table if p["input_length"] == length and p["tbc_p50_ms"] is not None),
            key=lambda p: p["batch_size"],
        )
        batch = [p["batch_size"] for p in rows]
        ax.plot(
            batch, [p["tbc_p50_ms"] for p in rows], "o-", color=colour, label=f"p50, L={length}"
        )
        ax.plot(
            batch,
            [p["tbc_p99_ms"] for p in rows],
            "s--",
            color=colour,
            alpha=0.6,
            label=f"p99, L={length}",
        )
        fit = next((f for f in fits if f["input_length"] == length), None)
        if fit is not None and batch:
            xs = np.array([0, max(batch)], dtype=float)
            ax.plot(
                xs,
                fit["intercept_ms"] + fit["slope_ms_per_seq"] * xs,
                ":",
                color=colour,
                label=f"fit: {fit['intercept_ms']:.2f} ms + {fit['slope_ms_per_seq']:.3f} ms/seq",
            )
    ax.set_xlabel("batch size (requests decoding together)")
    ax.set_ylabel("TBC in the common decode window (ms)")
    ax.set_title("decode: time between chunks against batch size")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")
    save_png(fig, path, dpi=100)
    return path


def stress_plot(table: list[dict[str, Any]], traffic: str, path: Path) -> Path:
    """Latency against output throughput, and throughput against the load level."""
    from matplotlib.ticker import FormatStrFormatter

    fig = _figure(12)
    curve, load = fig.subplots(1, 2)
    rows = [p for p in table if p["output_tokens_per_s"] is not None]
    throughput = [p["output_tokens_per_s"] for p in rows]
    for key, colour in (("ttfc", "tab:blue"), ("e2e", "tab:red")):
        for stat, style in (("p50", "o-"), ("p99", "s--")):
            values = [p[f"{key}_{stat}_ms"] for p in rows]
            curve.plot(throughput, values, style, color=colour, label=f"{key.upper()} {stat}")
    for p in rows:
        curve.annotate(
            f"{p['level']:g}",
            (p["output_tokens_per_s"], p["e2e_p50_ms"] or 0),
            textcoords="offset points",
            xytext=(3, 3),
            fontsize="x-small",
        )
    curve.set_xlabel("output throughput (tokens/s)")
    curve.set_ylabel("latency (ms)")
    curve.set_title("latency against throughput (labels: load level)")
    curve.set_ylim(bottom=0)
    curve.grid(alpha=0.3)
    curve.legend(loc="upper left", fontsize="small")
    levels = [p["level"] for p in rows]
    load.plot(levels, throughput, "o-", color="tab:blue", label="output tokens/s")
    load.plot(
        levels,
        [p["input_tokens_per_s"] for p in rows],
        "s--",
        color="tab:green",
        label="input tokens/s",
    )
    load.set_xscale("log", base=2)
    load.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    load.set_xlabel(
        "concurrency (requests in flight)"
        if traffic == "concurrency"
        else "offered rate (requests/s)"
    )
    load.set_ylabel("throughput (tokens/s)")
    load.set_title("throughput against load")
    load.set_ylim(bottom=0)
    load.grid(alpha=0.3)
    load.legend(loc="upper left", fontsize="small")
    save_png(fig, path, dpi=100)
    return path
