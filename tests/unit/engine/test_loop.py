"""The traffic loop on a fake clock: schedules, dependencies, cancellation, stop, caps."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes import FakeClock, FakeTimers
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.engine.loop import InFlight, LoopSettings, TrafficLoop
from veeksha.engine.traffic_sink import SESSION_FAILED
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.session_state import SessionState
from veeksha.schedule.shards import ShardSpec

S = 1_000_000_000


def chain(session_id: int, turns: int, wait_s: float = 0.0) -> SessionSpec:
    return SessionSpec(
        session_id=session_id,
        nodes=[
            NodeSpec(
                node_id=i,
                parents=() if i == 0 else (i - 1,),
                history_parent=None if i == 0 else i - 1,
                wait_after_ready_s=0.0 if i == 0 else wait_s,
                prompt=f"s{session_id} t{i}",
                prompt_tokens=2,
                max_tokens=3,
            )
            for i in range(turns)
        ],
    )


class Recorder:
    def __init__(self) -> None:
        self.dispatched: list[tuple[InFlight, WorkItem]] = []
        self.done: list[tuple[InFlight, Result]] = []
        self.cancelled: list[tuple[int, int]] = []
        self.reasons: dict[tuple[int, int], str] = {}  # (session, node) → its row's message
        self.sessions: list[SessionState] = []

    def dispatched_one(self, request: InFlight, item: WorkItem) -> None:
        self.dispatched.append((request, item))

    def request_done(self, request: InFlight, result: Result, processed_at_ns: int) -> None:
        self.done.append((request, result))

    def request_cancelled(
        self, session: SessionState, node_id: int, request_id: int, at_ns: int, reason: str
    ) -> None:
        self.cancelled.append((session.session_id, node_id))
        self.reasons[session.session_id, node_id] = reason

    def session_done(self, session: SessionState) -> None:
        self.sessions.append(session)


class Harness:
    """A traffic loop on a fake clock whose submitted items and recorded events are kept."""

    def __init__(  # type: ignore[no-untyped-def]
        self,
        settings: LoopSettings,
        make_session,
        shard: ShardSpec | None = None,
        collect=None,
    ) -> None:
        self.clock = FakeClock()
        self.timers = FakeTimers(self.clock)
        self.rec = Recorder()
        self.items: list[WorkItem] = []
        rec = self.rec

        class Sink:
            dispatched = rec.dispatched_one
            request_done = rec.request_done
            request_cancelled = rec.request_cancelled
            session_done = rec.session_done

        self.loop = TrafficLoop(
            settings,
            make_session,
            self._submit,
            Sink(),
            self.clock,
            self.timers,
            shard=shard,
            collect=collect,
        )

    def start(self) -> None:
        self.loop.start(0)
        self.timers.advance(0)

    def _submit(self, item: WorkItem) -> int:
        self.items.append(item)
        return 0

    def complete(self, item: WorkItem, at_ns: int, ok: bool = True, text: str = "a b c") -> None:
        self.loop.on_results(
            [
                Result(
                    request_id=item.request_id,
                    worker_id=0,
                    status="ok" if ok else "error",
                    received_at_ns=item.dispatched_at_ns,
                    sent_at_ns=item.dispatched_at_ns,
                    completed_at_ns=at_ns,
                    output_text=text if ok else "",
                    error_kind="" if ok else "http_5xx",
                )
            ]
        )


def fixed_gaps(seconds: float):  # type: ignore[no-untyped-def]
    return lambda n: np.full(n, seconds)


def test_rate_sessions_start_on_the_absolute_timeline() -> None:
    h = Harness(
        LoopSettings(cancel_on_failure=True, max_sessions=3, rate_gaps=fixed_gaps(1.0)),
        lambda i: chain(i, 1),
    )
    h.start()
    h.timers.advance(10 * S)
    assert [item.dispatched_at_ns for item in h.items] == [0, S, 2 * S]
    assert [req.ready_at_ns for req, _ in h.rec.dispatched] == [0, S, 2 * S]
    assert not h.loop.finished
    for item in h.items:
        h.complete(item, h.clock.now)
    assert h.loop.finished
    assert h.loop.stop_reason == "completed"
    assert [s.status for s in h.rec.sessions] == ["ok"] * 3


def test_late_timer_does_not_shift_later_arrivals() -> None:
    h = Harness(
        LoopSettings(cancel_on_failure=True, max_sessions=4, rate_gaps=fixed_gaps(1.0)),
        lambda i: chain(i, 1),
    )
    h.start()
    h.clock.now = int(2.5 * S)  # the loop was busy: timers fire late
    h.timers.advance(int(2.5 * S))
    # the sessions planned at 1 s and 2 s start at once, with their planned ready times
    assert [req.ready_at_ns for req, _ in h.rec.dispatched] == [0, S, 2 * S]
    h.timers.advance(3 * S)
    assert h.rec.dispatched[-1][0].ready_at_ns == 3 * S
    assert h.rec.dispatched[-1][0].dispatched_at_ns == 3 * S


def test_child_waits_for_parent_completion_plus_think_time_and_gets_history() -> None:
    h = Harness(
        LoopSettings(cancel_on_failure=True, max_sessions=1, rate_gaps=fixed_gaps(1.0)),
        lambda i: chain(i, 2, wait_s=2.0),
    )
    h.start()
    first = h.items[0]
    h.clock.now = 3 * S
    h.complete(first, at_ns=int(1.5 * S), text="x y z")  # completed at 1.5 s, processed at 3 s
    assert len(h.items) == 1  # ready at 3.5 s, not yet
    h.timers.advance(int(3.5 * S))
    second = h.items[1]
    assert second.dispatched_at_ns == int(3.5 * S)
    assert h.rec.dispatched[1][0].ready_at_ns == int(3.5 * S)
    assert second.messages == [("user", "s0 t0"), ("assistant", "x y z"), ("user", "s0 t1")]
    assert h.rec.dispatched[1][0].history_tokens == 2 + 3  # prompt + answer words


def test_failure_cancels_the_rest_of_the_session() -> None:
    h = Harness(
        LoopSettings(cancel_on_failure=True, max_sessions=1, rate_gaps=fixed_gaps(1.0)),
        lambda i: chain(i, 3),
    )
    h.start()
    h.complete(h.items[0], at_ns=S, ok=False)
    assert h.rec.cancelled == [(0, 1), (0, 2)]
    # each says its cause: not the run's stop (the message a benchmark timeout gives)
    assert set(h.rec.reasons.values()) == {SESSION_FAILED}
    assert "another request of its session failed" in SESSION_FAILED
    assert h.rec.sessions[0].status == "error"
    assert h.loop.finished


def test_failure_without_cancel_lets_children_run() -> None:
    h = Harness(
        LoopSettings(cancel_on_failure=False, max_sessions=1, rate_gaps=fixed_gaps(1.0)),
        lambda i: chain(i, 2),
    )
    h.start()
    h.complete(h.items[0], at_ns=S, ok=False)
    h.timers.advance(S)
    assert len(h.items) == 2
    assert h.items[1].messages == [("user", "s0 t0"), ("user", "s0 t1")]


def test_concurrency_ramps_up_and_never_exceeds_target() -> None:
    h = Harness(
        LoopSettings(
            cancel_on_failure=True, max_sessions=5, concurrency=ConcurrencyRamp(2, rampup_s=2.0)
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    assert h.items == []  # target(0) = 0
    h.timers.advance(S)
    assert len(h.items) == 1
    assert h.rec.dispatched[0][0].ready_at_ns == S
    h.timers.advance(2 * S)
    assert len(h.items) == 2
    assert len(h.loop.sessions) == 2
    h.clock.now = int(2.5 * S)
    h.complete(h.items[0], at_ns=int(2.4 * S))
    # the freed slot is refilled at once; the new session's start is when the old one ended
    assert len(h.items) == 3
    assert h.rec.dispatched[2][0].ready_at_ns == int(2.4 * S)
    assert len(h.loop.sessions) == 2
    for item in h.items[1:]:
        h.complete(item, h.clock.now)
    for item in h.items[3:]:
        h.complete(item, h.clock.now)
    assert h.loop.counters.sessions_started == 5
    assert h.loop.finished


def test_timeout_cancels_undispatched_work_and_waits_for_in_flight() -> None:
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=-1,
            benchmark_timeout_s=2.5,
            rate_gaps=fixed_gaps(1.0),
        ),
        lambda i: chain(i, 2, wait_s=10.0),
    )
    h.start()
    h.complete(h.items[0], at_ns=int(0.5 * S))  # session 0's second turn waits until 10.5 s
    h.timers.advance(3 * S)
    assert h.loop.stopping
    assert h.loop.stop_reason == "timeout"
    assert len(h.items) == 3  # sessions 0, 1, 2 started; nothing after 2.5 s
    assert (0, 1) in h.rec.cancelled
    assert not h.loop.finished  # sessions 1 and 2 still have requests in flight
    h.complete(h.items[1], at_ns=3 * S)
    lost = h.loop.abandon_in_flight()
    assert [r.request_id for r in lost] == [h.items[2].request_id]
    assert h.loop.finished
    statuses = sorted(result.status for _, result in h.rec.done)
    assert statuses == ["cancelled", "ok", "ok"]
    # children released after the stop are cancelled, never dispatched
    assert (1, 1) in h.rec.cancelled
    stopped = "cancelled before it was sent: the run stopped (timeout)"
    assert h.rec.reasons[0, 1] == h.rec.reasons[1, 1] == stopped


def test_max_in_flight_holds_ready_requests_in_the_queue() -> None:
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=3,
            max_in_flight=1,
            rate_gaps=fixed_gaps(0.0),
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    assert len(h.items) == 1
    h.clock.now = S
    h.complete(h.items[0], S)
    assert len(h.items) == 2
    assert h.rec.dispatched[1][0].ready_at_ns == 0  # waited 1 s in the ready queue
    assert h.rec.dispatched[1][0].dispatched_at_ns == S


def test_warmup_sessions_come_first_and_do_not_count_toward_max_sessions() -> None:
    h = Harness(
        LoopSettings(
            cancel_on_failure=True, max_sessions=2, warmup_sessions=2, rate_gaps=fixed_gaps(1.0)
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    h.timers.advance(10 * S)
    assert [req.session.phase for req, _ in h.rec.dispatched] == [
        "warmup",
        "warmup",
        "measured",
        "measured",
    ]
    assert h.loop.measured_start_ns == 2 * S


def test_warmup_seconds_mark_early_sessions() -> None:
    h = Harness(
        LoopSettings(
            cancel_on_failure=True, max_sessions=2, warmup_seconds=1.5, rate_gaps=fixed_gaps(1.0)
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    h.timers.advance(10 * S)
    assert [req.session.phase for req, _ in h.rec.dispatched] == [
        "warmup",
        "warmup",
        "measured",
        "measured",
    ]


def test_benchmark_timeout_counts_from_the_first_measured_session_not_the_warmups_end() -> None:
    # Warmup until 1.5 s (run.phases: measured from 1.5 s), sessions every 1 s: the first
    # measured session starts at 2 s, and the 2.5 s deadline is 4.5 s (from 1.5 s it would be
    # 4.0 s, and the session planned at 4 s would never start).
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=-1,
            warmup_seconds=1.5,
            benchmark_timeout_s=2.5,
            rate_gaps=fixed_gaps(1.0),
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    h.timers.advance(10 * S)
    assert h.loop.stop_reason == "timeout"
    assert [w["start"] for w in h.loop.phase_windows(10 * S)] == [0.0, 1.5]
    assert h.loop.measured_start_ns == 2 * S
    assert [item.dispatched_at_ns for item in h.items] == [0, S, 2 * S, 3 * S, 4 * S]


def test_closed_loop_timeout_counts_from_the_first_ramp_slot_and_refills_nothing_after() -> None:
    # Target 2 over a 2 s ramp: slots open at 1 s and 2 s. The 1.5 s timeout runs from the first
    # session's start (1 s), not from t0 (the public veeksha's clock): deadline 2.5 s, so the
    # 2 s slot still starts. A session ending after the deadline, its grace running, frees a
    # slot that stays empty (the public veeksha keeps refilling during its grace).
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=-1,
            benchmark_timeout_s=1.5,
            concurrency=ConcurrencyRamp(2, rampup_s=2.0),
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    h.timers.advance(2 * S)
    assert [item.dispatched_at_ns for item in h.items] == [S, 2 * S]
    assert h.loop.measured_start_ns == S
    h.timers.advance(int(2.6 * S))  # past the deadline
    assert h.loop.stop_reason == "timeout"
    h.complete(h.items[0], at_ns=h.clock.now)
    assert len(h.items) == 2  # the freed slot is not refilled
    assert not h.loop.finished  # session 1 still in flight: its grace runs
    h.complete(h.items[1], at_ns=h.clock.now)
    assert h.loop.finished
    assert h.loop.counters.sessions_started == 2


@pytest.mark.parametrize(
    "settings",
    [
        LoopSettings(cancel_on_failure=True, max_sessions=600, rate_gaps=fixed_gaps(0.0)),
        # a closed loop's target of 10**9 with no ramp-up: every session was started in one
        # loop, which never returned (the deadline and Ctrl-C were never handled)
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=600,
            concurrency=ConcurrencyRamp(10**9, rampup_s=0.0),
        ),
    ],
    ids=["rate_burst", "closed_loop_target"],
)
def test_a_burst_starts_in_slices_with_planned_times(settings: LoopSettings) -> None:
    h = Harness(settings, lambda i: chain(i, 1))
    h.loop.start(0)
    h.timers.step()  # one timer pass: the first slice only
    assert len(h.items) == 256
    h.timers.advance(0)
    assert len(h.items) == 600
    assert h.loop.counters.sessions_started == 600
    assert {req.ready_at_ns for req, _ in h.rec.dispatched} == {0}


# ------------------------------------------------------------------ dispatch ahead of ready time

MS = 1_000_000


def ahead(make_session, **settings) -> Harness:  # type: ignore[no-untyped-def]
    """A loop that hands requests over 20 ms ahead (cancel on failure)."""
    return Harness(
        LoopSettings(cancel_on_failure=True, dispatch_ahead_ns=20 * MS, **settings), make_session
    )


def released(item: WorkItem, at_ns: int) -> Result:
    """A worker's answer to an item it held until ``not_before_ns`` and released at ``at_ns``."""
    return Result(
        request_id=item.request_id,
        worker_id=0,
        status="ok",
        received_at_ns=item.dispatched_at_ns,
        sent_at_ns=at_ns,
        completed_at_ns=at_ns + MS,
        output_text="a b c",
        released_at_ns=at_ns,
    )


