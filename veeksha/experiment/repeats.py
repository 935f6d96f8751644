"""Repeated runs: the same scenario run N times, and how much its numbers vary between runs.

``veeksha run FILE --repeats N [--confidence 0.95] [--vary-seed]`` runs the file's scenario (or
each point of a sweep) N times with the same seed, hence the same sessions, prompts and
schedule: what differs between the runs is the system's noise (the server's batching, clocks,
the network, the machine), which one run cannot show. The same prompts meet a server whose
prefix cache holds them from the repeat before; ``--vary-seed`` runs repeat k with seed + k - 1
(other prompts and arrival times, drawn alike), so the spread includes the workload's.

It is a sweep with one more swept key, ``repeat`` (1 to N, innermost): the sweep's folder,
points, shared managed server, Ctrl-C and ``--resume`` (``veeksha.experiment.sweep``), and
two more files written beside sweep.parquet:

- ``repeats.json``: ``confidence``, ``repeats`` (N), and ``groups``: one per point of the file
  (one for a plain file), each ``{values`` (its swept values but ``repeat``), ``runs``
  (complete runs: not interrupted, not refused), ``health_failed`` (of them), ``metrics}``;
  each metric of sweep.parquet's headline ones has ``n``, ``mean``, ``std`` (sample, n - 1),
  ``min``, ``max``, ``cv`` (std / |mean|), ``se`` (std / sqrt n), ``t_critical`` (Student's t
  at the confidence, n - 1 degrees of freedom) and ``ci_low``, ``ci_high`` (mean ± t × se: the
  interval that holds the mean of the metric over repeated runs at that confidence, runs
  assumed independent and their metric near normal). Fewer than two values: std and the
  interval are null.
- ``repeats.csv``: the same, one row per group and metric.

The console prints each group's table at the end of the run and with ``veeksha report``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from veeksha.scenario.loader import ScenarioSet

__all__ = [
    "REPEATS_CSV",
    "REPEATS_FILE",
    "REPEAT_KEY",
    "SHOWN",
    "aggregate",
    "group_label",
    "read_repeats",
    "render_repeats",
    "student_t_cdf",
    "student_t_quantile",
    "with_repeats",
    "write_repeats",
]

REPEAT_KEY = "repeat"
REPEATS_FILE = "repeats.json"
REPEATS_CSV = "repeats.csv"

#: sweep.parquet column → (label, scale) of the metrics shown on the console (and compared)
SHOWN: dict[str, tuple[str, float]] = {
    "requests_per_s": ("requests/s", 1),
    "output_tokens_per_s": ("output tokens/s", 1),
    "ttfc_p50_s": ("TTFC p50 (ms)", 1000),
    "ttfc_p99_s": ("TTFC p99 (ms)", 1000),
    "tpot_p50_s": ("TPOT p50 (ms)", 1000),
    "tpot_p99_s": ("TPOT p99 (ms)", 1000),
    "e2e_p50_s": ("E2E p50 (ms)", 1000),
    "e2e_p99_s": ("E2E p99 (ms)", 1000),
    "error_rate": ("error rate (%)", 100),
    "joules_per_output_token": ("J / output token", 1),
}
_AGGREGATED = (
    "requests_per_s",
    "input_tokens_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "sessions_per_s",
    "goodput_requests_per_s",
    "error_rate",
    *(f"{m}_{s}_s" for m in ("ttfc", "tbc", "tpot", "e2e") for s in ("mean", "p50", "p90", "p99")),
    "joules_per_output_token",
    "gpu_power_w",
)


def with_repeats(points: ScenarioSet, count: int, vary_seed: bool = False) -> ScenarioSet:
    """Every point of ``points`` ``count`` times, ``repeat`` (1 to count) its innermost swept
    key: the points of a run with ``--repeats count``; ``vary_seed``: repeat k runs with the
    point's seed + k - 1 (``--vary-seed``)."""
    from dataclasses import replace

    from veeksha.scenario.loader import SweepPoint

    repeated: list[SweepPoint] = []
    for point in points.points:
        for k in range(1, count + 1):
            label = f"{point.label},{REPEAT_KEY}={k}" if point.label else f"{REPEAT_KEY}={k}"
            values = {**point.values, REPEAT_KEY: k}
            scenario = point.scenario
            if vary_seed and k > 1:
                scenario = scenario.model_copy(update={"seed": scenario.seed + k - 1})
            repeated.append(SweepPoint(len(repeated), values, label, scenario))
    return replace(
        points,
        points=repeated,
        swept_keys=[*points.swept_keys, REPEAT_KEY],
        short_names={**points.short_names, REPEAT_KEY: REPEAT_KEY},
    )


# ----------------------------------------------------------------------- Student's t quantile


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (evaluated
    with the modified Lentz method), on the side of x where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * fraction / a


