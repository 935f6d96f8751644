"""capacity.png: each SLO's percentile against the knob, with its interval and threshold.

One panel per SLO: the estimate at every probed value (pooled runs), a vertical bar for its
confidence interval (an end the sample could not bound is drawn to the panel's edge, dashed),
colour by the value's verdict (pass, fail, undecided; unhealthy values as a grey ✕ on the
threshold: no server result), the threshold as a horizontal line, and the capacity found as a
vertical line. The panel shows up to three times the threshold (the region that decides); an
estimate beyond is a triangle at the top edge labelled with its value, the labels placed once
the layout is final by ``veeksha.experiment.plot_labels`` (never over each other, the legend or
another value's marker: two probes close together, 496 ms and 1169 ms, drew their labels on one
spot; a label with no room is left out, the panel's title saying how many). matplotlib is
imported only here, on an Agg canvas (no pyplot state).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from veeksha.evaluate.png import agg_figure, save_png
from veeksha.experiment.plot_labels import PointLabel, place_labels
from veeksha.plural import counted

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["PLOT_FILE", "capacity_figure", "write_capacity_plot"]

PLOT_FILE = "capacity.png"
_COLOURS = {"pass": "tab:green", "fail": "tab:red", "undecided": "tab:orange"}


def write_capacity_plot(document: dict[str, Any], path: Path) -> Path | None:
    """Draw the plot of a capacity.json ``document`` to ``path``; None without any probe."""
    fig = capacity_figure(document)
    if fig is None:
        return None
    save_png(fig, path, dpi=100)
    return path


def capacity_figure(document: dict[str, Any]) -> Figure | None:
    """The figure of a capacity.json ``document`` (see the module docstring); None without any
    probe."""
    history: Sequence[dict[str, Any]] = document.get("history", [])
    slos: Sequence[dict[str, Any]] = document.get("slos", [])
    if not history or not slos:
        return None
    fig = agg_figure(figsize=(7, 2.8 * len(slos) + 1.2), layout="constrained")
    axes = fig.subplots(len(slos), 1, squeeze=False)[:, 0]
    knob = document.get("knob_title") or document.get("searched_knob", "value")
    panels = [
        _panel(ax, index, slo, history, document)
        for index, (ax, slo) in enumerate(zip(axes, slos, strict=True))
    ]
    axes[-1].set_xlabel(f"{knob} ({document.get('unit', '')})")
    # the labels last, in the panels' final places: the layout is settled, then held
    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    for ax, (labels, avoid) in zip(axes, panels, strict=True):
        _, left_out = place_labels(ax, labels, avoid)
        if left_out:  # (the estimates are in capacity.json and the probe lines)
            ax.set_title(f"{ax.get_title()} ({counted(left_out, 'label')} left out: no room)")
    return fig


def _panel(
    ax: Axes,
    index: int,
    slo: dict[str, Any],
    history: Sequence[dict[str, Any]],
    document: dict[str, Any],
) -> tuple[list[PointLabel], list[Artist]]:
    """Draw one SLO's panel; the labels of its values beyond the panel's top and what they
    must keep clear of (the legend, the other values' markers)."""
    threshold_ms = 1000 * slo["threshold"]
    points = [
        (h["value"], h["verdict"], h["slo_results"][index]) for h in history if h.get("slo_results")
    ]
    # the panel shows up to 3x the threshold: the region that decides; beyond it a value is
    # a triangle at the top edge, labelled with its estimate
    top = 3 * threshold_ms
    labels: list[PointLabel] = []
    markers: list[Artist] = []
    for value, verdict, result in points:
        colour = _COLOURS.get(verdict, "tab:gray")
        low, high, estimate = (result.get("ci_low"), result.get("ci_high"), result.get("estimate"))
        low_ms = 0.0 if low is None else min(1000 * low, top)
        high_ms = top if high is None else min(1000 * high, top)
        style: Literal["-", "--"] = "--" if high is None or low is None else "-"
        ax.vlines(value, low_ms, high_ms, colors=colour, linestyles=style, linewidth=2)
        for end, given in ((low_ms, low), (high_ms, high)):
            if given is None:
                continue
            (cap,) = ax.plot([value], [end], "_", color=colour, markersize=12)
            if end < top:  # (one cut at the top edge is under a triangle, which has a label)
                markers.append(cap)
        if estimate is None:
            continue
        if 1000 * estimate <= top:
            markers += ax.plot([value], [1000 * estimate], "o", color=colour)
        else:
            ax.plot([value], [top], "^", color=colour, markersize=9, clip_on=False)
            labels.append(PointLabel(value, top, f"{1000 * estimate:.0f} ms", colour, marker_pt=9))
    for h in history:
        if h["verdict"] == "unhealthy":
            markers += ax.plot([h["value"]], [threshold_ms], "x", color="tab:gray", markersize=9)
    ax.axhline(threshold_ms, color="black", linewidth=1, label=f"threshold {threshold_ms:g} ms")
    best = document.get("best_value")
    if best is not None:
        ax.axvline(best, color="tab:blue", linestyle=":", label=f"capacity {best:g}")
    ax.set_ylim(0, top)
    percent = f"p{100 * slo['percentile']:g}"
    ax.set_title(f"{slo['name']} ({slo['confidence']:.0%} confidence intervals)")
    ax.set_ylabel(f"{percent} {slo['metric']} (ms)")
    legend = ax.legend(loc="upper left", fontsize="small")
    return labels, [legend, *markers]
