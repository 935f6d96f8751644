"""The traffic loop across phases on a fake clock: a request's phase, closed-loop targets per
phase, drains."""

from __future__ import annotations

from tests.unit.engine.test_loop import Harness, chain, fixed_gaps
from veeksha.engine.loop import LoopSettings
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhaseBounds

S = 1_000_000_000


def test_a_later_request_belongs_to_the_phase_it_is_released_in() -> None:
    settings = LoopSettings(
        cancel_on_failure=True,
        max_sessions=-1,
        rate_gaps=fixed_gaps(10.0),
        phases=[PhaseBounds("a", 2 * S), PhaseBounds("b", 2 * S)],
        dispatch_ahead_ns=S // 50,
    )
    h = Harness(settings, lambda i: chain(i, 2, wait_s=1.5))
    h.start()
    h.timers.advance(S // 2)
    h.complete(h.items[0], S // 2)  # its second turn is ready at 2.0 s: b's first instant
    h.timers.advance(3 * S)
    phases = [(req.session.phase, req.node_id, req.phase) for req, _ in h.rec.dispatched]
    assert phases == [("a", 0, "a"), ("a", 1, "b")]


def test_concurrency_target_changes_at_the_boundary_and_the_run_ends_with_the_last() -> None:
    settings = LoopSettings(
        cancel_on_failure=True,
        max_sessions=-1,
        concurrency=ConcurrencyRamp(1, 0.0),
        phases=[PhaseBounds("one", 1 * S), PhaseBounds("three", 1 * S)],
        phase_targets=[(1, 0.0), (3, 0.0)],
    )
    h = Harness(settings, lambda i: chain(i, 1))
    h.start()
    assert len(h.loop.sessions) == 1
    h.timers.advance(S)
    assert len(h.loop.sessions) == 3  # the two new slots open at the boundary
    assert [s.phase for s in h.loop.sessions.values()] == ["one", "three", "three"]
    h.timers.advance(2 * S)
    assert h.loop.timeline.finished
    for item in list(h.items):
        h.complete(item, h.clock.now)
    assert h.loop.finished
    assert len(h.items) == 3  # nothing starts after the last phase


def test_drain_waits_for_every_session_and_records_its_length() -> None:
    settings = LoopSettings(
        cancel_on_failure=True,
        max_sessions=-1,
        concurrency=ConcurrencyRamp(2, 0.0),
        phases=[PhaseBounds("a", None, 2, drain=True), PhaseBounds("b", None, 1)],
        phase_targets=[(2, 0.0), (2, 0.0)],
    )
    h = Harness(settings, lambda i: chain(i, 1))
    h.start()
    first, second = h.items
    h.clock.now = S
    h.complete(first, S)
    assert len(h.items) == 2  # draining: the freed slot is not refilled
    h.clock.now = 3 * S
    h.complete(second, 3 * S)
    assert len(h.items) == 3  # b began when the last of a's sessions ended
    assert h.rec.dispatched[-1][0].phase == "b"
    windows = h.loop.phase_windows(4 * S)
    assert windows[0]["drain_s"] == (3 * S - 1) / S  # from just after its last start
    assert windows[1]["start"] == 3.0
