"""Descriptive statistics and the table helpers every evaluation module shares.

``describe`` is the one aggregate of a sample used across summary.json, the CSVs and the reports:
count, mean, min, max, std (population, ddof 0) and the percentiles of ``PERCENTILES`` with
numpy's linear interpolation (the same rule the SLOs use). Nulls never enter a sample: columns are
read as float64 with NaN for null and the NaNs are dropped.

>>> describe(np.array([1.0, 2.0, 3.0, 4.0]))["p50"]
2.5
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

__all__ = [
    "CSV_PERCENTILES",
    "MEASURED",
    "PERCENTILES",
    "Floats",
    "column",
    "describe",
    "flat_list",
    "measured_rows",
    "percentile_key",
    "status_is",
]

Floats = NDArray[np.float64]

MEASURED = "measured"
#: Percentiles of every aggregate (in percent), keyed by ``percentile_key``: p50 ... p99_9.
PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)
#: Rows of the per-metric CSVs in metrics/.
CSV_PERCENTILES: tuple[float, ...] = (
    0.0, 1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.9, 100.0,
)  # fmt: skip


def percentile_key(q: float) -> str:
    """The summary key of percentile ``q`` (in percent): 50 → ``p50``, 99.9 → ``p99_9``."""
    text = f"{q:g}".replace(".", "_")
    return f"p{text}"


def describe(values: Floats) -> dict[str, Any]:
    """count, mean, min, max, std and percentiles of ``values``; None for each with no data."""
    values = values[~np.isnan(values)]
    stats: dict[str, Any] = {"count": int(values.size)}
    empty = values.size == 0
    stats["mean"] = None if empty else float(values.mean())
    stats["min"] = None if empty else float(values.min())
    stats["max"] = None if empty else float(values.max())
    stats["std"] = None if empty else float(values.std())
    quantiles = np.percentile(values, PERCENTILES) if not empty else [None] * len(PERCENTILES)
    for q, v in zip(PERCENTILES, quantiles, strict=True):
        stats[percentile_key(q)] = None if v is None else float(v)
    return stats


def column(table: pa.Table, name: str) -> Floats:
    """Column ``name`` as a new float64 numpy array, NaN for null (ints and bools are cast)."""
    col = table.column(name)
    if not pa.types.is_floating(col.type):
        col = pc.cast(col, pa.float64())
    out: Floats = np.array(col.to_numpy(), dtype=np.float64)
    return out


def flat_list(table: pa.Table, name: str) -> Floats:
    """Every value of list column ``name`` (e.g. all TBC gaps), nulls and NaNs dropped."""
    col = table.column(name)
    if col.num_chunks == 0 or table.num_rows == 0:
        return np.empty(0)
    flat = pc.list_flatten(col)
    values = column(pa.table({"v": flat}), "v")
    return values[~np.isnan(values)]


def measured_rows(table: pa.Table) -> pa.Table:
    """The rows of the measured phase (metrics and checks ignore warmup rows)."""
    if table.num_rows == 0:
        return table
    mask = pc.equal(table.column("phase"), MEASURED)
    if pc.all(mask).as_py():  # no warmup: the table itself, not a copy of every column
        return table
    return table.filter(mask)


def status_is(table: pa.Table, status: str) -> NDArray[np.bool_]:
    """Boolean mask of the rows whose ``status`` is ``status``."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=bool)
    mask = pc.equal(table.column("status"), status)
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