def test_ahead_hands_sessions_over_in_batches_with_their_planned_ready_time() -> None:
    h = ahead(lambda i: chain(i, 1), max_sessions=100, rate_gaps=fixed_gaps(0.001))
    t0 = S
    h.loop.start(t0)
    h.timers.advance(t0 + S)
    assert len(h.items) == 100
    ready = [req.ready_at_ns for req, _ in h.rec.dispatched]
    assert ready == [t0 + i * MS for i in range(100)]  # the planned timeline, unchanged
    assert [item.not_before_ns for item in h.items] == ready
    leads = [r - item.dispatched_at_ns for r, item in zip(ready, h.items, strict=True)]
    assert min(leads) >= 10 * MS  # never less than half the window ahead
    assert max(leads) <= 20 * MS  # never more than the window
    passes = len({item.dispatched_at_ns for item in h.items})
    assert passes <= 11  # ~10 ms of arrivals per pass, not one pass per arrival
    for item in h.items:
        h.loop.on_results([released(item, item.not_before_ns + 30_000)])
    # the recorded dispatch time is the worker's release, not the early hand-over
    assert [req.dispatched_at_ns for req, _ in h.rec.done] == [r + 30_000 for r in ready]
    assert h.loop.finished


def test_ahead_hands_over_a_child_before_its_think_time_ends() -> None:
    h = ahead(lambda i: chain(i, 3, wait_s=0.5), max_sessions=1, rate_gaps=fixed_gaps(1.0))
    h.loop.start(S)
    h.timers.advance(S)
    (first,) = h.items
    h.clock.now = S + 100 * MS
    h.complete(first, S + 100 * MS)
    assert len(h.items) == 1  # the child is due at +600 ms: not yet within the window
    h.timers.advance(S + 579 * MS)
    assert len(h.items) == 1
    h.timers.advance(S + 580 * MS)  # a whole window ahead
    assert len(h.items) == 2
    child = h.items[1]
    assert child.not_before_ns == S + 600 * MS
    assert child.dispatched_at_ns == S + 580 * MS


