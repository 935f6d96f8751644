"""Latency-throughput curves of sweeps (PNG, matplotlib's Agg canvas, no pyplot state).

``plots/latency_throughput.png`` of a sweep folder: TTFC, TPOT and E2E (rows) at p50 and p99
(columns) against the achieved throughput (requests/s of ok requests over the measured window).
One line per combination of the swept keys that are not the load knob (keys under
``traffic_scheduler``): a rate sweep is one curve, a rate x prompt-length sweep one curve per
prompt length. A sweep with no load key swept draws its points in sweep order. Each point is
labelled with its point label (sweep.parquet's ``point``: ``arrival_rate=36``), and each curve's
legend entry names what it holds (``body_length=256``) and what varies along it (``one point per
arrival_rate``). Labels never overlap (``plot_labels``): one with no room beside its point sits
farther out on a leader line, or is left out, the panel's title saying how many. Points that
failed a health check are drawn hollow and red, and the legend says so: they are not a server
result.

:func:`write_compare_plot` draws several sweeps' curves on the same axes (``veeksha compare``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from veeksha.evaluate.png import agg_figure, save_png
from veeksha.experiment.plot_labels import PointLabel, place_labels
from veeksha.experiment.sweep_table import value_columns

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["CURVE_FILE", "PLOTS_DIR", "curve_name", "write_compare_plot", "write_sweep_plots"]

PLOTS_DIR = "plots"
CURVE_FILE = "latency_throughput.png"
X_COLUMN = "requests_per_s"
_PANELS = (("ttfc", "TTFC"), ("tpot", "TPOT"), ("e2e", "E2E"))
_STATS = ("p50", "p99")
_LOAD_PREFIX = "traffic_scheduler."
_FAILED_LABEL = "health FAIL (not a server result)"
_STYLES = ("-", "--", ":", "-.")


def _figure() -> Figure:
    # fixed margins: the constrained layout engine took as much CPU as drawing the six panels
    fig = agg_figure(figsize=(10, 10))
    fig.subplots_adjust(left=0.08, right=0.98, top=0.92, bottom=0.11, hspace=0.42, wspace=0.22)
    return fig


def curve_keys(manifest: Mapping[str, Any]) -> list[str]:
    """The columns that split a sweep into curves: swept keys that are not the load knob."""
    columns = value_columns(manifest)
    return [c for k, c in columns.items() if not k.startswith(_LOAD_PREFIX)]


def curve_name(manifest: Mapping[str, Any], label: str, prefix: str = "") -> str:
    """A curve's legend entry: ``prefix`` (a compared sweep's ``"name: "``), the curve's own
    values (``label``) and the load keys that vary along it (``one point per arrival_rate``)."""
    along = [c for k, c in value_columns(manifest).items() if k.startswith(_LOAD_PREFIX)]
    parts = [label] if label else []
    if along:
        parts.append("one point per " + ", ".join(along))
    return prefix + (", ".join(parts) or "sweep points")


def _curves(table: pd.DataFrame, keys: list[str]) -> list[tuple[str, pd.DataFrame]]:
    if not keys:
        return [("", table)]
    out = []
    for found, group in table.groupby(keys, sort=False, dropna=False):
        values = found if isinstance(found, tuple) else (found,)
        label = ", ".join(f"{k}={v}" for k, v in zip(keys, values, strict=True))
        out.append((label, group))
    return out


def _draw(
    grid: Any,
    table: pd.DataFrame,
    manifest: Mapping[str, Any],
    prefix: str,
    style: str,
    failed_labelled: list[bool],
    labels: dict[Axes, list[PointLabel]],
) -> int:
    """Draw one sweep's curves on the grid of axes; returns how many points were drawn. Each
    point's label is added to ``labels`` (placed by :func:`_finish`, once all is drawn)."""
    keys = curve_keys(manifest)
    drawn = 0
    by_load = not any(k.startswith(_LOAD_PREFIX) for k in manifest.get("swept_keys") or [])
    for label, group in _curves(table, keys):
        name = curve_name(manifest, label, prefix)
        for row, (metric, _) in enumerate(_PANELS):
            for col, stat in enumerate(_STATS):
                axes: Axes = grid[row][col]
                y_column = f"{metric}_{stat}_s"
                data = group[[X_COLUMN, y_column, "health", "index", "point"]].dropna(
                    subset=[X_COLUMN, y_column]
                )
                data = data.sort_values("index" if by_load else X_COLUMN)
                if data.empty:
                    continue
                x = data[X_COLUMN].astype(float)
                y = data[y_column].astype(float) * 1000
                failed = data["health"] == "FAIL"
                good = [i for i, bad in enumerate(failed.tolist()) if not bad]
                axes.plot(x, y, style, marker="o", markevery=good, label=name)
                texts = [str(point) for point in data["point"].tolist()]
                labels.setdefault(axes, []).extend(
                    PointLabel(at, value, text)
                    for at, value, text in zip(x.tolist(), y.tolist(), texts, strict=True)
                )
                axes.margins(x=0.06, y=0.16)  # room for the labels of the outermost points
                if failed.any():
                    axes.scatter(
                        x[failed],
                        y[failed],
                        s=90,
                        facecolors="none",
                        edgecolors="red",
                        linewidths=1.6,
                        zorder=5,
                        label=None if failed_labelled[0] else _FAILED_LABEL,
                    )
                    if row == 0 and col == 0:
                        failed_labelled[0] = True
                if row == 0 and col == 0:
                    drawn += len(data)
    return drawn


