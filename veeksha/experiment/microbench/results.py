"""What a microbenchmark leaves: ``<name>_results.json`` and ``<name>_results.csv``.

The JSON is the whole result (``RESULTS_VERSION``, the target, the settings, one entry per point,
the fit, the checks, ``passed``); the CSV is its ``points`` table, one row per point, for
spreadsheets and ``veeksha diff``. Both are documented field by field in docs/microbench.md.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "RESULTS_VERSION",
    "Check",
    "LineFit",
    "PointChecks",
    "check",
    "fit_line",
    "prefill_point",
    "prefill_x",
    "write_results",
]

RESULTS_VERSION = 1


@dataclass(frozen=True)
class Check:
    """One self-check of the measurement: its name, whether it held, and what was seen. A
    ``warning`` check that fails is reported but does not fail the result."""

    name: str
    passed: bool
    detail: str
    warning: bool = False


def check(name: str, problems: list[str], good: str) -> Check:
    """A check that holds when ``problems`` is empty; its detail: the problems, else ``good``."""
    return Check(name, not problems, "; ".join(problems) if problems else good)


@dataclass
class PointChecks:
    """The checks every point of a prefill or decode benchmark gets: all its requests
    succeeded and its run's health verdict is PASS."""

    short: list[str] = field(default_factory=list)
    unhealthy: list[str] = field(default_factory=list)

    def note(self, where: str, ok: int, expected: int, verdict: str | None) -> None:
        """Record point ``where``: ``ok`` of ``expected`` requests succeeded, health ``verdict``."""
        if ok < expected:
            self.short.append(f"{where}: {ok}/{expected} ok")
        if verdict != "PASS":
            self.unhealthy.append(f"{where}: {verdict}")

    def checks(self) -> list[Check]:
        return [
            check("all_ok", self.short, "every request of every point succeeded"),
            check("healthy_points", self.unhealthy, "every point's health verdict is PASS"),
        ]


@dataclass(frozen=True)
class LineFit:
    """``y = intercept + slope × x`` by least squares, with its coefficient of determination."""

    slope: float
    intercept: float
    r2: float
    points: int


def fit_line(x: Sequence[float], y: Sequence[float]) -> LineFit | None:
    """Least-squares line through (x, y); None with fewer than two distinct x."""
    xs = np.asarray(x, dtype=float)
    ys = np.asarray(y, dtype=float)
    if len(xs) < 2 or np.ptp(xs) == 0:
        return None
    slope, intercept = np.polyfit(xs, ys, 1)
    residual = float(np.sum((ys - (intercept + slope * xs)) ** 2))
    total = float(np.sum((ys - ys.mean()) ** 2))
    r2 = 1.0 - residual / total if total > 0 else 1.0
    return LineFit(float(slope), float(intercept), r2, len(xs))


def write_results(
    folder: Path,
    name: str,
    body: dict[str, Any],
    points: Sequence[dict[str, Any]],
    checks: Sequence[Check],
) -> dict[str, Any]:
    """Write ``<name>_results.json`` (``body`` plus points and checks) and the points as
    ``<name>_results.csv``; the JSON document."""
    document = {
        "benchmark": name,
        "version": RESULTS_VERSION,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **body,
        "points": list(points),
        "checks": [asdict(check) for check in checks],
        "passed": all(check.passed or check.warning for check in checks),
    }
    (folder / f"{name}_results.json").write_text(
        json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8"
    )
    columns = [
        k for k, v in (points[0] if points else {}).items() if not isinstance(v, dict | list)
    ]
    with (folder / f"{name}_results.csv").open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(points)
    return document


def prefill_x(points: Sequence[dict[str, Any]]) -> str:
    """The x of a prefill result's points: ``input_length``, or ``megapixels`` when they are
    image sides (``veeksha prefill --image_sides``)."""
    return "megapixels" if points and "image_side" in points[0] else "input_length"


def prefill_point(point: dict[str, Any]) -> str:
    """A prefill point's name: ``L=512``, or an image side's ``448x448``."""
    if "image_side" in point:
        return f"{point['image_side']}x{point['image_side']}"
    return f"L={point['input_length']}"
