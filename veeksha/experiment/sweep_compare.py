"""Sweep against sweep: one plot of every sweep's curves, and the relative change of the
headline metrics at matching swept values.

Points match when their swept values are equal on the swept keys the sweeps share (by column
name: ``arrival_rate`` matches ``arrival_rate``); sweeps with no swept key in common match by
point index. A point of the first sweep with no match in another is listed as missing there. A
change involving a point that failed a health check is marked ``!``: it is not a server result.

Under the tables, what ``veeksha compare`` of runs says beside its numbers (veeksha.evaluate.
compare's helpers): how each sweep's points that did not complete ended (interrupted, stopped
early, killed, refused, not run), matched points judged by other SLOs, matched points whose
verdict on an SLO differs, and the scenario keys that differ besides the swept ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from veeksha.experiment.sweep_table import read_table, value_columns

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "COMPARED",
    "compare_sweeps",
    "ending_notes",
    "matched_changes",
    "point_summaries",
    "render_changes",
    "render_table",
    "scenario_note",
    "slo_notes",
]

#: Column → label of the metrics compared (latencies in seconds in the table, ms when shown).
COMPARED = {
    "requests_per_s": "req/s",
    "output_tokens_per_s": "out tok/s",
    "ttfc_p50_s": "TTFC p50",
    "ttfc_p99_s": "TTFC p99",
    "tpot_p50_s": "TPOT p50",
    "tpot_p99_s": "TPOT p99",
    "e2e_p50_s": "E2E p50",
    "e2e_p99_s": "E2E p99",
    "error_rate": "errors",
}

_FIRST_COMPARED = next(iter(COMPARED))
_LATENCY = {c for c in COMPARED if c.endswith(("_p50_s", "_p99_s"))}


def _number(value: Any) -> float | None:
    if value is None or value is pd.NA:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _same_value(value: Any) -> Any:
    """A swept value as matched across sweeps: 4 and 4.0 are the same rate."""
    number = _number(value) if not isinstance(value, str) else None
    return number if number is not None else str(value)


def _change(base: Any, other: Any) -> float | None:
    a, b = _number(base), _number(other)
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a


def matched_changes(
    first: pd.DataFrame, other: pd.DataFrame, keys: Sequence[str]
) -> list[dict[str, Any]]:
    """One entry per point of ``first``: its label, the matching point of ``other`` (or None)
    and the relative change (other - first) / first of each :data:`COMPARED` metric."""
    rows = []
    for _, row in first.iterrows():
        if keys:
            mask = pd.Series(True, index=other.index)
            for key in keys:
                mask &= other[key].map(_same_value) == _same_value(row[key])
            found = other[mask]
        else:
            found = other[other["index"] == row["index"]]
        match = None if found.empty else found.iloc[0]
        entry: dict[str, Any] = {
            "point": row["point"],
            "matched": None if match is None else match["point"],
            # (str: a point without a summary has a null health, pd.NA, that is no bool)
            "health_failed": str(row["health"]) == "FAIL"
            or (match is not None and str(match["health"]) == "FAIL"),
        }
        for column in COMPARED:
            entry[column] = None if match is None else _change(row[column], match[column])
        rows.append(entry)
    return rows


def _shown_change(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f}%"


def compare_sweeps(console: Console, sweep_dirs: Sequence[Path], plot_path: Path) -> None:
    """Write the curve plot of the sweeps and print each one's changes relative to the first."""
    from veeksha.experiment.sweep import read_manifest
    from veeksha.experiment.sweep_plots import write_compare_plot

    loaded = [(d.name, read_table(d), read_manifest(d)) for d in sweep_dirs]
    summaries = [
        point_summaries(d, table) for d, (_, table, _) in zip(sweep_dirs, loaded, strict=True)
    ]
    name0, table0, manifest0 = loaded[0]
    any_failed = False
    notes = [
        note
        for (name, table, _), points in zip(loaded, summaries, strict=True)
        for note in ending_notes(name, table, points)
    ]
    for directory, (name, table, manifest), points in zip(
        sweep_dirs[1:], loaded[1:], summaries[1:], strict=True
    ):
        theirs = set(value_columns(manifest).values())
        keys = [c for c in value_columns(manifest0).values() if c in theirs]
        title = f"{name} relative to {name0} (matched on {', '.join(keys) or 'index'})"
        entries = matched_changes(table0, table, keys)
        failed = render_changes(console, title, entries)
        any_failed = any_failed or failed
        notes.extend(slo_notes(name0, name, entries, summaries[0], points))
        note = scenario_note(sweep_dirs[0], table0, manifest0, directory, table, manifest)
        if note is not None:
            notes.append(note)
    if any_failed:
        console.print("! a point of this row failed a health check: not a server result")
    for note in notes:
        console.print(note, style="yellow", markup=False, highlight=False)
    path = write_compare_plot(plot_path, loaded)
    console.print(f"wrote {path}", soft_wrap=True)  # (a path: never cut across lines)