def student_t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` degrees of freedom (``inf``: normal)."""
    if math.isinf(df):
        return 0.5 * math.erfc(-t / math.sqrt(2))
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0 < p < 1) of Student's t with ``df`` degrees of freedom (bisection
    on its distribution function; within 1e-10)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0 (got p={p}, df={df})")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        high *= 2.0
    while high - low > 1e-10 * max(1.0, high):
        middle = (low + high) / 2
        low, high = (middle, high) if student_t_cdf(middle, df) < p else (low, middle)
    return (low + high) / 2


# --------------------------------------------------------------------------------- aggregate


def _statistics(values: Sequence[float], confidence: float) -> dict[str, float | int | None]:
    n = len(values)
    mean = sum(values) / n
    out: dict[str, float | int | None] = {
        "n": n,
        "mean": mean,
        "min": min(values),
        "max": max(values),
        "std": None,
        "cv": None,
        "se": None,
        "t_critical": None,
        "ci_low": None,
        "ci_high": None,
    }
    if n >= 2:
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
        se = std / math.sqrt(n)
        t = student_t_quantile(1 - (1 - confidence) / 2, n - 1)
        out |= {
            "std": std,
            "cv": std / abs(mean) if mean else None,
            "se": se,
            "t_critical": t,
            "ci_low": mean - t * se,
            "ci_high": mean + t * se,
        }
    return out


def aggregate(table: pd.DataFrame, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``repeats.json``'s content from a sweep's table (``sweep_table``) and its manifest."""
    from veeksha.experiment.sweep_table import value_columns

    repeats = manifest.get("repeats") or {}
    confidence = float(repeats.get("confidence", 0.95))
    columns = value_columns(manifest)
    by = [column for key, column in columns.items() if key != REPEAT_KEY]
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for _, row in table.iterrows():
        groups.setdefault(tuple(_plain(row[c]) for c in by), []).append(row)
    out_groups = []
    for key, rows in groups.items():
        complete = [row for row in rows if row["status"] == "complete"]
        metrics = {}
        for column in _AGGREGATED:
            values = [float(v) for row in complete if (v := _plain(row.get(column))) is not None]
            if values:
                metrics[column] = _statistics(values, confidence)
        out_groups.append(
            {
                "values": dict(zip(by, key, strict=True)),
                "runs": len(complete),
                "of": len(rows),
                "health_failed": sum(1 for row in complete if row["health"] == "FAIL"),
                "metrics": metrics,
            }
        )
    return {"confidence": confidence, "repeats": repeats.get("count"), "groups": out_groups}


def _plain(value: Any) -> Any:
    """A table cell as a plain value: None for missing (NaN, NA), numbers as numbers."""
    import pandas as pd

    if value is None or bool(pd.isna(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def write_repeats(sweep_dir: Path, data: Mapping[str, Any]) -> None:
    """repeats.json and repeats.csv into ``sweep_dir``."""
    (sweep_dir / REPEATS_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    stats = ("n", "mean", "std", "min", "max", "cv", "se", "t_critical", "ci_low", "ci_high")
    with (sweep_dir / REPEATS_CSV).open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["group", "metric", *stats])
        for group in data["groups"]:
            label = group_label(group)
            for metric, values in group["metrics"].items():
                writer.writerow(
                    [label, metric, *("" if values[s] is None else values[s] for s in stats)]
                )


def read_repeats(sweep_dir: Path) -> dict[str, Any]:
    """repeats.json of a repeated run's folder."""
    data = json.loads((Path(sweep_dir) / REPEATS_FILE).read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def group_label(group: Mapping[str, Any]) -> str:
    values = group.get("values") or {}
    return ",".join(f"{k}={v}" for k, v in values.items()) or "all"


def render_repeats(console: Console, data: Mapping[str, Any]) -> None:
    """Each group's table: mean, the confidence interval's half-width, CV, min and max of the
    headline metrics over its runs."""
    from rich.table import Table

    from veeksha.evaluate.report import number_text

    level = f"{number_text(100 * float(data.get('confidence', 0.95)))}%"
    for group in data.get("groups") or []:
        title = f"repeats: {group.get('runs')} of {group.get('of')} runs complete"
        if group.get("values"):
            title = f"{group_label(group)}: {title}"
        if group.get("health_failed"):
            title += f", {group['health_failed']} with health FAIL"
        table = Table(title=title, title_justify="left")
        for name, justify in (("metric", "left"), ("mean", "right"), (f"± {level} CI", "right")):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for name in ("CV", "min", "max"):
            table.add_column(name, justify="right")
        metrics = group.get("metrics") or {}
        for column, (label, scale) in SHOWN.items():
            stats = metrics.get(column)
            if stats is None:
                continue
            half = None if stats["ci_high"] is None else (stats["ci_high"] - stats["mean"]) * scale
            cv = None if stats["cv"] is None else 100 * stats["cv"]
            table.add_row(
                label,
                number_text(stats["mean"] * scale),
                number_text(half),
                "-" if cv is None else f"{number_text(cv)}%",
                number_text(stats["min"] * scale),
                number_text(stats["max"] * scale),
            )
        console.print(table)
