"""Arrow ↔ numpy without pandas: pyarrow imports pandas (~0.3-0.5 CPU-s, tens of MB) on its
first ``to_numpy`` or ``pa.array`` of Python values, which a run's main process never pays."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["from_bools", "from_numpy", "mask", "numbers"]

_TYPES: dict[Any, pa.DataType] = {
    np.dtype(np.int64): pa.int64(),
    np.dtype(np.int32): pa.int32(),
    np.dtype(np.float64): pa.float64(),
}


def numbers(array: pa.Array | pa.ChunkedArray, dtype: Any, null: float = 0) -> NDArray[Any]:
    """A numeric column as a new numpy array of ``dtype`` (nulls become ``null``)."""
    if isinstance(array, pa.ChunkedArray):
        parts = [numbers(chunk, dtype, null) for chunk in array.chunks]
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
    target = _TYPES[np.dtype(dtype)]
    col = array if array.type == target else array.cast(target)
    n, offset = len(col), col.offset
    validity, data = col.buffers()[:2]
    if n == 0 or data is None:
        return np.full(n, null, dtype=dtype)
    out: NDArray[Any] = np.frombuffer(data, dtype=dtype, count=offset + n)[offset:].copy()
    if col.null_count and validity is not None:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        out[~bits[offset : offset + n].astype(bool)] = null
    return out


def mask(array: pa.Array | pa.ChunkedArray) -> NDArray[np.bool_]:
    """A boolean column as numpy booleans (null is false)."""
    if isinstance(array, pa.ChunkedArray):
        parts = [mask(chunk) for chunk in array.chunks]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.bool_)
    n, offset = len(array), array.offset
    validity, data = array.buffers()[:2]
    if n == 0 or data is None:
        return np.zeros(n, dtype=np.bool_)
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    out: NDArray[np.bool_] = bits[offset : offset + n].astype(np.bool_)
    if array.null_count and validity is not None:
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
        out &= valid[offset : offset + n].astype(np.bool_)
    return out


def from_numpy(values: NDArray[Any]) -> pa.Array:
    """A numpy int64/int32/float64 array as an Arrow array without nulls (no copy)."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(_TYPES[values.dtype], len(values), [None, pa.py_buffer(values)])


def from_bools(values: NDArray[np.bool_]) -> pa.Array:
    """A numpy boolean array as an Arrow boolean array without nulls."""
    bits = np.packbits(values, bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
