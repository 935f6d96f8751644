"""``veeksha diff DIR_A DIR_B``: two sets of microbenchmark results, side by side.

Each folder is searched for ``<name>_results.json`` (``prefill``, ``decode``, ``stress``) in
itself and one level down (a result folder, or the ``output_dir`` holding result folders); when a
folder holds several results of one benchmark, the newest (``created_at``) is used, and the
report says so. Every benchmark found in both is compared:

- prefill: the fit's slope (ms per 1k tokens) and intercept, TTFC p50/p99 per input length;
- decode: each fit's slope (ms per sequence) and intercept, TBC p50/p99 and decode tokens/s per
  (input length, batch size);
- stress (same traffic): output and input tokens/s, requests/s, TTFC/E2E p50/p99 and
  interactivity p50 per load level.

A *change* is ``(B − A) / A`` (null when A is 0 or either is missing); only the points both
results measured are compared. A change whose point was not healthy on a side (its run's
health verdict not ``PASS``) says so in ``health`` (``A:FAIL``, ``B:WARN``, both); a fit's row
names how many of the points under it were not healthy (``A:1 unhealthy``). Such changes are
never silently mixed with good ones: the table marks them and the plots draw those points
hollow. Two folders with nothing comparable are bad input (exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from veeksha.errors import ConfigurationError
from veeksha.experiment.microbench.results import prefill_point

__all__ = ["BENCHMARKS", "Change", "compare", "find_results", "unhealthy"]

BENCHMARKS = ("prefill", "decode", "stress")


@dataclass(frozen=True)
class Change:
    """One compared figure: the benchmark, the point (``L=128``, ``c=4``, ``fit``), the metric,
    both values and the relative change."""

    benchmark: str
    point: str
    metric: str
    a: float | None
    b: float | None
    change: float | None
    health: str = ""  # empty: healthy on both sides (see the module docstring)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path}: not a readable results file ({exc})") from None
    if not isinstance(document, dict) or document.get("benchmark") not in BENCHMARKS:
        return None
    if not isinstance(document.get("points"), list):
        raise ConfigurationError(f"{path}: a {document['benchmark']} results file without points")
    return document


def find_results(folder: Path, notes: list[str]) -> dict[str, tuple[Path, dict[str, Any]]]:
    """The results in ``folder`` and one level down, newest per benchmark; ``notes`` gets a
    line for each benchmark found more than once."""
    if not folder.is_dir():
        raise ConfigurationError(f"{folder}: not a folder; give two folders of results")
    found: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for path in sorted([*folder.glob("*_results.json"), *folder.glob("*/*_results.json")]):
        document = _read(path)
        if document is not None:
            found.setdefault(document["benchmark"], []).append((path, document))
    chosen: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, items in found.items():
        items.sort(key=lambda item: str(item[1].get("created_at", "")))
        chosen[name] = items[-1]
        if len(items) > 1:
            notes.append(f"{folder}: {len(items)} {name} results; using the newest, {items[-1][0]}")
    return chosen


def _change(a: Any, b: Any) -> float | None:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or a == 0:
        return None
    return (b - a) / abs(a)


def _by(points: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    return {key(p): p for p in points}


def unhealthy(point: dict[str, Any]) -> bool:
    """Whether a result point's run was not healthy (a verdict other than PASS; a point
    without a verdict, e.g. a fit, is not judged here)."""
    return "health" in point and point["health"] != "PASS"


def _health(left: dict[str, Any], right: dict[str, Any]) -> str:
    return " ".join(
        f"{side}:{point['health']}"
        for side, point in (("A", left), ("B", right))
        if unhealthy(point)
    )


def _fit_health(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    counts = (("A", sum(map(unhealthy, a))), ("B", sum(map(unhealthy, b))))
    return " ".join(f"{side}:{n} unhealthy" for side, n in counts if n)


def _pairs(
    name: str,
    a: list[dict[str, Any]],
    b: list[dict[str, Any]],
    key: Callable[[dict[str, Any]], str],
    metrics: tuple[str, ...],
    health: Callable[[dict[str, Any], dict[str, Any]], str] = _health,
) -> list[Change]:
    left, right = _by(a, key), _by(b, key)
    return [
        Change(
            name,
            point,
            metric,
            left[point].get(metric),
            right[point].get(metric),
            _change(left[point].get(metric), right[point].get(metric)),
            health(left[point], right[point]),
        )
        for point in left
        if point in right
        for metric in metrics
    ]


def _prefill(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    changes: list[Change] = []
    if a.get("fit") and b.get("fit"):
        images = "slope_ms_per_megapixel" in a["fit"]
        changes += _pairs(
            "prefill",
            [a["fit"]],
            [b["fit"]],
            lambda _: "fit",
            ("slope_ms_per_megapixel" if images else "slope_ms_per_1k_tokens", "intercept_ms"),
            lambda _a, _b: _fit_health(a["points"], b["points"]),
        )
    return changes + _pairs(
        "prefill", a["points"], b["points"], prefill_point, ("ttfc_p50_ms", "ttfc_p99_ms")
    )


def _decode(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    changes = _pairs(
        "decode",
        a.get("fits") or [],
        b.get("fits") or [],
        lambda f: f"fit L={f['input_length']}",
        ("slope_ms_per_seq", "intercept_ms"),
        lambda fa, fb: _fit_health(
            [p for p in a["points"] if p["input_length"] == fa["input_length"]],
            [p for p in b["points"] if p["input_length"] == fb["input_length"]],
        ),
    )
    return changes + _pairs(
        "decode",
        a["points"],
        b["points"],
        lambda p: f"L={p['input_length']} B={p['batch_size']}",
        ("tbc_p50_ms", "tbc_p99_ms", "decode_tokens_per_s"),
    )


def _stress(a: dict[str, Any], b: dict[str, Any]) -> list[Change]:
    unit = "c" if a.get("traffic") == "concurrency" else "rps"
    return _pairs(
        "stress",
        a["points"],
        b["points"],
        lambda p: f"{unit}={p['level']:g}",
        (
            "output_tokens_per_s",
            "input_tokens_per_s",
            "requests_per_s",
            "ttfc_p50_ms",
            "ttfc_p99_ms",
            "e2e_p50_ms",
            "e2e_p99_ms",
            "interactivity_p50",
        ),
    )


_COMPARE: dict[str, Callable[[dict[str, Any], dict[str, Any]], list[Change]]] = {
    "prefill": _prefill,
    "decode": _decode,
    "stress": _stress,
}


def compare(
    dir_a: Path, dir_b: Path
) -> tuple[dict[str, tuple[dict[str, Any], dict[str, Any]]], list[Change], list[str]]:
    """The pairs of results compared (by benchmark), every change, and notes; raise
    :class:`ConfigurationError` (exit 2) when nothing is comparable."""
    notes: list[str] = []
    found_a, found_b = find_results(dir_a, notes), find_results(dir_b, notes)
    pairs: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    changes: list[Change] = []
    for name in BENCHMARKS:
        if name not in found_a or name not in found_b:
            continue
        (_, a), (_, b) = found_a[name], found_b[name]
        if name == "stress" and a.get("traffic") != b.get("traffic"):
            notes.append(f"stress: {a.get('traffic')} against {b.get('traffic')} levels; skipped")
            continue
        found = _COMPARE[name](a, b)
        if not found:
            notes.append(f"{name}: no point measured in both; skipped")
            continue
        pairs[name] = (a, b)
        changes += found
    if not pairs:
        raise ConfigurationError(
            f"nothing comparable: {dir_a} has {_names(found_a)}, {dir_b} has {_names(found_b)}"
            + (f" ({'; '.join(notes)})" if notes else "")
            + "; give two folders holding results of the same benchmark (<name>_results.json "
            "written by veeksha prefill, decode or stress)"
        )
    return pairs, changes, notes


def _names(found: dict[str, Any]) -> str:
    return "[" + ", ".join(found) + "]" if found else "no results"