def test_ahead_hands_over_at_once_what_is_already_due() -> None:
    h = ahead(lambda i: chain(i, 2), max_sessions=1, rate_gaps=fixed_gaps(1.0))
    h.loop.start(S)
    h.timers.advance(S)
    h.clock.now = S + 50 * MS
    h.complete(h.items[0], S + 50 * MS)
    assert h.items[1].dispatched_at_ns == S + 50 * MS
    assert h.items[1].not_before_ns == 0  # no think time: sent at once, nothing to hold


def test_ahead_never_hands_over_work_due_after_the_timeout() -> None:
    h = ahead(
        lambda i: chain(i, 1),
        max_sessions=-1,
        benchmark_timeout_s=0.05,
        rate_gaps=fixed_gaps(0.001),
    )
    h.loop.start(S)
    h.timers.advance(S + S)
    assert h.loop.stop_reason == "timeout"
    assert [item.not_before_ns for item in h.items] == [S + i * MS for i in range(50)]


def test_ahead_is_off_under_an_in_flight_cap() -> None:
    h = ahead(lambda i: chain(i, 1), max_sessions=3, rate_gaps=fixed_gaps(0.001), max_in_flight=10)
    h.loop.start(S)
    h.timers.advance(S + S)
    assert [(item.dispatched_at_ns, item.not_before_ns) for item in h.items] == [
        (S, 0),
        (S + MS, 0),
        (S + 2 * MS, 0),
    ]


