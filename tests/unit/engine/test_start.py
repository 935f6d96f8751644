"""t0 on both clocks: the (monotonic, wall) pair and the agreed t0 of a shard."""

from __future__ import annotations

import asyncio
import time

from tests.unit.engine.lines_log import Log
from veeksha.engine.start import (
    agreed_t0,
    clock_pair,
    monotonic_at_wall,
    t0_lead_ns,
    wall_at_monotonic,
)


def test_the_pair_maps_each_clock_onto_the_other_exactly() -> None:
    pair = clock_pair(tries=3)
    mid, wall, half = pair
    assert half >= 0
    for t in (mid, mid + 123_456_789, mid - 5):
        assert monotonic_at_wall(wall_at_monotonic(t, pair), pair) == t
    assert wall_at_monotonic(mid, pair) == wall


def test_a_past_agreed_t0_is_kept_and_said_late() -> None:
    log = Log()
    agreed = time.time_ns() - 2_000_000_000
    t0_ns, t0_wall = asyncio.run(agreed_t0(lambda: agreed, 50_000_000, log))
    assert t0_wall == agreed
    assert t0_ns < time.monotonic_ns()
    assert any("late" in line for line in log.lines)


def test_without_an_agreed_t0_it_lies_the_lead_ahead() -> None:
    before = time.monotonic_ns()
    t0_ns, t0_wall = asyncio.run(agreed_t0(None, 50_000_000, Log()))
    assert t0_ns >= before + 50_000_000
    assert t0_wall > 1_600_000_000 * 1_000_000_000  # a wall time (ns since the epoch)


def test_the_lead_is_the_set_up_after_t0_then_the_hand_over_ahead_at_most_50_ms() -> None:
    ms = 1_000_000
    # the default dispatch_ahead_ms (20): the first arrival is handed over 20 ms ahead of its
    # time, as every later one, once the ~3 ms of set-up after t0's choice are done
    assert t0_lead_ns(20 * ms) == 30 * ms
    assert t0_lead_ns(0) == 10 * ms  # (handed over when ready: only the set-up)
    assert t0_lead_ns(200 * ms) == 50 * ms  # (a long hand-over lead never delays t0 more)
    assert t0_lead_ns(-1) == 10 * ms
