"""The traffic loop: starts sessions on schedule, dispatches ready requests, handles results.

Runs on one event loop in the main process, with no locks and no threads. It owns the session
states and the ready queue; the arrival policy (open-loop rate or closed-loop concurrency) only
decides when sessions start. Dispatching and recording are injected (``submit``, ``sink``) so the
loop knows nothing of processes or files; an optional ``flush`` is called once after each pass
that submitted something, so a dispatcher may batch the pass's items.

Timing vocabulary (all integer ns of CLOCK_MONOTONIC):
- a session's start time is its *planned* time (the rate timeline, the ramp slot, or the end of
  the session whose slot it takes), never the moment a timer happened to fire;
- a node's ready time is its session's start (roots) or its latest parent's completion plus its
  think time; ``dispatched_at − ready_at`` is the generator's own lag and is recorded, not hidden;
- with ``dispatch_ahead_ns`` a pass hands over everything that becomes ready within that window
  (sessions start that much early, with their planned start time), and the dispatcher releases
  each request at its ready time; ``dispatched_at`` is then that release, taken by the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from veeksha.clock import Clock
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.engine.deferral import loop_defers, node_defers
from veeksha.engine.loop_settings import LoopSettings, default_phases, shard_closed_loop
from veeksha.engine.phase_control import PhaseControl
from veeksha.engine.session_starts import SessionStarts
from veeksha.engine.tool_nodes import ToolNodes
from veeksha.engine.traffic_sink import (
    SESSION_ABANDONED,
    SESSION_FAILED,
    InFlight,
    TrafficSink,
    cut_in_flight,
    run_stopped,
)
from veeksha.errors import VeekshaError
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhasedArrivals, PhaseTimeline
from veeksha.schedule.ready_queue import ReadyQueue
from veeksha.schedule.session_state import NodeState, SessionState
from veeksha.schedule.shards import ShardRamp, ShardSpec, concurrency_share
from veeksha.schedule.slots import SlotPool, node_rounds, progress_key
from veeksha.timers import Cancellable, Timers

__all__ = [
    "InFlight",
    "LoopCounters",
    "LoopSettings",
    "TrafficLoop",
    "TrafficSink",
    "default_phases",
    "shard_closed_loop",
]

_NS = 1_000_000_000
_READY, _IN_FLIGHT = NodeState.READY, NodeState.IN_FLIGHT  # enum lookups cost ~0.1 µs
_TOOL = "tool"


def _nodes_of(session: SessionState) -> list[NodeSpec]:
    return session.spec.nodes


def _still_ready(entry: tuple[SessionState, int]) -> bool:
    return entry[0].states[entry[1]] == _READY


def _fifo_key(session: SessionState, node_id: int) -> tuple[int, ...]:
    return (session.ready_at_ns[node_id] or 0,)


def _progress_key(session: SessionState, node_id: int) -> tuple[int, ...]:
    done = [state >= NodeState.OK for state in session.states]
    rounds = node_rounds(session.spec.nodes)
    attempts = session.attempts
    reprompt = attempts is not None and node_id in attempts
    key = progress_key(rounds, done, node_id, session.started_at_ns, reprompt)
    return (*key, session.ready_at_ns[node_id] or 0)


def _node_key(session: SessionState, node_id: int) -> tuple[int, ...]:
    return (-session.spec.nodes[node_id].priority, session.ready_at_ns[node_id] or 0)


_KEYS: dict[str, Callable[[SessionState, int], tuple[int, ...]]] = {
    "fifo": _fifo_key,
    "progress": _progress_key,
    "node": _node_key,
}


@dataclass(slots=True)
class LoopCounters:
    """Live counts for the progress line and the run summary: ``requests_done`` counts the
    answered, failed and abandoned requests (``requests_failed`` the failed ones,
    ``requests_abandoned`` those their user abandoned), ``requests_cancelled``
    those cancelled before they were sent or while in flight; ``chunk_stamps_clamped`` the
    reads whose kernel stamp was clamped (``Result.chunk_stamps_clamped``, summed)."""

    sessions_started: int = 0
    sessions_done: int = 0
    requests_dispatched: int = 0
    requests_done: int = 0
    requests_failed: int = 0
    requests_abandoned: int = 0
    requests_cancelled: int = 0
    last_dispatch_lag_ns: int = 0
    chunk_stamps_clamped: int = 0


class TrafficLoop(SessionStarts, PhaseControl, ToolNodes):
    """Drives one run: session starts, readiness, dispatch, completion, stop conditions.

    Phases (``veeksha.schedule.phases``): a session's phase is the one in force at its planned
    start; a request's is the one in force at its ready time, when the schedule releases it
    (a root: its session's planned start; a later node: its parents' end plus its think time),
    whatever phase its session started in. So each phase's requests are those sent under its
    load, and the generator's own lag never moves a request to another phase. Nothing is
    handed over ahead beyond a phase boundary not known yet (the end of a phase bounded by
    max_sessions).
    """

    def __init__(
        self,
        settings: LoopSettings,
        make_session: Callable[[int], SessionSpec],
        submit: Callable[[WorkItem], int],
        sink: TrafficSink,
        clock: Clock,
        timers: Timers,
        flush: Callable[[], None] | None = None,
        shard: ShardSpec | None = None,
        collect: Callable[[], None] | None = None,
    ) -> None:
        if (settings.rate_gaps is None) == (settings.concurrency is None):
            raise ValueError("exactly one of rate_gaps and concurrency must be set")
        self.shard = shard
        if shard is not None and settings.concurrency is not None:
            settings = shard_closed_loop(settings, shard)
        self.settings = settings
        self._make_session = make_session
        self._submit = submit
        self._flush = flush
        # reads the Results nobody waited for (engine.deferral), at the arrival timer's wake-ups
        self._collect = collect
        self._unflushed = False  # submitted since the last flush
        self._in_results = False  # inside on_results: flush once at its end
        self._sink = sink
        self._clock = clock
        self._timers = timers
        self.counters = LoopCounters()
        self.ready: ReadyQueue[tuple[SessionState, int]] = ReadyQueue()
        self.sessions: dict[int, SessionState] = {}
        self.in_flight: dict[int, InFlight] = {}
        self.t0_ns = 0
        self.measured_start_ns: int | None = None
        self.stopping = False
        self.stop_reason = ""
        # why the run stopped, in words, when the loop stopped it itself ("errors")
        self.stop_detail: str | None = None
        self._error_budget = settings.error_budget
        self.error: VeekshaError | None = None  # why a session could not be made, if it stopped
        self._next_session = 0  # the next global session index this loop may start
        self._warmup_started = 0
        # open loop, shard: sessions of other shards passed over (they count for the limits)
        self._skipped = 0
        self._skipped_warmup = 0
        self._next_request = 0
        # request ids: unique across the shards of one experiment (index, index + count, ...)
        self._request_step = 1
        self._idle = False  # a closed-loop shard whose share of every target is 0
        if shard is not None:
            self._next_request = shard.index
            self._request_step = shard.count
            if settings.concurrency is not None:
                self._next_session = shard.index
                targets = settings.phase_targets or [(settings.concurrency.target, 0.0)]
                self._idle = all(concurrency_share(t, shard) == 0 for t, _ in targets)
        self.phases = list(settings.phases or default_phases(settings))
        self.phase_names = [phase.name for phase in self.phases]
        self.timeline = PhaseTimeline(self.phases, 0)  # (replaced at start, at t0)
        self._ramp: ConcurrencyRamp | ShardRamp | None = settings.concurrency
        self._phase_timer: Cancellable | None = None
        self._arrivals: PhasedArrivals | None = None
        self._arrival_timer: Cancellable | None = None
        self._dispatch_timer: Cancellable | None = None
        self._dispatch_wake_ns: int | None = None
        self._deadline_timer: Cancellable | None = None
        self._deadline_ns: int | None = None  # nothing becomes due at or after it
        self._freed_past_deadline = False  # (a closed loop's slot freed after it: not refilled)
        caps = settings.client_caps
        capped = caps is not None and any(cap is not None for cap in caps)
        # the pre-departure pool (schedule/slots.py); None: no client has a cap
        self.slots: SlotPool[tuple[SessionState, int]] | None = (
            SlotPool(caps) if caps is not None and capped else None
        )
        self._keys = _KEYS[settings.priority]
        # requests may be handed over deferrable (engine.deferral); per client caps, if any
        self._defers = collect is not None and loop_defers(settings)
        self._caps = caps if capped else None
        # (a client's slot is taken at the hand-over: a request handed over ahead holds it up
        # to dispatch_ahead_ns before it is on the wire, so the wire never holds more)
        ahead = settings.dispatch_ahead_ns if settings.max_in_flight is None else 0
        self._ahead_ns = max(0, ahead)
        # A pass hands over everything due within ``_ahead_ns`` and the next pass comes when the
        # lead left drops to half of it: half a window of work per pass, never less lead.
        self._refill_ns = self._ahead_ns // 2
        self._finished = False
        self._on_finish: list[Callable[[], None]] = []
        self._on_stop: list[Callable[[str], None]] = []
        self._on_phase: list[Callable[[str, int], None]] = []

    # ------------------------------------------------------------------------------- public API

    def start(self, t0_ns: int) -> None:
        """Begin the run at ``t0_ns`` (the first session arrives then)."""
        self.t0_ns = t0_ns
        settings = self.settings
        self.timeline = PhaseTimeline(self.phases, t0_ns)
        self.timeline.on_begin.append(self._on_phase_begin)
        if settings.rate_gaps is not None:
            rate_gaps = settings.rate_gaps
            n = len(self.phases)
            self._arrivals = PhasedArrivals(
                self.timeline,
                settings.phase_gaps or (lambda _phase: rate_gaps),
                settings.phase_mean_gaps or [1.0] * n,
                settings.phase_keys or [0] * n,
                settings.rate_warp,
            )
            self._arrival_timer = self._timers.call_at_ns(
                t0_ns - self._ahead_ns, self._on_arrival_timer
            )
        else:
            self._ramp = self._phase_ramp(0, 0, 0)
            self._arrival_timer = self._timers.call_at_ns(t0_ns, self._on_ramp_timer)
        self._arm_phase_timer()
        for callback in self._on_phase:
            callback(self.phase_names[0], t0_ns)
        self._check_finished()

    def phase_windows(self, end_ns: int) -> list[dict[str, object]]:
        """Each phase begun, in seconds since t0 (``PhaseTimeline.windows``)."""
        return self.timeline.windows(self.t0_ns, end_ns)

    def on_finish(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once every started session has ended and nothing more can start."""
        if self._finished:
            callback()
        else:
            self._on_finish.append(callback)

    def on_phase(self, callback: Callable[[str, int], None]) -> None:
        """Call ``callback(name, start_ns)`` as each phase begins (the first at t0)."""
        self._on_phase.append(callback)

    def on_stop(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` when the run stops starting work (timeout, interrupt)."""
        self._on_stop.append(callback)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def next_session(self) -> int:
        """The next global session index this loop would start (or pass over, as a shard)."""
        return self._next_session

    def stop(self, reason: str) -> None:
        """Stop starting work: no new sessions, no new dispatches; in-flight requests go on.

        Every node that was not dispatched is cancelled (one row each), so sessions end as soon
        as their in-flight requests do.
        """
        if self.stopping:
            return
        self.stopping = True
        self.stop_reason = reason
        for timer in (
            self._arrival_timer,
            self._dispatch_timer,
            self._deadline_timer,
            self._phase_timer,
        ):
            if timer is not None:
                timer.cancel()
        now = self._clock.now_ns()
        self.ready.drain()
        if self.slots is not None:
            self.slots.drain()
        for session in list(self.sessions.values()):
            session.cancel_pending(now)
            self._report_cancelled(session, now)
            if session.done:
                self._end_session(session)
        for callback in self._on_stop:
            callback(reason)
        self._check_finished()

    def abandon_in_flight(self, error_kind: str = "cancelled") -> list[InFlight]:
        """Forget requests still in flight (their results will never come); returns them."""
        now = self._clock.now_ns()
        lost = list(self.in_flight.values())
        self.in_flight.clear()
        for request in lost:
            # the release time if it was handed over ahead (and never after now)
            released = min(max(request.dispatched_at_ns, request.ready_at_ns), now)
            result = Result(
                request_id=request.request_id,
                worker_id=request.worker_id,
                status="cancelled" if error_kind == "cancelled" else "error",
                # like the pool's worker_lost results: the real send times are unknown
                received_at_ns=released,
                sent_at_ns=released,
                completed_at_ns=now,
                error_kind=error_kind,
                error_message="no result before the run ended",
            )
            self._handle_result(request, result, now)
        self._check_finished()
        return lost

    def on_results(self, results: list[Result]) -> None:
        """Results from the workers (called on the loop, in batches).

        Whatever the batch releases (children, closed-loop replacements) is dispatched as it
        becomes due and flushed once, at the end: one frame per worker for the whole batch.
        """
        now = self._clock.now_ns()
        self._in_results = True
        try:
            for result in results:
                request = self.in_flight.pop(result.request_id, None)
                if request is None:  # a late duplicate after abandon_in_flight
                    continue
                self._handle_result(request, result, now)
            if self.settings.concurrency is not None and not self.stopping:
                self._fill_concurrency(now - self.t0_ns)
        finally:
            self._in_results = False
        # A pass with nothing queued, nothing unsent, no capped client and no dispatch timer
        # armed would pop nothing and arm nothing: skipped (the common case of an open loop's
        # single requests, where a result releases nothing).
        if (
            self.ready
            or self._unflushed
            or self.slots is not None
            or self._dispatch_wake_ns is not None
        ):
            self._dispatch_due()
        self._check_finished()

    # --------------------------------------------------------------------------------- dispatch

    def _horizon(self, now: int) -> int:
        """The latest ready time handed over in a pass at ``now``: never the timeout's or later,
        also in a pass that runs after it, before the timeout's own timer (a loop that was busy:
        what its schedule puts after the timeout is never started, however late the pass)."""
        horizon = now + self._ahead_ns
        if self._deadline_ns is not None and horizon >= self._deadline_ns:
            horizon = self._deadline_ns - 1
        return horizon

    def _past_deadline(self, at_ns: int) -> bool:
        return self._deadline_ns is not None and at_ns >= self._deadline_ns

    def _dispatch_due(self) -> None:
        if self.stopping:
            return
        now = self._clock.now_ns()
        horizon = self._horizon(now)
        if self.timeline.end_unknown:  # nothing ahead beyond a boundary not known yet
            arrivals = self._arrivals
            at = None if arrivals is None else arrivals.peek_ns()
            horizon = min(horizon, now) if at is None else min(horizon, max(now, at - 1))
        if self.slots is not None:
            self._dispatch_slotted(self.slots, now, horizon)
        else:
            cap = self.settings.max_in_flight
            limit = None if cap is None else max(0, cap - len(self.in_flight))
            for session, node_id in self.ready.pop_due(horizon, limit):
                if session.states[node_id] != _READY:
                    continue  # cancelled while queued
                self._dispatch(session, node_id, now)
        if self._unflushed and not self._in_results and self._flush is not None:
            self._unflushed = False
            self._flush()  # the pass's items leave together (one frame per worker)
        self._arm_dispatch_timer()

    def _dispatch_slotted(
        self, slots: SlotPool[tuple[SessionState, int]], now: int, horizon: int
    ) -> None:
        """A pass with capped clients: what is due takes its client's slot or waits in the
        pool; then freed slots go to the waiting requests, by the priority policy."""
        nodes_of = _nodes_of
        for session, node_id in self.ready.pop_due(horizon):
            if session.states[node_id] != _READY:
                continue  # cancelled while queued
            node = nodes_of(session)[node_id]
            client = node.client
            if node.kind == _TOOL or not slots.capped(client) or slots.try_take(client):
                self._dispatch(session, node_id, now)  # (handed over ahead if not yet due)
            else:
                slots.wait(client, self._keys(session, node_id), (session, node_id))
        for _client, (session, node_id) in slots.take(_still_ready):
            ready_at: int = session.ready_at_ns[node_id]  # type: ignore[assignment]
            self._dispatch(session, node_id, now, max(0, now - ready_at))

    def _dispatch(self, session: SessionState, node_id: int, now: int, waited: int = 0) -> None:
        # (positional arguments: this runs once per request)
        request_id = self._next_request
        self._next_request += self._request_step
        ready_at: int = session.ready_at_ns[node_id]  # type: ignore[assignment]  # set when ready
        node = session.spec.nodes[node_id]
        if node.kind == _TOOL:
            self._call_tool(session, node_id, request_id, ready_at, now)
            return
        messages, history_tokens = session.outgoing(node_id)
        item = WorkItem(
            request_id,
            messages,
            node.max_tokens,
            now,
            ready_at if ready_at > now else 0,
            node.client,
            # (once the last session has started, nothing: the run's end waits for no bulk read)
            self._defers
            and self._arrival_timer is not None
            and node_defers(session.spec, node_id, self._caps),
            session.spec.session_id,
        )
        if session.spec.images:
            item.images = session.outgoing_images(node_id, messages)
        if node.abandon_after_s is not None:
            item.abandon_after_ns = round(node.abandon_after_s * 1e9)
        worker_id = self._submit(item)
        self._unflushed = True
        session.mark_dispatched(node_id)
        phase = self.phase_names[self.timeline.phase_at(ready_at)]  # (see the class doc)
        request = InFlight(
            session,
            node_id,
            request_id,
            ready_at,
            now,
            worker_id,
            history_tokens,
            phase,
            waited,
            session.attempts.get(node_id, 0) if session.attempts else 0,
        )
        self.in_flight[request_id] = request
        self.counters.requests_dispatched += 1
        if ready_at <= now:  # (handed over ahead: its lag is known once the worker released it)
            self.counters.last_dispatch_lag_ns = now - ready_at
        self._sink.dispatched(request, item)

    def _arm_dispatch_timer(self) -> None:
        cap = None if self.slots is not None else self.settings.max_in_flight
        wake = self.ready.next_time()
        if wake is None or self.stopping or (cap is not None and len(self.in_flight) >= cap):
            wake = None
        elif self._ahead_ns:
            # wake when the head is within the window, but no sooner than half a window from
            # the last pass (so passes carry work in batches)
            wake = max(wake - self._ahead_ns, min(wake, self._clock.now_ns() + self._refill_ns))
        if wake == self._dispatch_wake_ns:
            return
        if self._dispatch_timer is not None:
            self._dispatch_timer.cancel()
            self._dispatch_timer = None
        self._dispatch_wake_ns = wake
        if wake is not None:
            self._dispatch_timer = self._timers.call_at_ns(wake, self._on_dispatch_timer)

    def _on_dispatch_timer(self) -> None:
        self._dispatch_timer = None
        self._dispatch_wake_ns = None
        self._dispatch_due()

    # ---------------------------------------------------------------------------------- results

    def _handle_result(self, request: InFlight, result: Result, now: int) -> None:
        session = request.session
        if self.slots is not None:
            done = session.spec.nodes[request.node_id]
            if done.kind != _TOOL and self.slots.capped(done.client):
                self.slots.release(done.client)
        if result.released_at_ns:  # handed over ahead: released by the worker's timer
            request.dispatched_at_ns = result.released_at_ns
            self.counters.last_dispatch_lag_ns = result.released_at_ns - request.ready_at_ns
        elif request.dispatched_at_ns < request.ready_at_ns:  # handed over ahead, no release
            if result.status == "cancelled":
                # cancelled before its release (the run stopped): it was never dispatched, so it
                # ends like a node cancelled in the ready queue
                self.counters.requests_dispatched -= 1
                session.cancel_node(request.node_id, now)
                self._report_cancelled(session, now, request)
                if session.done:
                    self._end_session(session)
                return
            if result.error_kind == "worker_lost" and result.completed_at_ns >= request.ready_at_ns:
                # lost with its worker after its ready time: the worker's timer released it then
                # (as the lost Result's sent_at assumes), not at the hand-over
                request.dispatched_at_ns = request.ready_at_ns
        ok = result.status == "ok"
        node = session.spec.nodes[request.node_id]
        note = None
        if ok and node.validation is not None:
            note = node.validation(result.output_text)
            request.valid = note is None
        if result.status == "cancelled":  # in flight when the run stopped: not answered
            self.counters.requests_cancelled += 1
            if self.stopping and result.error_message == "cancelled":  # (the worker's word)
                message = cut_in_flight(self.stop_reason or "stopped")
                result = msgspec.structs.replace(result, error_message=message)
        elif result.status == "abandoned":  # its user gave up on it: not a failure
            self.counters.requests_done += 1
            self.counters.requests_abandoned += 1
        else:
            self.counters.requests_done += 1
            if not ok:
                self.counters.requests_failed += 1
            if self._error_budget is not None and not self.stopping:
                self.stop_detail = self._error_budget.ended(not ok) or self.stop_detail
        if result.chunk_stamps_clamped:  # (a substituted time: said in summary.json, run.log)
            self.counters.chunk_stamps_clamped += result.chunk_stamps_clamped
        self._sink.request_done(request, result, now)
        conversation_tokens = (
            result.prompt_tokens
            if result.prompt_tokens is not None
            else request.history_tokens + node.prompt_tokens
        )
        answer_tokens = (
            result.completion_tokens
            if result.completion_tokens is not None
            else len(result.output_text.split())
        )
        if session.states[request.node_id] != _IN_FLIGHT:
            return
        if note is not None and request.attempt < node.max_reprompts and not self.stopping:
            self._reprompt(request, result, note, answer_tokens, conversation_tokens)
            return
        released = session.complete(
            request.node_id,
            result.completed_at_ns,  # (a failure's: when it was seen, e.g. the give-up)
            ok,
            cancelled=not ok and result.status == "cancelled",
            abandoned=result.status == "abandoned",
            answer=result.output_text,
            conversation_tokens=conversation_tokens,
            answer_tokens=answer_tokens,
        )
        if self.stopping:
            for child, _ in released:
                session.cancel_node(child, now)
        else:
            for child, ready_at in released:
                self.ready.push(ready_at, (session, child))
        cause = SESSION_ABANDONED if result.status == "abandoned" else SESSION_FAILED
        self._report_cancelled(session, now, cause=cause)
        if session.done:
            self._end_session(session)
            if self.settings.concurrency is not None and not self.stopping:
                self._fill_concurrency(now - self.t0_ns, session.ended_at_ns or now)
        if self.stop_detail is not None and not self.stopping:  # (its error budget is spent)
            self.stop("errors")

    def _report_cancelled(
        self,
        session: SessionState,
        now: int,
        withdrawn: InFlight | None = None,
        cause: str = SESSION_FAILED,
    ) -> None:
        """One row per node just cancelled; a ``withdrawn`` hand-over keeps its request id.

        Its cause: the run's stop when the loop is stopping (``stop`` cancels every node not
        dispatched, so a failure after it finds none left to cancel), else ``cause``: the
        failure of another request of its session (``cancel_session_on_failure``), or its
        abandonment (``SESSION_ABANDONED``)."""
        cancelled = session.take_cancelled()
        if not cancelled:
            return
        reason = run_stopped(self.stop_reason or "stopped") if self.stopping else cause
        for node_id in cancelled:
            self.counters.requests_cancelled += 1
            if withdrawn is not None and node_id == withdrawn.node_id:
                request_id = withdrawn.request_id
            else:
                request_id = self._next_request
                self._next_request += self._request_step
            self._sink.request_cancelled(session, node_id, request_id, now, reason)

    def _end_session(self, session: SessionState) -> None:
        if self.sessions.pop(session.session_id, None) is None:
            return
        self.counters.sessions_done += 1
        self._sink.session_done(session)

    def _check_finished(self) -> None:
        if self._finished:
            return
        if not self.sessions and not self.in_flight and not self.stopping:
            if self.timeline.drain_pending and self._phase_timer is None:
                self._end_drain()
            if self.timeline.drain_pending:
                return  # (the next phase begins at the drained phase's end)
        if not self.sessions and not self.in_flight and not self._can_start():
            for timer in (
                self._arrival_timer,
                self._dispatch_timer,
                self._deadline_timer,
                self._phase_timer,
            ):
                if timer is not None:
                    timer.cancel()
            if not self.stop_reason:
                self.stop_reason = "completed"
            self._finished = True
            for callback in self._on_finish:
                callback()