def test_ahead_a_hand_over_withdrawn_before_its_release_is_a_cancelled_node() -> None:
    h = ahead(lambda i: chain(i, 1), max_sessions=2, rate_gaps=fixed_gaps(0.005))
    h.loop.start(S)
    h.timers.advance(S - 9 * MS)  # both handed over (S and S + 5 ms), neither due yet
    first, second = h.items
    h.loop.on_results([released(first, S + 20_000)])
    assert h.loop.counters.last_dispatch_lag_ns == 20_000
    h.loop.stop("interrupted")
    # the worker withdrew the second one (a stop without grace): never released, never sent
    h.loop.on_results(
        [
            Result(
                request_id=second.request_id,
                worker_id=0,
                status="cancelled",
                received_at_ns=h.clock.now,
                sent_at_ns=h.clock.now,
                completed_at_ns=h.clock.now,
                error_kind="cancelled",
            )
        ]
    )
    assert [req.request_id for req, _ in h.rec.done] == [first.request_id]
    assert h.rec.cancelled == [(1, 0)]  # recorded as a node cancelled before it was sent
    assert h.loop.counters.requests_dispatched == 1
    assert h.loop.finished
    assert [s.status for s in h.rec.sessions] == ["ok", "cancelled"]


# ----------------------------------------------------------------- per-client caps and priority