#: What is said of a point with no summary.json, by its status (sweep.parquet's).
_NO_RESULTS = {
    "incomplete": "no results: no summary.json (killed in set-up or evaluation; veeksha report "
    "POINT_DIR evaluates what it recorded)",
    "error": "no results: refused before its traffic",
    "not_run": "no results: not run",
}
_SHOWN_POINTS = 6  # points named per note; the rest are counted


def point_summaries(sweep_dir: Path, table: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each point's summary.json by its label (``{}`` for a point that wrote none)."""
    from veeksha.experiment.point import read_summary

    folders = table["run_folder"] if "run_folder" in table else [None] * len(table)
    return {
        str(point): read_summary(sweep_dir / str(folder)) if folder else {}
        for point, folder in zip(table["point"], folders, strict=True)
    }


def _named(points: Sequence[str]) -> str:
    shown = ", ".join(points[:_SHOWN_POINTS])
    more = len(points) - _SHOWN_POINTS
    return shown + (f" and {more} more" if more > 0 else "")


def ending_notes(
    name: str, table: pd.DataFrame, summaries: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """How the sweep's points that did not complete ended (interrupted, stopped, killed, refused,
    not run...), as ``veeksha compare`` of runs says it, one line per thing said with the points
    it is said of: ``sweep-B (arrival_rate=24): interrupted: its numbers cover ...``."""
    from veeksha.evaluate.compare import ending_notes as run_ending_notes

    said: dict[str, list[str]] = {}
    for point, status in zip(table["point"], table["status"], strict=True):
        summary = summaries.get(str(point)) or {}
        if summary:
            texts = run_ending_notes(summary)
        else:
            texts = [_NO_RESULTS.get(str(status), f"no results ({status})")]
        for text in texts:
            said.setdefault(text, []).append(str(point))
    return [f"{name} ({_named(points)}): {text}" for text, points in said.items()]


def slo_notes(
    first_name: str,
    name: str,
    entries: Sequence[Mapping[str, Any]],
    first: Mapping[str, Mapping[str, Any]],
    other: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    """Of the matched points (``matched_changes``' entries) that both have a summary: those
    judged by other SLOs than the first sweep's, and those whose verdict on an SLO they share
    differs (``SLO ttfc p99 ≤ 200 ms: met in A, unmet in B at rate=24``)."""
    from veeksha.evaluate.compare import slo_label, slo_results, slo_verdict

    judged: dict[tuple[str, str], list[str]] = {}
    verdicts: dict[tuple[str, str, str], list[str]] = {}
    for entry in entries:
        a = first.get(str(entry["point"])) or {}
        b = {} if entry["matched"] is None else other.get(str(entry["matched"])) or {}
        if not a or not b:
            continue
        mine, theirs = slo_results(a), slo_results(b)
        if set(mine) != set(theirs):
            slos = tuple(", ".join(map(slo_label, s)) or "none" for s in (mine, theirs))
            judged.setdefault((slos[0], slos[1]), []).append(str(entry["point"]))
        for key in (k for k in mine if k in theirs):
            pair = (slo_verdict(mine[key]), slo_verdict(theirs[key]))
            if pair[0] != pair[1]:
                verdicts.setdefault((slo_label(key), *pair), []).append(str(entry["point"]))
    notes = [
        f"{name}'s SLOs are not {first_name}'s at {_named(points)}: {first_name} {mine_text}; "
        f"{name} {theirs_text}"
        for (mine_text, theirs_text), points in judged.items()
    ]
    notes += [
        f"{label}: {a_verdict} in {first_name}, {b_verdict} in {name} at {_named(points)}"
        for (label, a_verdict, b_verdict), points in verdicts.items()
    ]
    return notes


def _first_scenario(sweep_dir: Path, table: pd.DataFrame) -> dict[str, Any] | None:
    """The scenario (config.yaml) of the sweep's first point that has one."""
    from veeksha.evaluate.compare import read_scenario

    for folder in table["run_folder"].tolist() if "run_folder" in table else []:
        scenario = read_scenario(sweep_dir / str(folder)) if folder else None
        if scenario is not None:
            return scenario
    return None


def scenario_note(
    first_dir: Path,
    first: pd.DataFrame,
    first_manifest: Mapping[str, Any],
    other_dir: Path,
    other: pd.DataFrame,
    other_manifest: Mapping[str, Any],
) -> str | None:
    """The keys, besides the swept ones, in which the other sweep's scenario differs from the
    first's (each as its first point ran it); None when they do not, or a point's config.yaml
    cannot be read."""
    from veeksha.evaluate.compare import differences_note, dotted, scenario_differences

    a, b = _first_scenario(first_dir, first), _first_scenario(other_dir, other)
    if a is None or b is None:
        return None
    swept = {*first_manifest.get("swept_keys", []), *other_manifest.get("swept_keys", [])}
    differences = scenario_differences(a, b)
    kept = [path for path, key in zip(differences, dotted(differences), strict=True)
            if key not in swept]  # fmt: skip
    return differences_note(other_dir.name, first_dir.name, kept, " (besides the swept keys)")


def render_changes(console: Console, title: str, entries: Sequence[dict[str, Any]]) -> bool:
    """Print one sweep's changes relative to the first (``matched_changes``' entries), stacked
    to the terminal's width; True if a row's point failed a health check (marked ``!``)."""
    from veeksha.evaluate.stacked import StackedColumn, print_stacked

    points: list[str] = []
    cells: dict[str, list[str]] = {c: [] for c in COMPARED}
    any_failed = False
    for entry in entries:
        if entry["matched"] is None:
            points.append(str(entry["point"]))
            for column, values in cells.items():
                values.append("missing" if column == _FIRST_COMPARED else "")
            continue
        any_failed = any_failed or entry["health_failed"]
        points.append(f"{entry['point']}{' !' if entry['health_failed'] else ''}")
        for column, values in cells.items():
            values.append(_shown_change(entry[column]))
    key = StackedColumn("point", points, "left")
    columns = [StackedColumn(label, cells[column]) for column, label in COMPARED.items()]
    print_stacked(console, title, key, columns)
    return any_failed


_SHOWN = {
    "requests_per_s": "req/s",
    "ttfc_p50_s": "TTFC p50 ms",
    "ttfc_p99_s": "TTFC p99 ms",
    "tpot_p99_s": "TPOT p99 ms",
    "e2e_p99_s": "E2E p99 ms",
}


def _cell(value: Any) -> str:
    return "-" if value is None or value is pd.NA else str(value)


def render_table(console: Console, name: str, table: pd.DataFrame) -> None:
    """The sweep's table as people read it: one line per point (all columns: sweep.parquet),
    its columns stacked into two tables when the terminal is too narrow for one; numbers as the
    run report shows them (4 significant digits: ``254``, ``0.3``, ``12.35k``)."""
    from veeksha.evaluate.report import number_text
    from veeksha.evaluate.stacked import StackedColumn, print_stacked

    rows = [row for _, row in table.iterrows()]
    columns = [
        StackedColumn("status", [str(row["status"]) for row in rows], "left"),
        StackedColumn("health", [_cell(row["health"]) for row in rows], "left"),
        StackedColumn("SLOs", [_slo_text(row["slo_met"]) for row in rows], "left"),
        StackedColumn("exit", [_cell(row["exit_code"]) for row in rows]),
    ]
    for column, label in _SHOWN.items():
        scale = 1 if column == "requests_per_s" else 1000
        values = [_number(row[column]) for row in rows]
        cells = [number_text(None if value is None else value * scale) for value in values]
        columns.append(StackedColumn(label, cells))
    key = StackedColumn("point", [str(row["point"]) for row in rows], "left")
    print_stacked(console, f"sweep {name}", key, columns)


def _slo_text(slo: Any) -> str:
    return "-" if slo is None or slo is pd.NA else "met" if slo else "UNMET"
