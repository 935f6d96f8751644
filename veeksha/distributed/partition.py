"""The partition of one experiment across shards (see ``veeksha.schedule.shards``).

The rule lives on the schedule's floor because the engine applies it; this module is its name
in the distributed package: ``ShardSpec``, ``owns``, ``concurrency_share``, ``ShardRamp``.
"""

from __future__ import annotations

from veeksha.schedule.shards import (
    ShardRamp,
    ShardSpec,
    concurrency_share,
    next_owned,
    owned_below,
    owned_index,
    owns,
)

__all__ = [
    "ShardRamp",
    "ShardSpec",
    "concurrency_share",
    "next_owned",
    "owned_below",
    "owned_index",
    "owns",
]
