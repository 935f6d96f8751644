"""The phase timeline and the open-loop arrivals across phases (pure: times in, no clock)."""

from __future__ import annotations

import numpy as np

from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhaseBounds, PhasedArrivals, PhaseTimeline

S = 1_000_000_000


def fixed(seconds: float):  # type: ignore[no-untyped-def]
    return lambda n: np.full(n, seconds)


def exponential(rate: float, seed: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return lambda n: rng.exponential(1 / rate, n)


def drain_all(arrivals: PhasedArrivals, limit: int = 10_000) -> list[tuple[int, int]]:
    out = []
    while len(out) < limit and arrivals.peek_ns() is not None:
        out.append(arrivals.pop())
    return out


def test_fixed_rates_step_at_duration_boundaries_without_a_gap() -> None:
    phases = [PhaseBounds("a", 1 * S), PhaseBounds("b", 1 * S)]
    timeline = PhaseTimeline(phases, 0)
    means = [0.25, 0.125]
    arrivals = PhasedArrivals(timeline, lambda i: fixed(means[i]), means, ["4/s", "8/s"])
    got = drain_all(arrivals)
    assert [t for t, p in got if p == 0] == [0, S // 4, S // 2, 3 * S // 4]
    assert [t for t, p in got if p == 1] == [S + k * S // 8 for k in range(8)]
    assert timeline.starts == [0, S]
    assert timeline.finished


def test_a_crossing_gap_is_rescaled_beyond_the_boundary() -> None:
    # 1 s gaps, the boundary at 2.5 s: the gap from 2 s to 3 s has 0.5 s beyond it,
    # which at a 4 times higher rate is 0.125 s
    phases = [PhaseBounds("slow", int(2.5 * S)), PhaseBounds("fast", 1 * S)]
    timeline = PhaseTimeline(phases, 0)
    means = [1.0, 0.25]
    arrivals = PhasedArrivals(timeline, lambda i: fixed(means[i]), means, [1, 2])
    times = [t for t, _ in drain_all(arrivals)]
    assert times == [0, S, 2 * S, int(2.625 * S), int(2.875 * S), int(3.125 * S), int(3.375 * S)]


def test_a_gap_crossing_several_boundaries_is_rescaled_at_each() -> None:
    """A slow phase (one arrival per 1000 s) between two fast ones: the gap from its only
    arrival crosses the slow phase's end and the fast phase's. Advanced to the gap's end at
    once, the timeline ended both phases there: the fast phase had no arrival and the run
    finished at 1 s instead of 5 s."""
    phases = [PhaseBounds("warmup", 1 * S), PhaseBounds("slow", 2 * S), PhaseBounds("fast", 2 * S)]
    timeline = PhaseTimeline(phases, 0)
    means = [0.5, 1000.0, 0.5]
    arrivals = PhasedArrivals(timeline, lambda i: fixed(means[i]), means, ["a", "b", "a"])
    got = drain_all(arrivals)
    # the warmup's gap from 0.5 s crosses 1 s: 0 s beyond (at 0.5 s gaps: 1.0 s), rescaled to
    # the slow phase, 0; its 1000 s gap crosses 3 s with 998 s beyond, rescaled to 0.499 s
    assert got[:3] == [(0, 0), (S // 2, 0), (S, 1)]
    fast = [t for t, p in got if p == 2]
    assert fast[0] == 3 * S + 499_000_000
    assert fast == [3 * S + 499_000_000 + k * S // 2 for k in range(4)]
    assert timeline.starts == [0, S, 3 * S]
    assert timeline.finished


def test_a_gap_into_a_phase_of_a_tiny_rate_waits_at_most_max_seconds() -> None:
    """0.5 s gaps, then a phase of 1e-300/s: the crossing gap's part beyond the boundary,
    rescaled by 1e300 / 0.5, was infinite and its rounding raised in a timer (the run hung)."""
    phases = [PhaseBounds("a", S), PhaseBounds("slow", 2 * S), PhaseBounds("fast", 2 * S)]
    timeline = PhaseTimeline(phases, 0)
    means = [0.4, 1e300, 0.5]
    arrivals = PhasedArrivals(timeline, lambda i: fixed(min(means[i], 1e9)), means, [1, 2, 3])
    got = drain_all(arrivals)
    assert [p for _, p in got][:3] == [0, 0, 0]
    assert [t for t, p in got if p == 2] == [3 * S + k * S // 2 for k in range(4)]


def test_poisson_rates_per_phase_and_determinism() -> None:
    def run() -> list[tuple[int, int]]:
        phases = [PhaseBounds("a", 200 * S), PhaseBounds("b", 200 * S), PhaseBounds("c", 200 * S)]
        rates = [4.0, 8.0, 16.0]
        timeline = PhaseTimeline(phases, 0)
        arrivals = PhasedArrivals(
            timeline, lambda i: exponential(rates[i], i), [1 / r for r in rates], rates
        )
        return drain_all(arrivals)

    got = run()
    assert got == run()  # same seeds, same schedule
    for phase, rate in enumerate((4.0, 8.0, 16.0)):
        times = np.array([t for t, p in got if p == phase]) / S
        assert times.min() >= phase * 200
        assert times.max() < (phase + 1) * 200
        observed = (times.size - 1) / (times.max() - times.min())
        assert abs(observed - rate) / rate < 0.05
    gaps = np.diff(np.array([t for t, _ in got]) / S)
    assert gaps.max() < 10 / 4  # no gap at the boundaries (a 10-mean-gap gap: p ~ e^-10)


def test_equal_schedulers_share_one_process() -> None:
    # a warmup that changes nothing leaves the schedule of a run without phases
    phases = [PhaseBounds("warmup", None, 3), PhaseBounds("measured")]
    gaps = exponential(5.0, 7)
    timeline = PhaseTimeline(phases, 0)
    arrivals = PhasedArrivals(timeline, lambda i: gaps, [0.2, 0.2], ["same", "same"])
    got = [arrivals.pop() for _ in range(6) if arrivals.peek_ns() is not None]
    ref = np.concatenate([[0], np.cumsum(exponential(5.0, 7)(1024))])[:6]
    assert [t for t, _ in got] == list(np.rint(ref * S).astype(np.int64))
    assert [p for _, p in got] == [0, 0, 0, 1, 1, 1]
    assert timeline.starts[1] == got[2][0] + 1  # just after the warmup's last session


def test_count_bound_ends_just_after_the_last_session_and_requests_follow_it() -> None:
    timeline = PhaseTimeline([PhaseBounds("a", None, 2), PhaseBounds("b", 5 * S)], 0)
    assert timeline.end_unknown
    assert timeline.start_session(0) == 0
    assert timeline.start_session(S) == 0
    assert not timeline.end_unknown
    assert timeline.phase_at(S) == 0  # the last session's first request is still a's
    assert timeline.phase_at(S + 1) == 1  # known ahead: b follows
    assert timeline.start_session(2 * S) == 1
    assert timeline.starts == [0, S + 1]
    assert timeline.phase_at(S // 2) == 0  # a time of a past phase
    timeline.advance_to(10 * S)
    assert timeline.finished
    assert timeline.phase_at(20 * S) == 1  # the last phase's sessions go on in it


def test_drain_stops_arrivals_until_resumed() -> None:
    phases = [PhaseBounds("a", 1 * S, drain=True), PhaseBounds("b", 1 * S)]
    timeline = PhaseTimeline(phases, 0)
    arrivals = PhasedArrivals(timeline, lambda i: fixed(0.5), [0.5, 0.5], ["x", "x"])
    first = drain_all(arrivals)
    assert [t for t, _ in first] == [0, S // 2]
    assert timeline.drain_pending
    assert arrivals.peek_ns() is None
    assert timeline.phase_at(3 * S) == 0  # the drain belongs to the drained phase
    arrivals.resume(int(3.2 * S))  # every session ended at 3.2 s
    rest = drain_all(arrivals)
    assert [t for t, _ in rest] == [int(3.2 * S), int(3.7 * S)]
    assert {p for _, p in rest} == {1}
    (drain,) = timeline.drains
    assert (drain.phase, drain.ended_ns, drain.resumed_ns) == (0, S, int(3.2 * S))


def test_concurrency_ramp_between_phase_targets() -> None:
    # from 2 to 6 sessions over 4 s, starting 10 s into the run
    ramp = ConcurrencyRamp(6, 4.0, start_ns=10 * S, from_target=2)
    assert ramp.allowed(10 * S) == 2
    assert ramp.allowed(11 * S) == 3
    assert ramp.allowed(14 * S) == 6
    assert [ramp.slot_open_ns(k) for k in (2, 3, 6)] == [10 * S, 11 * S, 14 * S]
    lower = ConcurrencyRamp(2, 4.0, start_ns=10 * S, from_target=6)
    assert lower.allowed(10 * S) == 2  # a lower target holds at once


def test_a_gap_crossing_several_phases_is_rescaled_at_each_boundary() -> None:
    # 1 s gaps for 0.5 s, then 4/s for 0.5 s, then 8/s for 1 s: the gap from 0 to 1 s has
    # 0.5 s beyond the first boundary, 0.125 s at 4/s: 0.625 s, in the second phase (which
    # a rescaling at the last boundary crossed would skip: its first arrival then at 1 s)
    phases = [PhaseBounds("slow", S // 2), PhaseBounds("fast", S // 2), PhaseBounds("faster", S)]
    timeline = PhaseTimeline(phases, 0)
    means = [1.0, 0.25, 0.125]
    arrivals = PhasedArrivals(timeline, lambda i: fixed(means[i]), means, [1, 2, 3])
    got = drain_all(arrivals)
    assert [t for t, p in got if p == 0] == [0]
    assert [t for t, p in got if p == 1] == [int(0.625 * S), int(0.875 * S)]
    # the gap from 0.875 s has 0.125 s beyond 1 s: 0.0625 s at 8/s
    assert [t for t, p in got if p == 2] == [int((1.0625 + k / 8) * S) for k in range(8)]
    assert timeline.starts == [0, S // 2, S]


def test_a_gap_longer_than_the_phases_after_it_does_not_end_the_run() -> None:
    # the scenarios/phases.yaml shape, shrunk: a 4/s warmup of 0.1 s, then 0.15 s at 40, 80
    # and 160/s: the warmup's next gap (0.25 s) reaches past them all, yet each has its share
    phases = [PhaseBounds("warmup", S // 10)] + [PhaseBounds(n, S * 15 // 100) for n in "abc"]
    timeline = PhaseTimeline(phases, 0)
    means = [0.25, 1 / 40, 1 / 80, 1 / 160]
    arrivals = PhasedArrivals(timeline, lambda i: fixed(means[i]), means, [4, 40, 80, 160])
    got = drain_all(arrivals)
    counts = [sum(1 for _, p in got if p == phase) for phase in range(4)]
    assert counts == [1, 6, 12, 24]
    assert timeline.finished
