"""Repeated runs against repeated runs: is a difference real or noise?

``veeksha compare A B`` of two folders of repeated runs (``--repeats``, ``repeats.json``)
matches their groups by swept values (a plain file's single group with the other's), and for
each headline metric gives both means with their confidence intervals, the change of B's mean
from A's, and Welch's t-test of the two means (unequal variances; Welch-Satterthwaite degrees
of freedom): ``p`` is the probability of a difference at least this large between the means of
runs of one same system, and the difference is called real (``differs: yes``) when ``p`` is
below 1 - the confidence A was run with. Fewer than two complete runs on a side: no test.
With more than two folders, each is compared with the first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veeksha.experiment.repeats import SHOWN, group_label, read_repeats, student_t_cdf

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["compare_repeats", "welch"]


def welch(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[float, float, float] | None:
    """Welch's t-test of two metrics' statistics (``n``, ``mean``, ``std``): (t, degrees of
    freedom, two-sided p); None with fewer than two values on a side."""
    na, nb = int(a.get("n") or 0), int(b.get("n") or 0)
    if na < 2 or nb < 2 or a.get("std") is None or b.get("std") is None:
        return None
    va, vb = float(a["std"]) ** 2 / na, float(b["std"]) ** 2 / nb
    difference = float(b["mean"]) - float(a["mean"])
    if va + vb == 0:  # (no spread on either side: equal means, or certainly different)
        return (0.0, math.inf, 1.0) if difference == 0 else (math.inf, math.inf, 0.0)
    t = difference / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    return t, df, 2 * (1 - student_t_cdf(abs(t), df))


def _mean_and_half(stats: Mapping[str, Any] | None, scale: float) -> str:
    from veeksha.evaluate.report import number_text

    if stats is None:
        return "-"
    mean = number_text(float(stats["mean"]) * scale)
    if stats.get("ci_high") is None:
        return mean
    return f"{mean} ± {number_text((float(stats['ci_high']) - float(stats['mean'])) * scale)}"


def compare_repeats(console: Console, folders: Sequence[Path]) -> None:
    """Print, for each folder after the first, its groups against the first's (module doc)."""
    from rich.table import Table

    from veeksha.evaluate.report import number_text

    first = read_repeats(folders[0])
    alpha = 1 - float(first.get("confidence", 0.95))
    base_groups = {group_label(g): g for g in first.get("groups") or []}
    for folder in folders[1:]:
        other = read_repeats(folder)
        groups = {group_label(g): g for g in other.get("groups") or []}
        if len(base_groups) == 1 and len(groups) == 1:  # (two plain files' single groups)
            pairs = [(next(iter(base_groups)), *base_groups.values(), *groups.values())]
        else:
            pairs = [(k, g, groups[k]) for k, g in base_groups.items() if k in groups]
        if not pairs:
            console.print(f"{folder.name}: no group in common with {folders[0].name}")
        for label, a, b in pairs:
            title = f"{folders[0].name} → {folder.name}"
            title += f" ({label})" if label != "all" else ""
            title += (
                f": {a.get('runs')} and {b.get('runs')} runs, differs if p < {number_text(alpha)}"
            )
            table = Table(title=title, title_justify="left")
            table.add_column("metric")
            for name in ("A", "B", "change", "p", "differs"):
                table.add_column(name, justify="right")
            for column, (name, scale) in SHOWN.items():
                sa = (a.get("metrics") or {}).get(column)
                sb = (b.get("metrics") or {}).get(column)
                if sa is None and sb is None:
                    continue
                change = "-"
                if sa is not None and sb is not None and float(sa["mean"]):
                    change = f"{100 * (float(sb['mean']) / float(sa['mean']) - 1):+.1f}%"
                test = None if sa is None or sb is None else welch(sa, sb)
                p = "-" if test is None else f"{test[2]:.2g}"
                differs = "-" if test is None else ("yes" if test[2] < alpha else "no")
                table.add_row(
                    name,
                    _mean_and_half(sa, scale),
                    _mean_and_half(sb, scale),
                    change,
                    p,
                    differs,
                )
            console.print(table)