def _finish(fig: Figure, grid: Any, title: str, point_labels: dict[Axes, list[PointLabel]]) -> None:
    for row, (_, shown) in enumerate(_PANELS):
        for col, stat in enumerate(_STATS):
            axes = grid[row][col]
            _, left_out = place_labels(axes, point_labels.get(axes, []))
            note = f" ({left_out} point label{'s' * (left_out > 1)} left out: no room)"
            axes.set_title(f"{shown} {stat}" + (note if left_out else ""))
            axes.set_xlabel("achieved throughput (ok requests/s, measured window)")
            axes.set_ylabel(f"{shown} {stat} (ms)")
            axes.grid(True, alpha=0.3)
    handles, labels = grid[0][0].get_legend_handles_labels()
    if handles:
        _legend_below(fig, handles, labels)
    fig.suptitle(title)


_LEGEND_FONTS = (9, 8, 7)  # tried in turn when even one column is wider than the figure
_LEGEND_PAD_PX = 4.0  # clear space kept between the legend and the panels above it


def _legend_below(fig: Figure, handles: list[Any], labels: list[str]) -> None:
    """The figure's legend under the panels, and whole: in up to 3 columns, as many as fit the
    figure's width (long names: compared sweeps' folder names), a smaller font when even one
    does not; the figure made taller when its rows reach the lowest panels' axis labels."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for fontsize in _LEGEND_FONTS:
        for ncols in range(min(3, len(labels)), 0, -1):
            legend = fig.legend(handles, labels, loc="lower center", ncols=ncols, fontsize=fontsize)
            if legend.get_window_extent(renderer).width <= fig.bbox.width:
                break
            legend.remove()
        else:
            continue
        break
    else:  # (one column at the smallest font, though wider: as little cut as can be)
        legend = fig.legend(handles, labels, loc="lower center", ncols=1, fontsize=7)
    top = legend.get_window_extent(renderer).y1 + _LEGEND_PAD_PX
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]
    lowest = min(box.y0 for box in boxes if box is not None)
    if top <= lowest:
        return
    old, grow = fig.get_figheight(), (top - lowest) / fig.dpi
    placed = [(ax, ax.get_position()) for ax in fig.axes]
    fig.set_figheight(old + grow)
    new = old + grow
    for ax, box in placed:  # every panel moves up by the shortfall and keeps its size
        ax.set_position((box.x0, (box.y0 * old + grow) / new, box.width, box.height * old / new))


def write_sweep_plots(
    sweep_dir: str | Path, table: pd.DataFrame, manifest: Mapping[str, Any]
) -> list[Path]:
    """Write plots/latency_throughput.png of a sweep; nothing when no point has results."""
    fig = _figure()
    grid = fig.subplots(len(_PANELS), len(_STATS), squeeze=False)
    labels: dict[Axes, list[PointLabel]] = {}
    if not _draw(grid, table, manifest, "", "-", [False], labels):
        return []
    _finish(fig, grid, f"{Path(sweep_dir).name}: latency against throughput", labels)
    out = Path(sweep_dir) / PLOTS_DIR
    out.mkdir(exist_ok=True)
    path = out / CURVE_FILE
    save_png(fig, path, dpi=90)
    return [path]


def write_compare_plot(
    path: str | Path, sweeps: Sequence[tuple[str, pd.DataFrame, Mapping[str, Any]]]
) -> Path:
    """One figure with every sweep's curves (line style per sweep), written to ``path``."""
    fig = _figure()
    grid = fig.subplots(len(_PANELS), len(_STATS), squeeze=False)
    labelled = [False]
    labels: dict[Axes, list[PointLabel]] = {}
    for number, (name, table, manifest) in enumerate(sweeps):
        style = _STYLES[number % len(_STYLES)]
        _draw(grid, table, manifest, f"{name}: ", style, labelled, labels)
    title = "latency against throughput: " + " vs ".join(n for n, _, _ in sweeps)
    _finish(fig, grid, title, labels)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_png(fig, path, dpi=90)
    return path
