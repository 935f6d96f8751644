"""The partition of sessions across shards (veeksha.schedule.shards via distributed.partition)."""

from __future__ import annotations

import pytest

from veeksha.distributed.partition import (
    ShardRamp,
    ShardSpec,
    concurrency_share,
    next_owned,
    owned_index,
    owns,
)
from veeksha.schedule.arrivals import ConcurrencyRamp

S = 1_000_000_000


@pytest.mark.parametrize(("index", "count"), [(-1, 2), (2, 2), (0, 0)])
def test_a_shard_spec_is_validated(index: int, count: int) -> None:
    with pytest.raises(ValueError, match="shard"):
        ShardSpec(index, count)


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_every_session_has_exactly_one_owner_and_counts_differ_by_at_most_one(count: int) -> None:
    specs = [ShardSpec(k, count) for k in range(count)]
    for n in range(0, 50):
        owners = [[s for s in specs if owns(s, i)] for i in range(n)]
        assert all(len(o) == 1 for o in owners)
        counts = [sum(owns(s, i) for i in range(n)) for s in specs]
        assert max(counts) - min(counts) <= 1
        assert counts == [concurrency_share(n, s) for s in specs]
    assert [owns(ShardSpec(1, 3), i) for i in range(6)] == [False, True, False] * 2


def test_owned_indexes() -> None:
    spec = ShardSpec(2, 3)
    assert [owned_index(spec, m) for m in range(3)] == [2, 5, 8]
    assert [next_owned(spec, i) for i in range(6)] == [2, 2, 2, 5, 5, 5]


@pytest.mark.parametrize(
    ("target", "rampup", "start", "from_target", "count"),
    [
        (5, 10.0, 0, 0, 2),
        (7, 3.5, 0, 0, 3),
        (9, 4.0, 2 * S, 4, 4),
        (3, 0.0, 0, 0, 5),
        (2, 1.0, 0, 5, 3),
    ],
)
def test_shard_ramps_sum_to_the_single_host_ramp_at_every_instant(
    target: int, rampup: float, start: int, from_target: int, count: int
) -> None:
    ramp = ConcurrencyRamp(target, rampup, start, from_target)
    shards = [ShardRamp(ramp, ShardSpec(k, count)) for k in range(count)]
    assert sum(s.target for s in shards) == target
    for t in range(0, 16 * S, S // 8):
        assert sum(s.allowed(t) for s in shards) == ramp.allowed(t)
    # every slot opens at its single-host time, in the owner's order
    opened = sorted(s.slot_open_ns(m) for s in shards for m in range(1, s.target + 1))
    assert opened == [ramp.slot_open_ns(k) for k in range(1, target + 1)]
    for s in shards:
        t = 0
        while (nxt := s.next_increase_ns(t)) is not None:
            assert nxt > t or nxt == start
            assert s.allowed(nxt) > s.allowed(nxt - 1) or nxt <= start
            t = max(nxt, t + 1)


def test_worked_example_of_the_docstring() -> None:
    ramp = ConcurrencyRamp(5, 10.0)
    zero, one = ShardRamp(ramp, ShardSpec(0, 2)), ShardRamp(ramp, ShardSpec(1, 2))
    assert [zero.slot_open_ns(m) for m in (1, 2, 3)] == [2 * S, 6 * S, 10 * S]
    assert [one.slot_open_ns(m) for m in (1, 2)] == [4 * S, 8 * S]
    assert (zero.allowed(7 * S), one.allowed(7 * S)) == (2, 1)