def two_clients(session_id: int, turns: int, client: int, priority: int = 0) -> SessionSpec:
    spec = chain(session_id, turns)
    for node in spec.nodes:
        node.client = client
        node.priority = priority
    return spec


def capped(make, caps, priority="fifo", sessions=4):  # type: ignore[no-untyped-def]
    return Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=sessions,
            rate_gaps=fixed_gaps(0.0),
            client_caps=caps,
            priority=priority,
            dispatch_ahead_ns=20_000_000,
        ),
        make,
    )


def in_flight_by_client(h: Harness) -> dict[int, int]:
    counts: dict[int, int] = {}
    for request in h.loop.in_flight.values():
        client = request.session.spec.nodes[request.node_id].client
        counts[client] = counts.get(client, 0) + 1
    return counts


def test_a_capped_client_waits_without_blocking_an_uncapped_one() -> None:
    h = capped(lambda i: two_clients(i, 1, i % 2), [1, None])
    h.start()
    # sessions 0 and 2 on client 0 (cap 1), 1 and 3 on client 1 (no cap): one waits
    assert sorted(item.client for item in h.items) == [0, 1, 1]
    assert h.loop.slots is not None
    assert h.loop.slots.waiting(0) == 1
    first = next(item for item in h.items if item.client == 0)
    h.clock.now = 3 * S
    h.complete(first, 3 * S)
    assert len(h.items) == 4
    late = h.rec.dispatched[-1][0]
    assert late.session.session_id == 2
    assert late.queue_wait_ns == 3 * S  # ready at 0, slot at 3 s
    assert [r.queue_wait_ns for r, _ in h.rec.dispatched[:3]] == [0, 0, 0]


