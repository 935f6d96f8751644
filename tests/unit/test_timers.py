"""LoopTimers' precise mode (timerfd): order, never early, cancellation, and a descriptor that is
re-armed or disarmed after every wake-up instead of read (it must not stay readable)."""

from __future__ import annotations

import asyncio
import select
import time

import pytest

from veeksha.clock import MonotonicClock
from veeksha.timers import LoopTimers, precise_timers_available

pytestmark = pytest.mark.skipif(not precise_timers_available(), reason="timerfd is Linux's")


def test_precise_timers_fire_in_order_never_early_and_leave_the_descriptor_quiet() -> None:
    async def main() -> tuple[list[tuple[int, int, int]], int, list[int]]:
        loop = asyncio.get_running_loop()
        timers = LoopTimers(loop, MonotonicClock(), precise=True)
        fires = 0
        on_fire = timers._on_fire

        def counted() -> None:
            nonlocal fires
            fires += 1
            on_fire()

        loop.remove_reader(timers._fd)
        loop.add_reader(timers._fd, counted)
        fired: list[tuple[int, int, int]] = []
        done = loop.create_future()
        start = time.monotonic_ns()

        def call(name: int, when: int) -> None:
            fired.append((name, when, time.monotonic_ns()))
            if name == 2:  # a timer set from inside a callback, due before the others left
                timers.call_at_ns(when + 500_000, lambda: call(9, when + 500_000))
            if len(fired) == 6:
                loop.call_later(0.01, done.set_result, None)

        for name, ms in ((3, 4), (1, 2), (5, 8), (2, 3), (4, 6)):
            when = start + ms * 1_000_000
            timers.call_at_ns(when, lambda n=name, w=when: call(n, w))
        timers.call_at_ns(start + 5_000_000, lambda: call(0, 0)).cancel()
        await asyncio.wait_for(done, 5)
        readable = select.select([timers._fd], [], [], 0)[0]
        timers.close()
        return fired, fires, readable

    fired, fires, readable = asyncio.run(main())
    names = [name for name, _, _ in fired]
    assert [n for n in names if n != 9] == [1, 2, 3, 4, 5]  # (9: due at 3.5 ms, or at once)
    assert names.index(9) > names.index(2)
    assert all(at >= when for _, when, at in fired)  # never before its time
    assert readable == []  # disarmed after the last one: not readable, never read
    assert fires <= 6  # one wake-up per due time at most: the loop did not spin on it
