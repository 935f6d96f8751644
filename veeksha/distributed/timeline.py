"""A shard's times onto the driver's timeline (the arithmetic: ``veeksha.distributed.merge``).

t' = t + shift_k,    shift_k = ((T_k − offset_k) − D) / 1e9
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from veeksha.distributed.results import ShardResult
from veeksha.record.columns import column_unit

__all__ = ["move_phases", "move_table", "shard_offset_ns", "shard_shift_ns"]

_T0 = "s since t0"


def shard_offset_ns(shard: ShardResult) -> int:
    """The offset used: the mean of the estimates before and after the run, else the one
    known, else 0."""
    known = [e.offset_ns for e in (shard.offset_before, shard.offset_after) if e is not None]
    return sum(known) // len(known) if known else 0


def shard_shift_ns(shard_t0_wall_ns: int, offset_ns: int, driver_t0_wall_ns: int) -> int:
    """How far a shard's times move onto the driver's timeline (see the module docstring)."""
    return (shard_t0_wall_ns - offset_ns) - driver_t0_wall_ns


def move_table(table: pa.Table, schema: pa.Schema, shift_s: float) -> pa.Table:
    """Every ``s since t0`` column of ``table`` plus ``shift_s`` (lists element-wise)."""
    if shift_s == 0.0:
        return table
    for index, name in enumerate(table.column_names):
        if column_unit(schema, name) != _T0:
            continue
        column = table.column(index)
        if pa.types.is_list(column.type):
            chunks = []
            for chunk in column.chunks:
                values = pc.add(chunk.values, shift_s)
                chunks.append(pa.ListArray.from_arrays(chunk.offsets, values, mask=chunk.is_null()))
            shifted: pa.ChunkedArray | pa.Array = pa.chunked_array(chunks, type=column.type)
        else:
            shifted = pc.add(column, shift_s)
        table = table.set_column(index, schema.field(name), shifted)
    return table


def move_phases(runs: list[dict[str, Any]], shifts: Sequence[float]) -> list[Any] | None:
    """The first finished shard's phase windows on the driver's timeline (a drain's end may
    differ between shards: each waits for its own sessions)."""
    for index, run in enumerate(runs):
        windows = run.get("phases")
        if not windows:
            continue
        moved = []
        for window in windows:
            copy = dict(window)
            for key in ("start", "end", "arrivals_end"):
                if isinstance(copy.get(key), int | float):
                    copy[key] += shifts[index]
            moved.append(copy)
        return moved
    return None