def test_caps_are_never_exceeded_as_requests_come_and_go() -> None:
    h = capped(lambda i: two_clients(i, 3, i % 2), [2, 1], sessions=8)
    h.start()
    t = 0
    while h.loop.in_flight:
        counts = in_flight_by_client(h)
        assert counts.get(0, 0) <= 2
        assert counts.get(1, 0) <= 1
        t += S
        h.clock.now = t
        oldest = min(h.loop.in_flight.values(), key=lambda r: r.request_id)
        item = next(i for i in h.items if i.request_id == oldest.request_id)
        h.complete(item, t)
    assert len(h.items) == 24
    assert h.loop.finished
    assert h.loop.slots is not None
    assert h.loop.slots.peak == [2, 1]


def test_fifo_gives_a_freed_slot_to_the_earliest_ready() -> None:
    h = capped(lambda i: two_clients(i, 2, 0), [1], sessions=3)
    h.start()
    assert [item.request_id for item in h.items] == [0]  # session 0's root; 1 and 2 wait
    h.clock.now = S
    h.complete(h.items[0], S)  # session 0's second turn becomes ready at 1 s: behind 1 and 2
    assert [r.session.session_id for r, _ in h.rec.dispatched] == [0, 1]


def test_progress_gives_a_freed_slot_to_the_session_further_along() -> None:
    h = capped(lambda i: two_clients(i, 2, 0), [1], priority="progress", sessions=3)
    h.start()
    h.clock.now = S
    h.complete(h.items[0], S)
    # session 0 completed its first round: its second turn goes before the others' first
    assert [(r.session.session_id, r.node_id) for r, _ in h.rec.dispatched] == [(0, 0), (0, 1)]


def test_node_priority_gives_a_freed_slot_to_the_highest_priority() -> None:
    h = capped(lambda i: two_clients(i, 1, 0, priority=i), [1], priority="node", sessions=4)
    h.start()
    for k in range(1, 4):
        h.clock.now = k * S
        h.complete(h.items[-1], k * S)
    assert [r.session.session_id for r, _ in h.rec.dispatched] == [0, 3, 2, 1]


def test_a_stop_forgets_requests_waiting_for_a_slot_and_cancels_them() -> None:
    h = capped(lambda i: two_clients(i, 1, 0), [1], sessions=3)
    h.start()
    h.loop.stop("interrupted")
    assert sorted(h.rec.cancelled) == [(1, 0), (2, 0)]
    h.complete(h.items[0], S)
    assert h.loop.finished


