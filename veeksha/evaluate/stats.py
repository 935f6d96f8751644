"""Descriptive statistics and the table helpers every evaluation module shares.

``describe`` is the one aggregate of a sample used across summary.json, the CSVs and the reports:
count, mean, min, max, std (population, ddof 0) and the percentiles of ``PERCENTILES`` with
numpy's linear interpolation (the same rule the SLOs use). Nulls never enter a sample: columns are
read as float64 with NaN for null and the NaNs are dropped.

>>> describe(np.array([1.0, 2.0, 3.0, 4.0]))["p50"]
2.5
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

if TYPE_CHECKING:
    from veeksha.evaluate.source import ColumnSource

__all__ = [
    "CSV_PERCENTILES",
    "MEASURED",
    "PERCENTILES",
    "WARMUP",
    "Floats",
    "column",
    "describe",
    "first_rows",
    "flat_list",
    "floats",
    "from_numpy",
    "int_column",
    "integers",
    "measured_rows",
    "percentile_key",
    "scalar",
    "status_is",
]

Floats = NDArray[np.float64]

MEASURED = "measured"
WARMUP = "warmup"
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
    nan = np.isnan(values)
    if nan.any():
        values = values[~nan]
    del nan
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


# pyarrow imports pandas (~0.3-0.5 CPU-s) the first time it converts a Python or numpy value
# (pa.scalar, pa.array, a Python value passed to a compute function) or makes a numpy array
# (to_numpy, np.asarray). Evaluation needs none of it: these helpers go through buffers.


def scalar(value: str | int | float) -> pa.Scalar:
    """``pa.scalar(value)`` (string, int64 or float64) without pyarrow's Python conversion."""
    if isinstance(value, str):
        data = value.encode()
        offsets = np.array([0, len(data)], dtype=np.int32)
        return pa.StringArray.from_buffers(1, pa.py_buffer(offsets), pa.py_buffer(data))[0]
    return from_numpy(np.array([value]))[0]


def from_numpy(values: NDArray[Any]) -> pa.Array:
    """A 1-d numeric or boolean numpy array as an Arrow array (no nulls), without ``pa.array``."""
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    type_ = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(values)])


def _values(col: pa.Array | pa.ChunkedArray, type_: pa.DataType, dtype: Any) -> NDArray[Any]:
    """``col`` cast to ``type_`` as a new numpy array (nulls: NaN, or 0 for integers)."""
    if isinstance(col, pa.ChunkedArray):
        return _filled(col.chunks, len(col), type_, dtype)
    return _filled([col], len(col), type_, dtype)


def _filled(chunks: Iterable[pa.Array], size: int, type_: pa.DataType, dtype: Any) -> NDArray[Any]:
    """The ``size`` values of ``chunks`` copied into one numpy array, chunk by chunk: never a
    combined Arrow copy of the whole column beside it."""
    out = np.empty(size, dtype=dtype)
    start = 0
    for chunk in chunks:
        col = chunk if chunk.type == type_ else pc.cast(chunk, type_)
        n, offset = len(col), col.offset
        validity, data = col.buffers()[:2]
        part = out[start : start + n]
        start += n
        if n == 0:
            continue
        if data is None:  # all null
            part[:] = 0
            continue
        part[:] = np.frombuffer(data, dtype=dtype, count=offset + n)[offset:]
        if col.null_count and validity is not None:
            bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
            part[~bits[offset : offset + n].astype(bool)] = np.nan if out.dtype.kind == "f" else 0
    if start != size:
        raise ValueError(f"expected {size} values, read {start}")
    return out


def column(table: pa.Table | ColumnSource, name: str) -> Floats:
    """Column ``name`` as a new float64 numpy array, NaN for null (ints and bools are cast).

    From a ``ColumnSource`` the values are read a batch at a time into the array: the column is
    never held in Arrow memory as well.
    """
    out: Floats = _filled(_chunks(table, name), table.num_rows, pa.float64(), np.float64)
    return out


def int_column(table: pa.Table | ColumnSource, name: str) -> NDArray[np.int64]:
    """Integer (or boolean) column ``name`` as int64 numpy values (nulls become 0), read like
    ``column``."""
    out: NDArray[np.int64] = _filled(_chunks(table, name), table.num_rows, pa.int64(), np.int64)
    return out


def _chunks(table: pa.Table | ColumnSource, name: str) -> Iterable[pa.Array]:
    if isinstance(table, pa.Table):
        chunks: list[pa.Array] = table.column(name).chunks
        return chunks
    return table.batches(name)


def integers(col: pa.Array | pa.ChunkedArray) -> NDArray[np.int64]:
    """An integer (or boolean) array as int64 numpy values (nulls become 0)."""
    out: NDArray[np.int64] = _values(col, pa.int64(), np.int64)
    return out


def floats(col: pa.Array | pa.ChunkedArray) -> Floats:
    """A numeric array as float64 numpy values (nulls become NaN)."""
    out: Floats = _values(col, pa.float64(), np.float64)
    return out


def flat_list(table: pa.Table, name: str) -> Floats:
    """Every value of list column ``name`` (e.g. all TBC gaps), nulls and NaNs dropped."""
    col = table.column(name)
    if col.num_chunks == 0 or table.num_rows == 0:
        return np.empty(0)
    flat = pc.list_flatten(col)
    values = floats(flat)
    return values[~np.isnan(values)]


def measured_rows(table: pa.Table) -> pa.Table:
    """The LLM rows of the measured phases: every phase but warmup (metrics and checks ignore
    warmup rows and tool rows: ``kind`` tool)."""
    if table.num_rows == 0:
        return table
    mask = pc.not_equal(table.column("phase"), scalar(WARMUP))
    if "kind" in table.schema.names:  # tool rows are no LLM requests: out of every metric
        kind = table.column("kind")  # (null: a row of a table built without it)
        llm = pc.or_kleene(pc.is_null(kind), pc.not_equal(kind, scalar("tool")))
        mask = pc.and_(mask, llm)
    if pc.all(mask).as_py():  # no warmup: the table itself, not a copy of every column
        return table
    return table.filter(mask)


def status_is(table: pa.Table, status: str) -> NDArray[np.bool_]:
    """Boolean mask of the rows whose ``status`` is ``status``."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=bool)
    mask = pc.fill_null(pc.equal(table.column("status"), scalar(status)), scalar(False))
    return integers(mask) > 0


#: Keys below this many times the rows are looked up in a table indexed by key (no sort): an
#: int32 table of at most 8 bytes a row.
_DIRECT_KEYS_PER_ROW = 2


def first_rows(keys: NDArray[np.int64], edge_keys: NDArray[np.int64]) -> NDArray[np.integer]:
    """For each of ``edge_keys``, the first row whose key it is; ``keys.size`` when none is.

    Session and node ids are small counters, so the keys usually span a few times the rows: a
    table indexed by key answers without sorting (and with less memory than the sort's index
    arrays); other keys (negative, sparse) are sorted and searched.
    """
    n = keys.size
    low = min(keys.min(initial=0), edge_keys.min(initial=0))
    high = max(keys.max(initial=0), edge_keys.max(initial=0))
    if low >= 0 and high < _DIRECT_KEYS_PER_ROW * max(n, 1) and n < np.iinfo(np.int32).max:
        table = np.full(int(high) + 1, n, dtype=np.int32)
        np.minimum.at(table, keys, np.arange(n, dtype=np.int32))
        return table[edge_keys]
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, edge_keys), max(n - 1, 0))
    found = sorted_keys[at] == edge_keys
    del sorted_keys
    return np.where(found, order[at], n)
