"""The traffic loop's phases: a closed-loop target per phase, the timer at the end of a phase
bounded by its duration, and drains (a phase that ends once every session has ended).

A mixin of ``veeksha.engine.loop.TrafficLoop``: it works on the loop's own state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from veeksha.clock import Clock
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhaseBounds, PhasedArrivals, PhaseTimeline
from veeksha.schedule.session_state import SessionState
from veeksha.schedule.shards import ShardRamp, ShardSpec
from veeksha.timers import Cancellable, Timers

if TYPE_CHECKING:
    from veeksha.engine.loop_settings import LoopSettings
    from veeksha.engine.traffic_sink import InFlight

__all__ = ["PhaseControl"]

_NS = 1_000_000_000


class PhaseControl:
    """Moves the loop from phase to phase (``veeksha.schedule.phases``): the ramp of each
    closed-loop phase, its end by duration, and the pause of a drain until the loop is empty."""

    settings: LoopSettings
    shard: ShardSpec | None
    phases: list[PhaseBounds]
    phase_names: list[str]
    timeline: PhaseTimeline
    sessions: dict[int, SessionState]
    in_flight: dict[int, InFlight]
    stopping: bool
    t0_ns: int
    _clock: Clock
    _timers: Timers
    _ramp: ConcurrencyRamp | ShardRamp | None
    _phase_timer: Cancellable | None
    _arrivals: PhasedArrivals | None
    _arrival_timer: Cancellable | None
    _on_phase: list[Callable[[str, int], None]]

    if TYPE_CHECKING:

        def _fill_concurrency(self, elapsed_ns: int, freed_at_ns: int = 0) -> None: ...
        def _on_arrival_timer(self) -> None: ...
        def _check_finished(self) -> None: ...

    def _phase_ramp(
        self, phase: int, start_ns: int, from_target: int
    ) -> ConcurrencyRamp | ShardRamp:
        """Phase ``phase``'s closed-loop target, ramping from ``from_target`` at ``start_ns``
        (elapsed)."""
        targets = self.settings.phase_targets
        if targets:
            target, rampup_s = targets[phase]
        else:
            base = self.settings.concurrency
            assert base is not None
            target, rampup_s = base.target, base.rampup_ns / _NS
        ramp = ConcurrencyRamp(target, rampup_s, start_ns, from_target)
        return ramp if self.shard is None else ShardRamp(ramp, self.shard)

    def _on_phase_begin(self, phase: int, start_ns: int) -> None:
        if self.settings.concurrency is not None and self._ramp is not None:
            drained = bool(self.timeline.drains) and self.timeline.drains[-1].resumed_ns == start_ns
            ramp = self._ramp
            target = ramp.global_ramp.target if isinstance(ramp, ShardRamp) else ramp.target
            from_target = 0 if drained else target
            self._ramp = self._phase_ramp(phase, start_ns - self.t0_ns, from_target)
        self._arm_phase_timer()
        for callback in self._on_phase:
            callback(self.phase_names[phase], start_ns)

    def _arm_phase_timer(self) -> None:
        """Closed loop: a timer at the end of a phase bounded by its duration (the open loop's
        arrivals find their boundaries themselves)."""
        if self._phase_timer is not None:
            self._phase_timer.cancel()
            self._phase_timer = None
        if self.settings.concurrency is None or self.stopping:
            return
        timeline = self.timeline
        duration = self.phases[timeline.index].duration_ns
        if duration is not None and not timeline.finished:
            end = timeline.starts[timeline.index] + duration
            self._phase_timer = self._timers.call_at_ns(end, lambda: self._on_phase_timer(end))

    def _on_phase_timer(self, end_ns: int) -> None:
        self._phase_timer = None
        self.timeline.advance_to(end_ns)
        if not self.timeline.drain_pending:
            self._fill_concurrency(self._clock.now_ns() - self.t0_ns)
        self._check_finished()

    def _end_drain(self) -> None:
        """Every session has ended during a drain: the next phase begins (not before the
        drained phase's own end)."""
        now = self._clock.now_ns()
        at = max(now, self.timeline.drains[-1].ended_ns)
        if at > now:
            self._phase_timer = self._timers.call_at_ns(at, self._on_drain_timer)
            return
        if self._arrivals is not None:
            self._arrivals.resume(now)
            if self._arrival_timer is not None:
                self._arrival_timer.cancel()
            self._arrival_timer = self._timers.call_at_ns(now, self._on_arrival_timer)
        else:
            self.timeline.resume(now)
            self._fill_concurrency(now - self.t0_ns)

    def _on_drain_timer(self) -> None:
        self._phase_timer = None
        if self.timeline.drain_pending and not self.sessions and not self.in_flight:
            self._end_drain()
        self._check_finished()
