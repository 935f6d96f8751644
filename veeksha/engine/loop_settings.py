"""What the traffic loop needs from the scenario, resolved (``LoopSettings``), and how those
settings are made: the default phases of a run that names none, and a closed-loop shard's
share of each session count."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from veeksha.engine.error_budget import ErrorBudget
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhaseBounds
from veeksha.schedule.shards import ShardSpec, concurrency_share

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["LoopSettings", "default_phases", "shard_closed_loop"]

_NS = 1_000_000_000


@dataclass(slots=True)
class LoopSettings:
    """What the loop needs from the scenario, already resolved."""

    cancel_on_failure: bool
    max_sessions: int  # measured sessions; -1 = unlimited
    warmup_sessions: int = 0
    warmup_seconds: float = 0.0
    benchmark_timeout_s: float = 0.0  # <= 0 disables
    max_in_flight: int | None = None
    rate_gaps: Callable[[int], NDArray[np.float64]] | None = None  # open loop when set
    concurrency: ConcurrencyRamp | None = None  # closed loop when set
    # Open loop: a ramped rate's map of the summed gaps to arrival offsets (schedule/ramp.py)
    rate_warp: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None = None
    # Hand requests over up to this long before they are ready (WorkItem.not_before_ns); the
    # dispatcher releases each at its ready time. 0: hand over when ready.
    dispatch_ahead_ns: int = 0
    # Sessions that exist at all (all phases; a trace that does not wrap); None: no end.
    session_limit: int | None = None
    # The run's phases; None: a warmup (from warmup_sessions / warmup_seconds), then measured.
    phases: Sequence[PhaseBounds] | None = None
    # Open loop per phase: phase i's gap sampler (default: rate_gaps), mean gap and scheduler
    # key (equal keys of consecutive phases: one arrival process).
    phase_gaps: Callable[[int], Callable[[int], NDArray[np.float64]]] | None = None
    phase_mean_gaps: Sequence[float] = ()
    phase_keys: Sequence[Hashable] = ()
    # Closed loop per phase: (target, rampup seconds); default: concurrency's, for every phase.
    phase_targets: Sequence[tuple[int, float]] = field(default_factory=tuple)
    # In-flight slots per client (NodeSpec.client), None: uncapped; and how requests waiting
    # for a slot are ordered (schedule/slots.py). None: no client is capped.
    client_caps: list[int | None] | None = None
    priority: str = "fifo"
    # The failures the run accepts before it stops (runtime.max_errors, max_error_rate); None:
    # it never stops for them.
    error_budget: ErrorBudget | None = None


def default_phases(settings: LoopSettings) -> list[PhaseBounds]:
    """The phases of a run that names none: a warmup (when set), then ``measured``."""
    phases = []
    if settings.warmup_sessions or settings.warmup_seconds:
        duration = round(settings.warmup_seconds * _NS) or None
        phases.append(PhaseBounds("warmup", duration, settings.warmup_sessions or None))
    phases.append(PhaseBounds("measured"))
    return phases


def shard_closed_loop(settings: LoopSettings, shard: ShardSpec) -> LoopSettings:
    """A closed-loop shard's settings: each session count (a phase's ``max_sessions``, the
    measured ``max_sessions``) becomes the count of the shard's own indexes in that phase's
    range of global indexes (``veeksha.schedule.shards``). A range is known when every phase
    before it is bounded by a count; after a phase bounded by time alone, the shard's share of
    the count is taken (the shards may then differ by one from the single-host split)."""
    phases = list(settings.phases or default_phases(settings))
    first: int | None = 0  # global index of the current phase's first session, when known
    warmup = 0  # global sessions of the leading warmup phase(s), when known
    bounded: list[PhaseBounds] = []
    for phase in phases:
        count = phase.max_sessions
        if count is None:
            first = None
            bounded.append(phase)
            continue
        base = first or 0
        share = concurrency_share(base + count, shard) - concurrency_share(base, shard)
        if phase.name == "warmup" and first is not None:
            warmup = first + count
        first = None if first is None else first + count
        bounded.append(PhaseBounds(phase.name, phase.duration_ns, share, phase.drain))
    limit = settings.max_sessions
    if limit >= 0:
        limit = concurrency_share(warmup + limit, shard) - concurrency_share(warmup, shard)
    return dataclasses.replace(settings, phases=bounded, max_sessions=limit)
