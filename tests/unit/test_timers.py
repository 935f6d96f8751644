"""LoopTimers' precise mode (timerfd): order, never early, cancellation, and a descriptor that is
re-armed or disarmed after every wake-up instead of read (it must not stay readable)."""

from __future__ import annotations

import asyncio
import select
import time

import pytest

from veeksha.clock import MonotonicClock
from veeksha.timers import SPIN_ENV, LoopTimers, WakeLead, WakeUps, precise_timers_available

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


# ---------------------------------------------------------------------------- the wake-up lead

_SECOND = 1_000_000_000


def _observe_all(lead: WakeLead, latencies_us: list[int], gap_ns: int = _SECOND) -> None:
    """Wake-ups ``gap_ns`` apart (after the last one seen), ``latencies_us`` late each."""
    now = lead._last_ns
    for latency in latencies_us:
        now += gap_ns
        lead.observe(latency * 1000, now)


def test_the_lead_is_the_99th_percentile_of_the_recent_wake_ups() -> None:
    lead = WakeLead(start_ns=150_000, window=32)
    _observe_all(lead, [100] * 7)
    assert lead.ns == 150_000  # (too few wake-ups seen: the start value)
    _observe_all(lead, [100] * 25 + [400])
    assert lead.ns == 400_000  # one slow wake-up of the last 32: the lead covers it
    _observe_all(lead, [100] * 31)
    assert lead.ns == 400_000
    _observe_all(lead, [100])
    assert lead.ns == 100_000  # it has left the window
    assert lead.wake_ups.count == 65


def test_the_lead_stays_within_its_cap_and_its_share_of_the_time_between_wake_ups() -> None:
    capped = WakeLead(cap_ns=1_000_000)
    _observe_all(capped, [5_000] * 10)
    assert capped.ns == 1_000_000
    # woken every 2 ms: 2 % of that is 40 µs, whatever the wake-ups' latency
    busy = WakeLead(budget=0.02)
    _observe_all(busy, [300] * 10, gap_ns=2_000_000)
    assert busy.ns == 40_000


def test_observe_keeps_the_same_account_as_wake_ups_record() -> None:
    # observe() does WakeUps.record's work inline (it runs at every release): the two must agree
    lead = WakeLead(budget=0.02)
    reference = WakeUps(workers=1)
    now = 0
    latencies = [0, 1, 999, 1_000, 1_001, 1_189, 1_190, 40_000, 40_001, 150_000, 2_500_000]
    for i in range(300):
        latency = latencies[i % len(latencies)] + (i * 7919) % 3 if i % 13 else lead.ns
        now += 1_000_000 + (i * 104_729) % 900_000
        reference.record(latency, lead.ns)
        lead.observe(latency, now)
    assert reference.to_dict() == lead.wake_ups.to_dict()
    assert reference.histogram == lead.wake_ups.histogram
    assert 0 < lead.ns <= 0.02 * 1_900_000


