"""Descriptive statistics and the table helpers every evaluation module shares.

``describe`` is the one aggregate of a sample used across summary.json, the CSVs and the reports:
count, mean, min, max, std (population, ddof 0) and the percentiles of ``PERCENTILES`` with
numpy's linear interpolation (the same rule the SLOs use). Nulls never enter a sample: columns are
read as float64 with NaN for null and the NaNs are dropped.

>>> describe(np.array([1.0, 2.0, 3.0, 4.0]))["p50"]
2.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pyarrow as pa

from veeksha.dispatch.messages import UNREACHED_ERROR_KINDS
from veeksha.record import kernels as ak

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from veeksha.evaluate.source import ColumnSource

__all__ = [
    "CSV_PERCENTILES",
    "MEASURED",
    "PERCENTILES",
    "WARMUP",
    "Floats",
    "column",
    "describe",
    "error_kind_is",
    "first_rows",
    "flat_list",
    "floats",
    "from_numpy",
    "int_column",
    "integers",
    "llm_requests",
    "measured_rows",
    "of_clients",
    "percentile_key",
    "previous_attempts",
    "reached_server",
    "scalar",
    "status_is",
]

Floats: TypeAlias = "NDArray[np.float64]"

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
    quantiles = percentiles(values, PERCENTILES) if not empty else [None] * len(PERCENTILES)
    for q, v in zip(PERCENTILES, quantiles, strict=True):
        stats[percentile_key(q)] = None if v is None else float(v)
    return stats


# np.percentile, np.quantile and np.unique import numpy.ma (~16 ms) on their first call, to
# ask whether their input is a masked array; the evaluation's arrays never are. These give
# the same values without it.


def quantiles(values: NDArray[Any], fractions: Sequence[float] | Floats) -> Floats:
    """``np.quantile(values, fractions)`` (the ``linear`` method), the same floats: the
    virtual index ``(n − 1)·q``, its two neighbouring order statistics (from a partition),
    interpolated as numpy's ``_lerp`` does; NaN if ``values`` holds one."""
    values = np.asarray(values).ravel()
    n = values.size
    if n == 0:
        raise ValueError("quantiles of an empty array")
    virtual = (n - 1) * np.asarray(fractions, dtype=np.float64)
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above], following[above] = -1, -1  # (numpy's _get_indexes: the last value)
    below = virtual < 0
    previous[below], following[below] = 0, 0
    lower, upper = previous.astype(np.intp), following.astype(np.intp)
    ordered = np.partition(values, np.concatenate([lower, upper, [n - 1]]) % n)
    a, b = ordered[lower], ordered[upper]
    gamma = virtual - lower
    diff = np.subtract(b, a)
    out: Floats = np.asarray(np.add(a, diff * gamma))
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe")
    if ordered.dtype.kind == "f" and np.isnan(ordered[-1]):
        out[:] = ordered[-1]
    return out


def percentiles(values: NDArray[Any], qs: Sequence[float]) -> Floats:
    """``np.percentile(values, qs)``: ``quantiles`` at ``q / 100`` as numpy divides."""
    return quantiles(values, np.true_divide(np.asarray(qs, dtype=np.float64), 100))


def percentile(values: NDArray[Any], q: float) -> float:
    """``float(np.percentile(values, q))``."""
    return float(percentiles(values, [q])[0])


