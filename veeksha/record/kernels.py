"""Arrow's compute kernels called by name, without importing ``pyarrow.compute``.

``pyarrow.compute`` wraps each of Arrow's ~290 compute functions in a Python function with a
generated signature and docstring when it is imported: 70-100 ms of CPU, more than the
evaluation of a short run takes, to call a dozen kernels. The kernels themselves live in
``pyarrow._compute`` (~9 ms to import): ``call_function`` runs the same kernel with the same
options, so every result is the one ``pyarrow.compute`` gives. Arrow's own methods that call
compute functions (``Table.filter``, ``Array.cast``, ``.unique()``, ``.is_valid()``, ...)
import ``pyarrow.compute`` on their first call: the evaluation and the record readers call
these functions instead (tests/integration/engine/test_startup_imports.py checks a run).
"""

from __future__ import annotations

from typing import Any, TypeVar

import pyarrow as pa
from pyarrow._compute import CastOptions, FilterOptions, SetLookupOptions, call_function

__all__ = [
    "all_true",
    "and_",
    "and_kleene",
    "call",
    "cast",
    "coalesce",
    "equal",
    "fill_null",
    "filter_rows",
    "if_else",
    "invert",
    "is_in",
    "is_null",
    "is_valid",
    "list_flatten",
    "list_parent_indices",
    "list_value_length",
    "not_equal",
    "or_kleene",
    "total",
    "unique",
    "value_counts",
]

#: An Arrow table, record batch, array or chunked array.
Data = TypeVar("Data", pa.Table, pa.RecordBatch, pa.Array, pa.ChunkedArray)


def call(name: str, *args: Any, options: Any = None) -> Any:
    """The compute function ``name`` of ``args`` (``pyarrow.compute.call_function``)."""
    return call_function(name, list(args), options)


def filter_rows(data: Data, mask: Any) -> Data:
    """``data.filter(mask)``: the rows where ``mask`` is true (null: dropped)."""
    result: Data = call_function("filter", [data, mask], FilterOptions("drop"))
    return result


def cast(data: Data, type_: pa.DataType) -> Data:
    """``pyarrow.compute.cast(data, type_)`` (a safe cast: overflow and truncation raise)."""
    result: Data = call_function("cast", [data], CastOptions.safe(type_))
    return result


def equal(left: Any, right: Any) -> Any:
    return call_function("equal", [left, right])


def not_equal(left: Any, right: Any) -> Any:
    return call_function("not_equal", [left, right])


def invert(values: Any) -> Any:
    return call_function("invert", [values])


def and_(left: Any, right: Any) -> Any:
    return call_function("and", [left, right])


def and_kleene(left: Any, right: Any) -> Any:
    return call_function("and_kleene", [left, right])


def or_kleene(left: Any, right: Any) -> Any:
    return call_function("or_kleene", [left, right])


def is_null(values: Any) -> Any:
    return call_function("is_null", [values])


def is_valid(values: Any) -> Any:
    return call_function("is_valid", [values])


def coalesce(*values: Any) -> Any:
    return call_function("coalesce", list(values))


def fill_null(values: Any, fill: pa.Scalar) -> Any:
    """``pyarrow.compute.fill_null(values, fill)``: ``fill`` cast to the values' type first."""
    if fill.type != values.type:
        fill = pa.scalar(fill.as_py(), type=values.type)
    return call_function("coalesce", [values, fill])


def unique(values: Any) -> Any:
    return call_function("unique", [values])


def is_in(values: Any, value_set: pa.Array) -> Any:
    return call_function("is_in", [values], SetLookupOptions(value_set))


def value_counts(values: Any) -> Any:
    return call_function("value_counts", [values])


def total(values: Any) -> Any:
    """``pyarrow.compute.sum(values)`` (nulls skipped; null when there is no value)."""
    return call_function("sum", [values])


def list_flatten(values: Any) -> Any:
    return call_function("list_flatten", [values])


def list_parent_indices(values: Any) -> Any:
    return call_function("list_parent_indices", [values])


def list_value_length(values: Any) -> Any:
    return call_function("list_value_length", [values])


def all_true(values: Any) -> Any:
    """``pyarrow.compute.all(values)`` (nulls skipped)."""
    return call_function("all", [values])


def if_else(condition: Any, left: Any, right: Any) -> Any:
    return call_function("if_else", [condition, left, right])


def starts_with(values: Any, prefix: str) -> Any:
    """``pyarrow.compute.starts_with(values, prefix)``."""
    from pyarrow._compute import MatchSubstringOptions

    return call_function("starts_with", [values], MatchSubstringOptions(prefix))