def test_timers_with_a_lead_fire_in_order_and_never_early() -> None:
    async def main() -> tuple[list[tuple[int, int, int]], WakeLead | None]:
        loop = asyncio.get_running_loop()
        timers = LoopTimers(loop, MonotonicClock(), precise=True, lead=True)
        fired: list[tuple[int, int, int]] = []
        done = loop.create_future()
        start = time.monotonic_ns() + 2_000_000
        whens = [start + (i // 2) * 3_000_000 for i in range(24)]  # (two due at each time)

        def call(name: int, when: int) -> None:
            fired.append((name, when, time.monotonic_ns()))
            if len(fired) == len(whens):
                done.set_result(None)

        for name, when in enumerate(whens):
            timers.call_at_ns(when, lambda n=name, w=when: call(n, w))
        await asyncio.wait_for(done, 5)
        lead = timers.lead
        timers.close()
        return fired, lead

    fired, lead = asyncio.run(main())
    assert [name for name, _, _ in fired] == list(range(24))
    assert all(at >= when for _, when, at in fired)  # a busy wait never ends early
    assert lead is not None
    assert lead.wake_ups.count >= 1  # it woke ahead and learnt from it


def test_the_lead_is_off_without_timerfd_or_when_the_environment_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def lead_of(precise: bool) -> WakeLead | None:
        timers = LoopTimers(asyncio.get_running_loop(), MonotonicClock(), precise, lead=True)
        timers.close()
        return timers.lead

    assert asyncio.run(lead_of(True)) is not None
    assert asyncio.run(lead_of(False)) is None
    monkeypatch.setenv(SPIN_ENV, "0")
    assert asyncio.run(lead_of(True)) is None


def _fake_monotonic(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The timers' monotonic clock, faked: it moves 1 µs a reading from 10**12 ns (load cannot
    change it); set ``clock[0]`` to jump it."""
    clock = [10**12]

    def monotonic_ns() -> int:
        clock[0] += 1_000
        return clock[0]

    monkeypatch.setattr("veeksha.timers.time.monotonic_ns", monotonic_ns)
    return clock


def test_a_wake_up_waits_only_for_what_is_due_within_its_own_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The busy loop waits for what is due within the lead of the wake-up it follows, not of
    each callback's end: a train of deadlines closer together than the lead must not keep the
    loop from its I/O. (A fake clock that moves 1 µs a reading: load cannot change it.)"""
    clock = _fake_monotonic(monkeypatch)
    start = clock[0]

    async def main() -> list[int]:
        timers = LoopTimers(asyncio.get_running_loop(), MonotonicClock(), precise=True, lead=True)
        assert timers.lead is not None
        timers.lead.ns = 500_000  # (as if it had seen slow wake-ups: 0.5 ms ahead)
        ran: list[int] = []
        first = start + 1_000_000
        for offset_us in (0, 200, 400, 600, 800):  # a train, 200 µs apart, from 1 ms on
            when = first + offset_us * 1000
            timers.call_at_ns(when, lambda w=when: ran.append((w - first) // 1000))
        clock[0] = first - 50_000  # woken 50 µs before the first: the lead reaches 450 µs
        timers._on_fire()
        timers.close()
        return ran

    ran = asyncio.run(main())
    assert ran == [0, 200, 400]


def test_a_wake_up_releases_what_armed_it_even_when_it_shortens_the_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wake-up's observe() may shorten the lead (its recent wake-ups were quick): what armed
    the timer, due within the lead it was armed with, still leaves in this wake-up, not in a
    second one (each wake-up releases something: at most one per release)."""
    clock = _fake_monotonic(monkeypatch)
    start = clock[0]

    async def main() -> tuple[list[int], int, int]:
        timers = LoopTimers(asyncio.get_running_loop(), MonotonicClock(), precise=True, lead=True)
        lead = timers.lead
        assert lead is not None
        _observe_all(lead, [100] * 8)  # quick wake-ups seen: the lead they call for is 100 µs
        lead.ns = 500_000  # (armed with a longer one, as after a slow wake-up)
        ran: list[int] = []
        due = start + 10_000_000
        timers.call_at_ns(due, lambda: ran.append(1))
        clock[0] = due - 450_000  # woken 50 µs after its armed time, 450 µs before it is due
        timers._on_fire()
        shortened = lead.ns
        armed = timers._armed_ns
        timers.close()
        return ran, shortened, armed

    ran, shortened, armed = asyncio.run(main())
    assert shortened < 450_000  # this wake-up's observe() shortened the lead below the wait
    assert ran == [1]  # yet the release that armed it left in it
    assert armed == 0  # nothing left to arm: no second wake-up for it


def test_wake_ups_are_counted_in_quarter_octaves_summed_and_read_back() -> None:
    worker = WakeUps(workers=1)
    for latency_us, lead_us in ((0.5, 100), (90, 100), (100, 100), (256, 100), (1000, 400)):
        worker.record(round(latency_us * 1000), lead_us * 1000)
    assert worker.count == 5
    assert worker.late == 2  # 256 µs and 1 ms came after the lead armed for them
    assert worker.histogram == {0: 1, 25: 1, 26: 1, 32: 1, 39: 1}  # 4·log2(µs), floored
    assert worker.quantile_us(0.5) == 2 ** (26 / 4)  # (100 µs: its bucket's 97 µs bound)
    other = WakeUps(workers=1)
    other.record(2_000_000, 1_000_000)
    worker.add(other)
    summary = worker.to_dict()
    assert summary["workers"] == 2
    assert summary["count"] == 6
    assert summary["later_than_lead"] == 3
    assert summary["max_us"] == 2000.0
    assert summary["lead_max_us"] == 1000.0
    assert WakeUps.from_dict(summary).to_dict() == summary  # (a shard's, merged by the driver)
    both = WakeUps.summed([summary, None, summary])  # (two shards' and one without)
    assert both is not None
    assert (both["workers"], both["count"], both["max_us"]) == (4, 12, 2000.0)
    assert WakeUps.summed([None, {}]) is None


def test_a_deadline_already_due_behind_one_still_waiting_keeps_the_order() -> None:
    """Under load a release can be handed over after its time while an earlier one, handed over
    in time, still waits for the descriptor's wake-up: the late one ran at once (call_soon),
    before the earlier one (CI saw 1 released before 0 of two due at the same instant)."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        timers = LoopTimers(loop, MonotonicClock(), precise=True)
        fired: list[str] = []
        done = loop.create_future()

        def call(name: str) -> None:
            fired.append(name)
            if len(fired) == 3:
                done.set_result(None)

        first = time.monotonic_ns() + 300_000
        timers.call_at_ns(first, lambda: call("first"))
        while time.monotonic_ns() <= first + 100_000:  # (the loop does not run meanwhile)
            pass
        timers.call_at_ns(first, lambda: call("same time, handed over late"))
        timers.call_at_ns(first + 50_000, lambda: call("later, handed over late"))
        await asyncio.wait_for(done, 5)
        timers.close()
        return fired

    assert asyncio.run(main()) == [
        "first",
        "same time, handed over late",
        "later, handed over late",
    ]