def median(values: NDArray[Any]) -> float:
    """``float(np.median(values))``: the middle value, or numpy's mean of the two middle ones;
    NaN if ``values`` is empty or holds a NaN."""
    values = np.asarray(values).ravel()
    n = values.size
    if n == 0:
        return math.nan
    middle = [n // 2 - 1, n // 2] if n % 2 == 0 else [n // 2]
    ordered = np.partition(values, [*middle, n - 1])
    if ordered.dtype.kind == "f" and np.isnan(ordered[-1]):
        return math.nan
    return float(np.mean(ordered[middle]))


def distinct(values: NDArray[Any]) -> NDArray[Any]:
    """``np.unique(values)``: the sorted distinct values (NaNs as one)."""
    ordered = np.sort(np.asarray(values).ravel())
    if ordered.size == 0:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    if ordered.dtype.kind in "fc" and np.isnan(ordered[-1]):
        keep[int(np.searchsorted(ordered, ordered[-1])) + 1 :] = False  # (NaN sorts last)
    out: NDArray[Any] = ordered[keep]
    return out


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
        col = chunk if chunk.type == type_ else ak.cast(chunk, type_)
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
    flat = ak.list_flatten(col)
    values = floats(flat)
    return values[~np.isnan(values)]


def measured_rows(table: pa.Table) -> pa.Table:
    """The LLM rows of the measured phases: every phase but warmup (metrics and checks ignore
    warmup rows and tool rows: ``kind`` tool)."""
    if table.num_rows == 0:
        return table
    mask = ak.not_equal(table.column("phase"), scalar(WARMUP))
    if "kind" in table.schema.names:  # tool rows are no LLM requests: out of every metric
        mask = ak.and_(mask, _llm_mask(table))
    if ak.all_true(mask).as_py():  # no warmup: the table itself, not a copy of every column
        return table
    return rows_where(table, mask)


def rows_where(table: pa.Table | ColumnSource, mask: Any) -> pa.Table | ColumnSource:
    """``table.filter(mask)`` of a table (Arrow's kernel, without importing ``pyarrow.compute``)
    or of a ``ColumnSource`` (its own filter)."""
    if isinstance(table, pa.Table):
        return ak.filter_rows(table, mask)
    return table.filter(mask)


def _llm_mask(table: pa.Table | ColumnSource) -> Any:
    kind = table.column("kind")  # (null: a row of a table built without it)
    return ak.or_kleene(ak.is_null(kind), ak.not_equal(kind, scalar("tool")))


def llm_requests(table: pa.Table | ColumnSource) -> NDArray[np.bool_]:
    """Boolean mask of the rows that are requests to the server: all but ``kind`` tool (a tool
    call's latency, which reaches no server)."""
    if table.num_rows == 0 or "kind" not in table.schema.names:
        return np.ones(table.num_rows, dtype=bool)
    return integers(_llm_mask(table)) > 0


def reached_server(
    table: pa.Table | ColumnSource, clients: Sequence[str] | None = None
) -> NDArray[np.bool_]:
    """Boolean mask of the rows whose request may have reached the server: requests to it
    (``llm_requests``), sent (``sent_at`` set: one cancelled before has none), and not failed
    for want of a connection (``UNREACHED_ERROR_KINDS``: ``connection_refused``). ``clients``:
    only the rows of these clients (the server serves them, the others go elsewhere:
    ``server_view.scraped_clients``); None, every row."""
    mask = llm_requests(table) & ~np.isnan(column(table, "sent_at"))
    if clients is not None:
        mask &= of_clients(table, clients)
    if table.num_rows and "error_kind" in table.schema.names:
        kinds = table.column("error_kind")
        for kind in UNREACHED_ERROR_KINDS:
            mask &= integers(ak.fill_null(ak.equal(kinds, scalar(kind)), scalar(False))) == 0
    return mask


def of_clients(table: pa.Table | ColumnSource, clients: Sequence[str]) -> NDArray[np.bool_]:
    """Boolean mask of the rows whose ``client`` is one of ``clients`` (a null client, a tool
    call's, is none of them)."""
    if table.num_rows == 0 or "client" not in table.schema.names:
        return np.zeros(table.num_rows, dtype=bool)
    found = ak.is_in(table.column("client"), pa.array(list(clients), type=pa.string()))
    return integers(ak.fill_null(found, scalar(False))) > 0


def previous_attempts(
    table: pa.Table | ColumnSource, keys: NDArray[np.int64]
) -> tuple[NDArray[np.intp], NDArray[np.intp]] | None:
    """(earlier, later): the rows of each re-prompt (``later``, ``attempt`` > 0, docs/agents.md)
    and of the attempt just before it (``earlier``) of the same node (``keys``: one key per
    node, e.g. session and node id); None when no row is a re-prompt (every node one row: the
    common case, at no cost beyond a read). ``earlier`` holds every row but each node's last
    attempt, ``later`` every row but its first."""
    if "attempt" not in table.schema.names:
        return None
    attempt = int_column(table, "attempt")
    if not attempt.any():
        return None
    order = np.lexsort((attempt, keys))  # by node, then attempt
    same = keys[order[1:]] == keys[order[:-1]]
    return order[:-1][same], order[1:][same]


def error_kind_is(table: pa.Table | ColumnSource, kind: str) -> NDArray[np.bool_]:
    """Boolean mask of the rows whose ``error_kind`` is ``kind`` (none without the column)."""
    if table.num_rows == 0 or "error_kind" not in table.schema.names:
        return np.zeros(table.num_rows, dtype=bool)
    mask = ak.fill_null(ak.equal(table.column("error_kind"), scalar(kind)), scalar(False))
    return integers(mask) > 0


def status_is(table: pa.Table | ColumnSource, status: str) -> NDArray[np.bool_]:
    """Boolean mask of the rows whose ``status`` is ``status``."""
    if table.num_rows == 0:
        return np.zeros(0, dtype=bool)
    mask = ak.fill_null(ak.equal(table.column("status"), scalar(status)), scalar(False))
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
