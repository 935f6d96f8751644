"""``plots/repeats.png`` of repeated runs: each headline metric's value in every run, its mean
and its confidence interval, so a drift across the repeats (a server warming up, a cache
filling) shows where the table's CV only says that they differ.

One panel per metric (requests/s, output tokens/s, TTFC p50 and p99, E2E p50 and p99): the runs
in order along x, one marker per complete run (a run whose health failed hollow), the mean as a
line and the interval (repeats.json's ``ci_low`` to ``ci_high``) as a band; several groups (a
sweep's points, each repeated) one colour each, in the legend by their swept values.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from veeksha.evaluate.png import agg_figure, save_png
from veeksha.experiment.repeats import REPEAT_KEY, group_label
from veeksha.experiment.sweep_table import value_columns

__all__ = ["REPEATS_PLOT", "write_repeats_plot"]

REPEATS_PLOT = "repeats.png"
_PANELS = (
    ("requests_per_s", "requests/s", 1.0),
    ("output_tokens_per_s", "output tokens/s", 1.0),
    ("ttfc_p50_s", "TTFC p50 (ms)", 1000.0),
    ("ttfc_p99_s", "TTFC p99 (ms)", 1000.0),
    ("e2e_p50_s", "E2E p50 (ms)", 1000.0),
    ("e2e_p99_s", "E2E p99 (ms)", 1000.0),
)


def write_repeats_plot(
    sweep_dir: Path, table: pd.DataFrame, manifest: Mapping[str, Any], data: Mapping[str, Any]
) -> Path | None:
    """Draw plots/repeats.png (module doc) from sweep.parquet's rows and repeats.json's
    ``data``; None when no run completed."""
    columns = value_columns(manifest)
    repeat = columns[REPEAT_KEY]
    by = [column for key, column in columns.items() if key != REPEAT_KEY]
    complete = table[table["status"] == "complete"]
    if complete.empty:
        return None
    fig = agg_figure(figsize=(10, 8))
    from matplotlib.ticker import MaxNLocator  # (loaded by agg_figure)

    fig.subplots_adjust(left=0.08, right=0.98, top=0.9, bottom=0.08, hspace=0.45, wspace=0.22)
    grid = fig.subplots(3, 2, squeeze=False)
    groups = list(data.get("groups") or [])
    for number, group in enumerate(groups):
        rows = complete
        for column in by:
            rows = rows[rows[column].astype(str) == str(group["values"].get(column))]
        colour = f"C{number % 10}"
        label = group_label(group)
        for axes, (column, title, scale) in zip(grid.flat, _PANELS, strict=True):
            values = rows[column].astype(float) * scale
            failed = (rows["health"] == "FAIL").to_numpy()
            x = rows[repeat].astype(float).to_numpy()
            axes.plot(x[~failed], values.to_numpy()[~failed], "o", color=colour, label=label)
            if failed.any():
                axes.plot(x[failed], values.to_numpy()[failed], "o", mfc="none", color=colour)
            stats = (group.get("metrics") or {}).get(column)
            if stats is not None:
                axes.axhline(stats["mean"] * scale, color=colour, linewidth=1)
                if stats.get("ci_low") is not None:
                    low, high = stats["ci_low"] * scale, stats["ci_high"] * scale
                    axes.axhspan(low, high, color=colour, alpha=0.15, linewidth=0)
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes.set_title(title, fontsize=10)
            axes.set_xlabel("repeat", fontsize=8)
            axes.grid(alpha=0.3)
    if len(groups) > 1:
        grid.flat[0].legend(fontsize=7, loc="best")
    level = f"{100 * float(data.get('confidence', 0.95)):g}%"
    fig.suptitle(f"{sweep_dir.name}: each run, the mean and its {level} interval", fontsize=11)
    out = sweep_dir / "plots"
    out.mkdir(exist_ok=True)
    return save_png(fig, out / REPEATS_PLOT, dpi=90)
