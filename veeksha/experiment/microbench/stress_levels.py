"""The load levels of ``veeksha stress``: log-spaced ranges and the ``auto`` search.

Vocabulary: a *level* is a concurrency (whole requests in flight) or a rate (requests per
second); ``measure(level)`` runs the point at that level and returns its output throughput
(tokens/s). The auto search has two phases:

1. **Doubling**: measure ``start``, ``2 × start``, ``4 × start``... and stop at the first level
   whose throughput is less than ``(1 + threshold)`` times the previous level's (the curve has
   flattened), or before a level above ``max_level``.
2. **Filling**: when doubling stopped on a flat step, the knee lies between the level two
   doublings back and the last one (the step before last still gained ``threshold``); measure
   ``fill_points`` more levels log-spaced strictly inside that interval.

Worked example (threshold 10 %, fill 2): throughput 100, 195, 380, 400 at levels 1, 2, 4, 8 →
400 < 1.1 × 380 stops doubling at 8; the knee is in (2, 8); fill levels 3.17 and 5.04, rounded
for a concurrency to 3 and 5. Levels measured: 1, 2, 3, 4, 5, 8.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["auto_levels", "log_spaced"]


def _level(value: float, integer: bool) -> float:
    return float(max(1, round(value))) if integer else float(f"{value:.4g}")


def log_spaced(low: float, high: float, count: int, integer: bool) -> list[float]:
    """``count`` levels log-spaced from ``low`` to ``high`` (both included); integers rounded
    and duplicates dropped."""
    if count < 2 or high <= low:
        return [_level(low, integer)]
    step = (math.log(high) - math.log(low)) / (count - 1)
    levels = [_level(math.exp(math.log(low) + i * step), integer) for i in range(count)]
    return sorted(set(levels))


def auto_levels(
    measure: Callable[[float], float],
    *,
    start: float,
    max_level: float,
    threshold: float,
    fill_points: int,
    integer: bool,
) -> list[float]:
    """Run the auto search (module docstring) and return the measured levels in the order
    they were measured."""
    probes: list[tuple[float, float]] = []
    level = _level(start, integer)
    saturated = False
    while level <= max_level:
        throughput = measure(level)
        if probes and throughput < probes[-1][1] * (1 + threshold):
            probes.append((level, throughput))
            saturated = True
            break
        probes.append((level, throughput))
        level = _level(level * 2, integer)
    measured = [level for level, _ in probes]
    if not saturated or fill_points < 1 or len(probes) < 2:
        return measured
    low = probes[max(0, len(probes) - 3)][0]
    high = probes[-1][0]
    inside = log_spaced(low, high, fill_points + 2, integer)[1:-1]
    for level in inside:
        if level not in measured and low < level < high:
            measure(level)
            measured.append(level)
    return measured
