"""The phases of one run on its timeline: which phase is in force when. Pure: times in.

Vocabulary (integer ns of the run's clock):

- a phase *begins* at its start and *ends* when every bound it has is met: ``duration`` (at
  start + duration) and ``max_sessions`` (just after its last session started: that start + 1 ns,
  so the last session's first request is still the phase's); an unbounded phase never ends;
- a phase that ends with ``drain`` leaves the run *draining*: nothing starts until every session
  has ended, and the next phase begins then (``resume``); its window runs until that moment;
- ``phase_at(t)`` is the phase whose window holds ``t``: the phase of a session starting at
  ``t`` and of a request released at ``t``. It is O(1) while ``t`` stays in the current phase.

``PhasedArrivals`` is the open-loop timeline across phases: within a phase the gaps of its
interval generator on an absolute timeline (``RateArrivals``); consecutive phases with the same
scheduler share one process (a warmup that changes nothing leaves the schedule as it was). At a
boundary where the scheduler changes, the gap that crosses it keeps its part before the boundary
and has its part beyond it rescaled to the new phase's mean gap (exact for poisson, and for a
fixed gap or gamma law whose rate changes), then the new phase's own gaps follow: no gap, no
drain, no extra arrival at the boundary. A gap that crosses several phases is rescaled at each
boundary in turn (never once, at the last: the phases between would get no arrival). After
a drain the next phase starts afresh: its first session at the drain's end, as the first
phase's at t0.

Worked example (fixed gaps, 4/s for 1 s then 8/s): arrivals 0, 0.25, 0.5, 0.75, then the gap
from 0.75 would end at 1.0, the boundary: 0 s beyond it, so 1.0, 1.125, 1.25...
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from veeksha.scenario.base import MAX_SECONDS
from veeksha.schedule.arrivals import RateArrivals

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["Drain", "PhaseBounds", "PhaseTimeline", "PhasedArrivals"]

_NEVER = 1 << 62
_S = 1e9
_MAX_BEYOND_NS = MAX_SECONDS * _S


@dataclass(frozen=True, slots=True)
class PhaseBounds:
    """A phase as the timeline sees it: a name and its bounds (None: no such bound)."""

    name: str
    duration_ns: int | None = None
    max_sessions: int | None = None
    drain: bool = False


@dataclass(slots=True)
class Drain:
    """A drain after ``phase``: arrivals stopped at ``ended_ns``, the next phase began at
    ``resumed_ns`` (None while it lasts)."""

    phase: int
    ended_ns: int
    resumed_ns: int | None = None


class PhaseTimeline:
    """The phases' boundaries as they become known; see the module docstring."""

    __slots__ = (
        "_hi",
        "_last_start",
        "_lo",
        "drain_pending",
        "drains",
        "finished",
        "index",
        "on_begin",
        "phases",
        "started",
        "starts",
    )

    def __init__(self, phases: Sequence[PhaseBounds], t0_ns: int) -> None:
        if not phases:
            raise ValueError("a run has at least one phase")
        self.phases = tuple(phases)
        self.starts = [t0_ns]  # the start of each phase begun so far
        self.index = 0  # the current phase (the last one begun)
        self.started = 0  # sessions started in the current phase
        self._last_start = t0_ns
        self.drain_pending = False
        self.finished = False  # the last phase ended: nothing more starts
        self.drains: list[Drain] = []
        self.on_begin: list[Callable[[int, int], None]] = []  # (phase, start_ns)
        self._lo = t0_ns
        self._hi = self._known_end()

    # ------------------------------------------------------------------------------- queries

    @property
    def end_unknown(self) -> bool:
        """The current phase ends at a session start not made yet (its count bound)."""
        if self.drain_pending or self.finished:
            return False
        phase = self.phases[self.index]
        return phase.max_sessions is not None and self.started < phase.max_sessions

    def phase_at(self, t_ns: int) -> int:
        """The phase whose window holds ``t_ns``, as far as boundaries are known: a time past
        the current phase's known end is in the phase(s) that will follow it."""
        if self._lo <= t_ns < self._hi:
            return self.index
        if t_ns < self._lo:
            return max(0, bisect_right(self.starts, t_ns) - 1)
        index, end = self.index, self._hi
        while t_ns >= end and index + 1 < len(self.phases) and not self.phases[index].drain:
            index += 1
            following = self.phases[index]
            if following.max_sessions is not None or following.duration_ns is None:
                break
            end += following.duration_ns
        return index

    def windows(self, t0_ns: int, end_ns: int) -> list[dict[str, object]]:
        """Each phase begun: name, start and end (seconds since ``t0_ns``; the last ends at
        ``end_ns``), and for a drained phase when its arrivals stopped (``arrivals_end``) and
        how long the drain lasted (``drain_s``)."""
        starts = self.starts
        drains = {drain.phase: drain for drain in self.drains}
        windows: list[dict[str, object]] = []
        for index, start in enumerate(starts):
            end = starts[index + 1] if index + 1 < len(starts) else max(end_ns, start)
            window: dict[str, object] = {
                "name": self.phases[index].name,
                "start": (start - t0_ns) / _S,
                "end": (end - t0_ns) / _S,
            }
            drain = drains.get(index)
            if drain is not None:
                window["arrivals_end"] = (drain.ended_ns - t0_ns) / _S
                resumed = drain.resumed_ns if drain.resumed_ns is not None else end
                window["drain_s"] = max(0, resumed - drain.ended_ns) / _S
            windows.append(window)
        return windows

    # ------------------------------------------------------------------------------- events

    def advance_to(self, t_ns: int) -> None:
        """End every phase whose end is at or before ``t_ns``."""
        while self.advance_one(t_ns):
            pass

    def advance_one(self, t_ns: int) -> bool:
        """End the current phase if its end is at or before ``t_ns`` (one boundary, not the
        ones after it); whether it ended."""
        if self.drain_pending or self.finished or t_ns < self._hi:
            return False
        self._end(self._hi)
        return True

    def start_session(self, t_ns: int) -> int:
        """A session starts at ``t_ns``: returns its phase (ending phases it lies beyond)."""
        self.advance_to(t_ns)
        index = self.index
        self.started += 1
        self._last_start = t_ns
        phase = self.phases[index]
        if phase.max_sessions is not None and self.started == phase.max_sessions:
            self._hi = self._known_end()
        return index

    def resume(self, at_ns: int) -> None:
        """The drain ended at ``at_ns``: the next phase begins."""
        if not self.drain_pending:
            return
        self.drain_pending = False
        self.drains[-1].resumed_ns = at_ns
        self._begin(at_ns)

    # ------------------------------------------------------------------------------ internals

    def _known_end(self) -> int:
        phase = self.phases[self.index]
        if phase.duration_ns is None and phase.max_sessions is None:
            return _NEVER
        end = 0
        if phase.duration_ns is not None:
            end = self.starts[self.index] + phase.duration_ns
        if phase.max_sessions is not None:
            if self.started < phase.max_sessions:
                return _NEVER
            end = max(end, self._last_start + 1)  # just after its last session started
        return end

    def _end(self, at_ns: int) -> None:
        phase = self.phases[self.index]
        if self.index + 1 >= len(self.phases):
            self.finished = True
            self._hi = _NEVER  # later requests of its sessions are still the last phase's
            return
        if phase.drain:
            self.drain_pending = True
            self._hi = _NEVER  # the drain is the phase's
            self.drains.append(Drain(self.index, at_ns))
            return
        self._begin(at_ns)

    def _begin(self, at_ns: int) -> None:
        self.index += 1
        self.starts.append(at_ns)
        self.started = 0
        self._last_start = at_ns
        self._lo = at_ns
        self._hi = self._known_end()
        for callback in self.on_begin:
            callback(self.index, at_ns)


