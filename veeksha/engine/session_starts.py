"""The traffic loop's session starts: open-loop arrivals, the closed loop's concurrency
target, the session limits and the measured phase's start (with its timeout).

A mixin of ``veeksha.engine.loop.TrafficLoop``: it works on the loop's own state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from veeksha.clock import Clock
from veeksha.errors import VeekshaError
from veeksha.generate.spec import SessionSpec
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhasedArrivals, PhaseTimeline
from veeksha.schedule.ready_queue import ReadyQueue
from veeksha.schedule.session_state import SessionState
from veeksha.schedule.shards import ShardRamp, ShardSpec, owns
from veeksha.timers import Cancellable, Timers

if TYPE_CHECKING:
    from veeksha.engine.loop import LoopCounters
    from veeksha.engine.loop_settings import LoopSettings

__all__ = ["SessionStarts"]

_NS = 1_000_000_000
_STARTS_PER_PASS = 256


class SessionStarts:
    """Starts sessions on schedule: each keeps its planned start time (the rate timeline, the
    ramp slot, or the end of the session whose slot it takes), whenever its timer fired."""

    settings: LoopSettings
    shard: ShardSpec | None
    counters: LoopCounters
    timeline: PhaseTimeline
    phase_names: list[str]
    sessions: dict[int, SessionState]
    ready: ReadyQueue[tuple[SessionState, int]]
    stopping: bool
    error: VeekshaError | None
    measured_start_ns: int | None
    t0_ns: int
    _make_session: Callable[[int], SessionSpec]
    _clock: Clock
    _timers: Timers
    _idle: bool
    _next_session: int
    _skipped: int
    _skipped_warmup: int
    _warmup_started: int
    _deadline_ns: int | None
    _deadline_timer: Cancellable | None
    _freed_past_deadline: bool
    _arrivals: PhasedArrivals | None
    _arrival_timer: Cancellable | None
    _ramp: ConcurrencyRamp | ShardRamp | None
    _ahead_ns: int
    _refill_ns: int
    _in_results: bool
    _collect: Callable[[], None] | None

    if TYPE_CHECKING:

        def stop(self, reason: str) -> None: ...
        def _horizon(self, now: int) -> int: ...
        def _past_deadline(self, at_ns: int) -> bool: ...
        def _dispatch_due(self) -> None: ...
        def _check_finished(self) -> None: ...

    def _can_start(self) -> bool:
        if self.stopping or self._idle:
            return False
        timeline = self.timeline
        if timeline.drain_pending or timeline.finished:
            return False
        limit = self.settings.session_limit
        if limit is not None and self._next_session >= limit:
            return False
        if self.settings.max_sessions < 0:
            return True
        started = self.counters.sessions_started + self._skipped
        measured = started - self._warmup_started - self._skipped_warmup
        return measured < self.settings.max_sessions

    def _start_session(self, start_ns: int, phase_index: int) -> None:
        index = self._next_session
        phase = self.phase_names[phase_index]
        shard = self.shard
        if shard is None:
            self._next_session += 1
        elif self.settings.concurrency is not None:  # its own indexes: index, index + count...
            self._next_session += shard.count
        else:  # open loop: every global arrival, only its own sessions start
            self._next_session += 1
            if not owns(shard, index):
                self._skipped += 1
                if phase == "warmup":
                    self._skipped_warmup += 1
                elif self.measured_start_ns is None:
                    self._begin_measured(start_ns)
                return
        try:
            spec = self._make_session(index)
        except VeekshaError as exc:  # e.g. a trace that cannot be read mid-run: stop cleanly
            self.error = exc
            self.stop("generator_error")
            return
        session = SessionState(spec, start_ns, self.settings.cancel_on_failure, phase)
        self.sessions[spec.session_id] = session
        self.counters.sessions_started += 1
        if phase == "warmup":
            self._warmup_started += 1
        elif self.measured_start_ns is None:
            self._begin_measured(start_ns)
        for node_id, ready_at in session.start():
            self.ready.push(ready_at, (session, node_id))

    def _begin_measured(self, start_ns: int) -> None:
        self.measured_start_ns = start_ns
        timeout = self.settings.benchmark_timeout_s
        if timeout > 0:
            deadline = self._deadline_ns = start_ns + round(timeout * _NS)
            self._deadline_timer = self._timers.call_at_ns(deadline, lambda: self.stop("timeout"))

    def _on_arrival_timer(self) -> None:
        self._arrival_timer = None
        arrivals = self._arrivals
        assert arrivals is not None
        now = self._clock.now_ns()
        horizon = self._horizon(now)
        started = 0
        # A burst (a late timer, or a rate beyond what one pass can start) is started in slices,
        # so results are still handled in between; each session keeps its planned start time.
        while started < _STARTS_PER_PASS and self._can_start():
            at = arrivals.peek_ns()
            if at is None or at > horizon:
                break
            self._start_session(*arrivals.pop())
            started += 1
        at = arrivals.peek_ns() if self._can_start() else None
        if at is not None and not self._past_deadline(at):
            wake = at - self._ahead_ns
            if wake > now:  # (else a burst goes on at once) no sooner than half a window on
                wake = max(wake, now + self._refill_ns)
            self._arrival_timer = self._timers.call_at_ns(wake, self._on_arrival_timer)
        self._dispatch_due()
        self._check_finished()
        if self._collect is not None:  # awake anyway: the Results nobody waited for
            self._collect()

    def _fill_concurrency(self, elapsed_ns: int, freed_at_ns: int = 0) -> None:
        timeline = self.timeline
        started = 0
        more = False
        while self._can_start():
            ramp = self._ramp  # (a phase that ends at a start changes it)
            assert ramp is not None
            if len(self.sessions) >= ramp.allowed(elapsed_ns):
                break
            if started >= _STARTS_PER_PASS:
                # a target beyond one pass (a large one, or a ramp-up of 0) is started in
                # slices, as a rate's burst: results, the deadline and Ctrl-C are handled in
                # between (a target of 10**9 started in one loop never gave them a turn)
                more = True
                break
            slot_ns = self.t0_ns + ramp.slot_open_ns(len(self.sessions) + 1)
            start_ns = max(slot_ns, freed_at_ns)
            if self._past_deadline(start_ns) or (self._freed_past_deadline and not freed_at_ns):
                # A slot freed at or after the timeout, its answer handled before the timeout's
                # own timer fired (a busy loop): not refilled, in this pass or a later one.
                self._freed_past_deadline = True
                break
            self._start_session(start_ns, timeline.start_session(start_ns))
            timeline.advance_to(start_ns + 1)  # (a count bound ends just after its last start)
            started += 1
        if self._arrival_timer is not None:
            self._arrival_timer.cancel()
            self._arrival_timer = None
        ramp = self._ramp
        assert ramp is not None
        next_ns = ramp.next_increase_ns(elapsed_ns)
        if more:
            self._arrival_timer = self._timers.call_at_ns(self._clock.now_ns(), self._on_ramp_timer)
        elif next_ns is not None and self._can_start():
            self._arrival_timer = self._timers.call_at_ns(self.t0_ns + next_ns, self._on_ramp_timer)
        if not self._in_results:  # (on_results dispatches once, after its whole batch)
            self._dispatch_due()

    def _on_ramp_timer(self) -> None:
        self._arrival_timer = None
        self._fill_concurrency(self._clock.now_ns() - self.t0_ns)
        self._check_finished()