def test_a_tool_node_sends_nothing_and_ends_after_its_latency() -> None:
    def session(i: int) -> SessionSpec:
        spec = chain(i, 3)
        tool = spec.nodes[1]
        tool.kind, tool.latency_s, tool.prompt, tool.max_tokens = "tool", 0.5, "result text", 2
        return spec

    h = capped(session, [1], sessions=1)
    h.start()
    h.clock.now = S
    h.complete(h.items[0], S)
    assert len(h.items) == 1  # the tool went to no worker (and took no slot)
    request, item = h.rec.dispatched[1]
    assert (request.worker_id, item.messages) == (-1, [])
    h.timers.advance(S + S // 2)
    _, result = h.rec.done[1]
    assert (result.status, result.sent_at_ns, result.completed_at_ns) == ("ok", S, S + S // 2)
    assert result.output_text == "result text"
    assert len(h.items) == 2  # its child is sent once the tool ended
    assert h.items[1].messages[-2:] == [("user", "result text"), ("user", "s0 t2")]


def test_a_failing_answer_is_reprompted_with_the_note_up_to_max_reprompts() -> None:
    def session(i: int) -> SessionSpec:
        spec = chain(i, 2)
        spec.nodes[0].validation = lambda text: None if text == "good" else "say good"
        spec.nodes[0].max_reprompts = 2
        return spec

    h = Harness(
        LoopSettings(cancel_on_failure=True, max_sessions=1, rate_gaps=fixed_gaps(0.0)), session
    )
    h.start()
    h.clock.now = S
    h.complete(h.items[0], S, text="bad")
    assert len(h.items) == 2
    retry = h.items[1]
    assert retry.messages == [("user", "s0 t0"), ("assistant", "bad"), ("user", "say good")]
    assert [r.attempt for r, _ in h.rec.dispatched] == [0, 1]
    assert h.rec.done[0][0].valid is False
    h.clock.now = 2 * S
    h.complete(retry, 2 * S, text="worse")
    h.clock.now = 3 * S
    h.complete(h.items[2], 3 * S, text="still bad")  # third attempt: no more re-prompts
    assert [r.attempt for r, _ in h.rec.dispatched] == [0, 1, 2, 0]
    assert h.items[3].messages[0] == ("user", "s0 t0")  # the child inherits the first prompt
    assert h.rec.done[2][0].valid is False


def test_progress_sends_a_reprompt_before_other_sessions() -> None:
    def session(i: int) -> SessionSpec:
        spec = two_clients(i, 1, 0)
        spec.nodes[0].validation = lambda text: None if text == "good" else "again"
        spec.nodes[0].max_reprompts = 1
        return spec

    h = capped(session, [1], priority="progress", sessions=3)
    h.start()
    h.clock.now = S
    h.complete(h.items[0], S, text="bad")  # sessions 1 and 2 have waited since 0
    assert [(r.session.session_id, r.attempt) for r, _ in h.rec.dispatched] == [(0, 0), (0, 1)]


def test_the_status_line_shows_each_clients_pools() -> None:
    from veeksha.engine.pools import client_pools, format_pools, status_snapshot

    h = capped(lambda i: two_clients(i, 2, i % 2), [1, None], sessions=4)
    h.start()
    pools = client_pools(h.loop, ["a", "b"])
    # a: sessions 0 and 2 (cap 1): one in flight, one waiting; their second turns pending
    assert pools == {
        "a.pending": 2,
        "a.waiting": 1,
        "a.in_flight": 1,
        "b.pending": 2,
        "b.waiting": 0,
        "b.in_flight": 2,
    }
    assert format_pools(pools) == (
        " | a pending 2 waiting 1 in flight 1 | b pending 2 waiting 0 in flight 2"
    )
    # the whole line's numbers: the run's counts, each client's pools beside them
    h.clock.now = S // 2
    line = status_snapshot(h.loop, ["a", "b"], h.clock.now)
    assert {key: line[key] for key in pools} == pools
    assert line["elapsed"] == 0.5
    # (a.waiting is in its cap's pool, not the ready queue)
    assert (line["sessions_started"], line["pending"], line["ready"]) == (4, 4, 0)
    assert (line["in_flight"], line["done"], line["failed"]) == (3, 0, 0)
    assert "a.pending" not in status_snapshot(h.loop, None, h.clock.now)


def test_a_request_cut_in_flight_by_the_stop_says_so() -> None:
    # Was "cancelled": not why, nor that it had been sent (a node never sent says both)
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=-1,
            benchmark_timeout_s=1.5,
            rate_gaps=fixed_gaps(1.0),
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    h.timers.advance(2 * S)
    assert h.loop.stop_reason == "timeout"
    item = h.items[-1]
    h.loop.on_results(
        [
            Result(
                request_id=item.request_id,
                worker_id=0,
                status="cancelled",
                received_at_ns=item.dispatched_at_ns,
                sent_at_ns=item.dispatched_at_ns,
                completed_at_ns=2 * S,
                error_kind="cancelled",
                error_message="cancelled",  # (the worker's, when its Stop's grace ran out)
            )
        ]
    )
    ((_, result),) = [done for done in h.rec.done if done[1].request_id == item.request_id]
    assert result.status == "cancelled"
    assert result.error_message == "cancelled in flight: the run stopped (timeout) before it ended"


def test_a_pass_late_past_the_timeout_starts_nothing_planned_after_it() -> None:
    """The loop was busy across the timeout: the arrival timer due before it fires after it
    (before the timeout's own timer). The sessions planned before the timeout start, late;
    those planned at or after it never do (the schedule decides, not how late the pass was:
    a run under load started 2 sessions more than the same scenario's other runs)."""
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=-1,
            benchmark_timeout_s=0.5,
            rate_gaps=fixed_gaps(0.1),
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    h.timers.advance(int(0.35 * S))  # sessions at 0, 0.1, 0.2 and 0.3 s
    h.clock.now = int(0.62 * S)  # busy: the timer of 0.4 s fires at 0.62 s
    h.timers.advance(int(0.62 * S))
    assert [req.ready_at_ns for req, _ in h.rec.dispatched] == [i * S // 10 for i in range(5)]
    assert h.loop.stop_reason == "timeout"


def test_a_child_due_after_the_timeout_is_not_sent_by_a_late_pass() -> None:
    """Two sessions' second turns: one due before the timeout, one after it; the loop's pass
    for the first runs after the timeout. The first is sent (late); the second is cancelled."""
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=2,
            benchmark_timeout_s=1.0,
            rate_gaps=fixed_gaps(0.1),
        ),
        lambda i: chain(i, 2, wait_s=0.2),
    )
    h.start()
    h.timers.advance(int(0.15 * S))
    first, second = h.items
    h.clock.now = int(0.75 * S)
    h.complete(first, int(0.75 * S))  # its child is due at 0.95 s
    h.clock.now = int(0.85 * S)
    h.complete(second, int(0.85 * S))  # its child at 1.05 s: after the timeout
    h.clock.now = int(1.2 * S)  # busy: the pass of 0.95 s runs at 1.2 s
    h.timers.advance(int(1.2 * S))
    sent = [req.ready_at_ns for req, _ in h.rec.dispatched]
    assert sent == [0, S // 10, int(0.95 * S)]
    assert (1, 1) in h.rec.cancelled
    assert h.loop.stop_reason == "timeout"


def test_a_closed_loop_answer_handled_after_the_timeout_refills_nothing() -> None:
    """A session's answer is handled after the timeout, before the timeout's own timer fired
    (a busy loop): the slot it frees is not refilled by a session starting past the timeout."""
    h = Harness(
        LoopSettings(
            cancel_on_failure=True,
            max_sessions=-1,
            benchmark_timeout_s=1.0,
            concurrency=ConcurrencyRamp(1, rampup_s=0.0),
        ),
        lambda i: chain(i, 1),
    )
    h.start()
    assert len(h.items) == 1
    h.clock.now = int(1.1 * S)
    h.complete(h.items[0], at_ns=int(1.1 * S))  # handled before the timers ran
    assert len(h.items) == 1
    h.timers.advance(int(1.1 * S))
    assert h.loop.stop_reason == "timeout"
    assert h.loop.counters.sessions_started == 1