class PhasedArrivals:
    """Open-loop arrival times across phases (see the module docstring).

    ``gaps_for(i)`` is phase i's gap sampler, ``mean_gap_s[i]`` its mean gap and ``keys[i]``
    its scheduler: equal keys of consecutive phases mean one arrival process. ``warp`` ramps
    the rate of the process that starts at t0 (``RateArrivals``); a scenario with a ramp has
    one process (the loader refuses a ramp with phases; a warmup shares the measured's).
    """

    __slots__ = (
        "_gaps_for",
        "_keys",
        "_mean",
        "_next",
        "_samplers",
        "_seg",
        "_seg_phase",
        "timeline",
    )

    def __init__(
        self,
        timeline: PhaseTimeline,
        gaps_for: Callable[[int], Callable[[int], NDArray[np.float64]]],
        mean_gap_s: Sequence[float],
        keys: Sequence[Hashable],
        warp: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None = None,
    ) -> None:
        self.timeline = timeline
        self._gaps_for = gaps_for
        self._mean = tuple(mean_gap_s)
        self._keys = tuple(keys)
        self._samplers: dict[int, Callable[[int], NDArray[np.float64]]] = {}
        self._seg_phase = 0
        self._seg = RateArrivals(self._sampler(0), timeline.starts[0], warp=warp)
        self._next: int | None = None

    def _sampler(self, phase: int) -> Callable[[int], NDArray[np.float64]]:
        """One sampler per run of equal schedulers (the first phase of the run owns it)."""
        owner = phase
        while owner > 0 and self._keys[owner - 1] == self._keys[phase]:
            owner -= 1
        sampler = self._samplers.get(owner)
        if sampler is None:
            sampler = self._samplers[owner] = self._gaps_for(owner)
        return sampler

    def peek_ns(self) -> int | None:
        """The next arrival, or None while draining and after the last phase."""
        if self._next is None:
            self._next = self._generate()
        return self._next

    def pop(self) -> tuple[int, int]:
        """Consume the next arrival: (its time, its phase). Only after ``peek_ns`` gave one."""
        t = self.peek_ns()
        assert t is not None
        self._next = None
        return t, self.timeline.start_session(t)

    def resume(self, at_ns: int) -> None:
        """After a drain: the next phase begins at ``at_ns``, its first session then."""
        self.timeline.resume(at_ns)
        self._restart(self.timeline.index, at_ns)

    def _restart(self, phase: int, first_ns: int) -> None:
        self._seg_phase = phase
        self._seg = RateArrivals(self._sampler(phase), first_ns)
        self._next = None

    def _generate(self) -> int | None:
        # One boundary at a time: a gap that crosses several phases (a slow warmup's gap
        # beyond short phases after it) is rescaled at each, so no phase is skipped.
        timeline = self.timeline
        while True:
            if timeline.drain_pending or timeline.finished:
                return None
            candidate = self._seg.peek_ns()
            phase = timeline.index
            if phase != self._seg_phase and self._keys[phase] != self._keys[self._seg_phase]:
                boundary = timeline.starts[phase]
                old, new = self._mean[self._seg_phase], self._mean[phase]
                beyond = candidate - boundary
                # (at most MAX_SECONDS beyond: a slow phase's mean, 1e300 s, made it infinite)
                scaled = 0.0 if old <= 0 else min(beyond * new / old, _MAX_BEYOND_NS)
                self._restart(phase, boundary + round(scaled))
                continue
            self._seg_phase = phase
            if not timeline.advance_one(candidate):
                return self._seg.pop_ns()
