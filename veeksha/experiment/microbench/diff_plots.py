"""``veeksha diff``'s plots: the two results of one benchmark overlaid, A solid, B dashed.

- ``diff_prefill.png``: TTFC p50 against input length (or image megapixels) with each fit;
- ``diff_decode.png``: TBC p50 against batch size, per input length;
- ``diff_stress.png``: E2E and TTFC p50 against output throughput, and output throughput
  against the load level.

A point whose run's health verdict was not PASS gets a hollow red ring.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from veeksha.evaluate.png import agg_figure, save_png
from veeksha.experiment.microbench.diff import unhealthy
from veeksha.experiment.microbench.results import prefill_x

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["diff_plot"]

_STYLES = (("tab:blue", "o-"), ("tab:orange", "s--"))


def _figure(panels: int) -> Figure:
    return agg_figure(figsize=(6 * panels, 4.2), layout="constrained")


def _finish(ax: Axes, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize="small")


def _usable(points: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [p for p in points if all(p.get(k) is not None for k in keys)]


def diff_plot(
    name: str, results: tuple[dict[str, Any], dict[str, Any]], labels: tuple[str, str], path: Path
) -> Path:
    """Draw the two results of benchmark ``name`` into ``path``."""
    from matplotlib.ticker import FormatStrFormatter

    fig = _figure(2 if name == "stress" else 1)
    axes = fig.subplots(1, 2) if name == "stress" else [fig.subplots()]
    for document, label, (colour, style) in zip(results, labels, _STYLES, strict=True):
        points = document["points"]
        if name == "prefill":
            x = prefill_x(points)
            rows = sorted(_usable(points, "ttfc_p50_ms"), key=lambda p: p[x])
            fit = document.get("fit")
            extra = ""
            if fit and "slope_ms_per_megapixel" in fit:
                extra = f" ({fit['slope_ms_per_megapixel']:.1f} ms per megapixel)"
            elif fit:
                extra = f" ({fit['slope_ms_per_1k_tokens']:.1f} ms per 1k tokens)"
            axes[0].plot(
                [p[x] for p in rows],
                [p["ttfc_p50_ms"] for p in rows],
                style,
                color=colour,
                label=f"{label}: TTFC p50{extra}",
            )
        elif name == "decode":
            for length in dict.fromkeys(p["input_length"] for p in points):
                rows = sorted(
                    (p for p in _usable(points, "tbc_p50_ms") if p["input_length"] == length),
                    key=lambda p: p["batch_size"],
                )
                axes[0].plot(
                    [p["batch_size"] for p in rows],
                    [p["tbc_p50_ms"] for p in rows],
                    style,
                    color=colour,
                    label=f"{label}: TBC p50, L={length}",
                )
        else:
            rows = sorted(_usable(points, "output_tokens_per_s"), key=lambda p: p["level"])
            tput = [p["output_tokens_per_s"] for p in rows]
            axes[0].plot(
                tput,
                [p["e2e_p50_ms"] for p in rows],
                style,
                color=colour,
                label=f"{label}: E2E p50",
            )
            axes[0].plot(
                tput,
                [p["ttfc_p50_ms"] for p in rows],
                style,
                color=colour,
                alpha=0.45,
                label=f"{label}: TTFC p50",
            )
            axes[1].plot([p["level"] for p in rows], tput, style, color=colour, label=label)
    if name == "prefill":
        images = prefill_x(results[0]["points"]) == "megapixels"
        xlabel = "image (megapixels)" if images else "input length (tokens)"
        _finish(axes[0], xlabel, "TTFC p50 (ms)", "prefill")
    elif name == "decode":
        _finish(axes[0], "batch size", "TBC p50 (ms)", "decode")
    else:
        _finish(axes[0], "output throughput (tokens/s)", "latency (ms)", "stress: latency")
        axes[1].set_xscale("log", base=2)
        axes[1].xaxis.set_major_formatter(FormatStrFormatter("%g"))
        unit = "concurrency" if results[0].get("traffic") == "concurrency" else "rate (requests/s)"
        _finish(axes[1], unit, "output throughput (tokens/s)", "stress: throughput")
    for document in results:
        _mark_unhealthy(name, axes, document)
    save_png(fig, path, dpi=100)
    return path


def _mark_unhealthy(name: str, axes: Any, document: dict[str, Any]) -> None:
    """Hollow red rings on the points whose run was not healthy (as the sweep plots do)."""
    bad = [p for p in document["points"] if unhealthy(p)]
    if name == "prefill":
        x = prefill_x(document["points"])
        spots = [(p[x], p.get("ttfc_p50_ms")) for p in bad]
    elif name == "decode":
        spots = [(p["batch_size"], p.get("tbc_p50_ms")) for p in bad]
    else:
        spots = [(p.get("output_tokens_per_s"), p.get("e2e_p50_ms")) for p in bad]
    spots = [(x, y) for x, y in spots if x is not None and y is not None]
    if spots:
        axes[0].scatter(
            [x for x, _ in spots],
            [y for _, y in spots],
            s=120,
            facecolors="none",
            edgecolors="red",
            linewidths=1.5,
            zorder=5,
            label="health not PASS",
        )
        axes[0].legend(fontsize=7)
