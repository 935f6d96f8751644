"""capacity.png: each SLO's percentile against the knob, with its interval and threshold.

One panel per SLO: the estimate at every probed value (pooled runs), a vertical bar for its
confidence interval (an end the sample could not bound is drawn to the panel's edge, dashed),
colour by the value's verdict (pass, fail, undecided; unhealthy values as a grey ✕ on the
threshold: no server result), the threshold as a horizontal line, and the capacity found as a
vertical line. The panel shows up to three times the threshold (the region that decides); an
estimate beyond is a triangle at the top edge labelled with its value. matplotlib is imported
only here, on an Agg canvas (no pyplot state).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["PLOT_FILE", "write_capacity_plot"]

PLOT_FILE = "capacity.png"
_COLOURS = {"pass": "tab:green", "fail": "tab:red", "undecided": "tab:orange"}


def write_capacity_plot(document: dict[str, Any], path: Path) -> Path | None:
    """Draw the plot of a capacity.json ``document`` to ``path``; None without any probe."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    history: Sequence[dict[str, Any]] = document.get("history", [])
    slos: Sequence[dict[str, Any]] = document.get("slos", [])
    if not history or not slos:
        return None
    fig = Figure(figsize=(7, 2.8 * len(slos) + 1.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(slos), 1, squeeze=False)[:, 0]
    knob = document.get("knob_title") or document.get("searched_knob", "value")
    best = document.get("best_value")
    for index, (ax, slo) in enumerate(zip(axes, slos, strict=True)):
        threshold_ms = 1000 * slo["threshold"]
        points = [
            (h["value"], h["verdict"], h["slo_results"][index])
            for h in history
            if h.get("slo_results")
        ]
        # the panel shows up to 3x the threshold: the region that decides; beyond it a value is
        # a triangle at the top edge, labelled with its estimate
        top = 3 * threshold_ms
        for value, verdict, result in points:
            colour = _COLOURS.get(verdict, "tab:gray")
            low, high, estimate = (
                result.get("ci_low"),
                result.get("ci_high"),
                result.get("estimate"),
            )
            low_ms = 0.0 if low is None else min(1000 * low, top)
            high_ms = top if high is None else min(1000 * high, top)
            style = "--" if high is None or low is None else "-"
            ax.vlines(value, low_ms, high_ms, colors=colour, linestyles=style, linewidth=2)
            ends = [end for end, given in ((low_ms, low), (high_ms, high)) if given is not None]
            ax.plot([value] * len(ends), ends, "_", color=colour, markersize=12)
            if estimate is None:
                continue
            if 1000 * estimate <= top:
                ax.plot([value], [1000 * estimate], "o", color=colour)
            else:
                ax.plot([value], [top], "^", color=colour, markersize=9, clip_on=False)
                ax.annotate(
                    f"{1000 * estimate:.0f} ms",
                    (value, top),
                    textcoords="offset points",
                    xytext=(0, -14),
                    ha="center",
                    fontsize="small",
                    color=colour,
                )
        for h in history:
            if h["verdict"] == "unhealthy":
                ax.plot([h["value"]], [threshold_ms], "x", color="tab:gray", markersize=9)
        ax.axhline(threshold_ms, color="black", linewidth=1, label=f"threshold {threshold_ms:g} ms")
        if best is not None:
            ax.axvline(best, color="tab:blue", linestyle=":", label=f"capacity {best:g}")
        ax.set_ylim(0, top)
        percent = f"p{100 * slo['percentile']:g}"
        ax.set_title(f"{slo['name']} ({slo['confidence']:.0%} confidence intervals)")
        ax.set_ylabel(f"{percent} {slo['metric']} (ms)")
        ax.legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel(f"{knob} ({document.get('unit', '')})")
    fig.savefig(path, dpi=100)
    return path
