"""``veeksha.record.kernels`` calls Arrow's compute kernels by name: each gives what the function
of ``pyarrow.compute`` it stands for gives (which the test imports; veeksha does not)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from veeksha.record import kernels as ak

_STATUS = pa.chunked_array([["ok", "error", None], ["ok", "cancelled"]])
_TIMES = pa.chunked_array([[1, 2, None], [4, 5]], type=pa.int32())
_LISTS = pa.chunked_array([[[1.0, 2.0], None, []], [[3.0], [4.0, 5.0]]])
_TABLE = pa.table({"status": _STATUS, "t": _TIMES})


def test_each_kernel_equals_pyarrow_compute_s_function() -> None:
    ok = pa.scalar("ok")
    mask = pc.equal(_STATUS, ok)
    pairs = [
        (ak.equal(_STATUS, ok), mask),
        (ak.not_equal(_STATUS, ok), pc.not_equal(_STATUS, ok)),
        (ak.invert(mask), pc.invert(mask)),
        (ak.is_null(_STATUS), pc.is_null(_STATUS)),
        (ak.is_valid(_STATUS), pc.is_valid(_STATUS)),
        (ak.and_(mask, mask), pc.and_(mask, mask)),
        (ak.and_kleene(mask, pc.is_valid(_TIMES)), pc.and_kleene(mask, pc.is_valid(_TIMES))),
        (ak.or_kleene(mask, pc.is_null(_TIMES)), pc.or_kleene(mask, pc.is_null(_TIMES))),
        (ak.fill_null(mask, pa.scalar(False)), pc.fill_null(mask, pa.scalar(False))),
        (ak.coalesce(_STATUS, pa.scalar("?")), pc.coalesce(_STATUS, pa.scalar("?"))),
        (ak.if_else(mask, _STATUS, pa.scalar("x")), pc.if_else(mask, _STATUS, pa.scalar("x"))),
        (ak.unique(_STATUS), pc.unique(_STATUS)),
        (ak.value_counts(_STATUS), pc.value_counts(_STATUS)),
        (ak.is_in(_STATUS, pa.array(["ok"])), pc.is_in(_STATUS, value_set=pa.array(["ok"]))),
        (ak.total(_TIMES), pc.sum(_TIMES)),
        (ak.all_true(mask), pc.all(mask)),
        (ak.cast(_TIMES, pa.float64()), pc.cast(_TIMES, pa.float64())),
        (ak.starts_with(_STATUS, "ca"), pc.starts_with(_STATUS, "ca")),
        (ak.list_flatten(_LISTS), pc.list_flatten(_LISTS)),
        (ak.list_parent_indices(_LISTS), pc.list_parent_indices(_LISTS)),
        (ak.list_value_length(_LISTS), pc.list_value_length(_LISTS)),
        (ak.filter_rows(_TABLE, mask), _TABLE.filter(mask)),
        (ak.filter_rows(_TIMES, mask), _TIMES.filter(mask)),
    ]
    for got, expected in pairs:
        assert got.equals(expected), (got, expected)
    assert ak.filter_rows(_TABLE, mask).num_rows == 2
