"""The pre-departure pool: per-client caps, never blocking another client, priority keys."""

from __future__ import annotations

from veeksha.generate.spec import NodeSpec
from veeksha.schedule.slots import SlotPool, node_rounds, progress_key


def test_a_capped_client_waits_and_the_freed_slot_goes_to_the_smallest_key() -> None:
    pool: SlotPool[str] = SlotPool([1])
    assert pool.offer(0, (5,), "a")
    assert not pool.offer(0, (3,), "b")
    assert not pool.offer(0, (4,), "c")
    assert pool.take() == []  # the slot is still taken
    pool.release(0)
    assert pool.take() == [(0, "b")]
    pool.release(0)
    assert pool.take() == [(0, "c")]
    assert pool.peak == [1]


def test_a_full_client_never_blocks_another() -> None:
    pool: SlotPool[str] = SlotPool([1, 2])
    assert pool.offer(0, (0,), "a0")
    assert not pool.offer(0, (1,), "a1")
    assert pool.offer(1, (2,), "b0")
    assert pool.offer(1, (3,), "b1")
    assert not pool.offer(1, (4,), "b2")
    pool.release(1)
    assert pool.take() == [(1, "b2")]  # client 0's waiting item stays behind its own cap
    assert pool.waiting(0) == 1


def test_equal_keys_leave_in_arrival_order_and_stale_items_take_no_slot() -> None:
    pool: SlotPool[str] = SlotPool([1])
    pool.offer(0, (0,), "x")
    for name in ("b", "dead", "c"):
        pool.offer(0, (1,), name)
    pool.release(0)
    assert pool.take(lambda item: item != "b") == [(0, "dead")]
    pool.release(0)
    assert pool.take(lambda item: item != "b") == [(0, "c")]


def test_rounds_are_the_graphs_or_the_depth() -> None:
    def node(i: int, parents: tuple[int, ...], round_: int = -1) -> NodeSpec:
        return NodeSpec(i, parents, None, 0.0, "p", 1, 1, round=round_)

    assert node_rounds([node(0, ()), node(1, (0,)), node(2, (0,)), node(3, (1, 2))]) == [
        0,
        1,
        1,
        2,
    ]
    assert node_rounds([node(0, (), 0), node(1, (), 0), node(2, (0, 1), 1)]) == [0, 0, 1]


def test_progress_orders_reprompts_then_further_then_older_sessions_then_lower_rounds() -> None:
    rounds = [0, 0, 1, 1, 2]
    fresh = progress_key(rounds, [False] * 5, 0, started_at_ns=5, reprompt=False)
    further = progress_key(rounds, [True, True, False, False, False], 2, 9, False)
    older = progress_key(rounds, [True, True, False, False, False], 2, 1, False)
    reprompt = progress_key(rounds, [False] * 5, 0, 9, reprompt=True)
    assert sorted([fresh, further, older, reprompt]) == [reprompt, older, further, fresh]
    lower = progress_key([0, 1, 1, 2], [True, False, False, False], 1, 1, False)
    higher = progress_key([0, 1, 1, 2], [True, False, False, False], 3, 1, False)
    assert lower < higher
