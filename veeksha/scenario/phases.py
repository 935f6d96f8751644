"""Phases of one run: the checks between keys that a phase list needs, and its resolution.

A run is a sequence of phases (``Scenario.phases``). Each phase has a name, a length (``duration``
seconds or ``max_sessions`` sessions started in it), an optional ``drain`` and overrides of the
run's traffic scheduler. ``resolve_phases`` turns a scenario into ``PhaseSpec``s, each with its
own complete scheduler; a scenario without ``phases`` resolves to today's two phases: ``warmup``
(when ``runtime.warmup_sessions`` / ``warmup_seconds`` are set) and ``measured``.

Which scheduler keys may change between phases:

- rate: anything of ``interval_generator`` (its law, rate, cv or shape; ``arrival_rate`` and
  ``interval`` are shortcuts for its rate and fixed gap);
- concurrent: ``target_concurrent_sessions`` (shortcut too) and ``rampup_seconds`` (how fast
  the target moves from the previous phase's to this one's);
- never: ``type`` (an open loop stays open, a closed loop closed: one run is one policy) and
  ``cancel_session_on_failure`` (a session may cross phases; one rule holds for it);
- a ``trace`` scheduler replays the trace's own times: it takes no phases;
- a rate ``ramp`` runs over the whole run from t0: it takes no phases (neither the base
  scheduler's nor a phase's own).

``phase_issues`` returns every problem as (key path, message); the loader turns each into
``file:line:col: path: message``, and the engine refuses a scenario with issues the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from veeksha.scenario._walk import PathPart
from veeksha.scenario.messages import value_message
from veeksha.scenario.models import (
    ConcurrentScheduler,
    FixedInterval,
    Phase,
    RateScheduler,
    Scenario,
    TraceScheduler,
)

__all__ = [
    "MEASURED",
    "WARMUP",
    "PhaseIssue",
    "PhaseSpec",
    "phase_issues",
    "resolve_phases",
    "scheduler_of",
]

WARMUP = "warmup"
MEASURED = "measured"
_FIXED_KEYS = ("type", "cancel_session_on_failure")

_RAMP_WITH_PHASES = (
    "a ramp cannot be combined with phases: remove traffic_scheduler.ramp or phases"
    " (a ramp runs from t0 over the whole run; give each phase its own rate instead)"
)

PhaseIssue = tuple[tuple[PathPart, ...], str]
Scheduler = RateScheduler | ConcurrentScheduler


@dataclass(frozen=True, slots=True)
class PhaseSpec:
    """One resolved phase: its bounds (None: unbounded) and its complete scheduler.

    A phase ends when every bound it has is met (a user's phase has one; the warmup of
    ``runtime.warmup_sessions`` plus ``warmup_seconds`` has both, as it always had).
    """

    name: str
    scheduler: Scheduler
    duration_s: float | None = None
    max_sessions: int | None = None
    drain: bool = False

    @property
    def warmup(self) -> bool:
        return self.name == WARMUP

    @property
    def bounded(self) -> bool:
        return self.duration_s is not None or self.max_sessions is not None


def scheduler_of(base: Scheduler, phase: Phase) -> tuple[Scheduler | None, list[PhaseIssue]]:
    """The scheduler ``phase`` runs: ``base`` with the phase's overrides (or the issues)."""
    issues: list[PhaseIssue] = []
    data = base.model_dump()
    override = dict(phase.traffic_scheduler)
    for key in _FIXED_KEYS:
        if key in override and override[key] != data[key]:
            why = (
                "an open loop stays open and a closed loop closed within one run"
                if key == "type"
                else "a session may cross phases, so one rule holds for all"
            )
            issues.append((("traffic_scheduler", key), f"cannot change between phases: {why}"))
            override.pop(key)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            if "type" in value and value["type"] != data[key].get("type"):
                data[key] = dict(value)  # another law: its own keys only
            else:
                data[key] = {**data[key], **value}
        else:
            data[key] = value
    if phase.arrival_rate is not None or phase.interval is not None:
        if not isinstance(base, RateScheduler):
            key = "arrival_rate" if phase.arrival_rate is not None else "interval"
            issues.append(((key,), "needs traffic_scheduler type rate"))
        else:
            gen = data.get("interval_generator") or {}
            fixed = gen.get("type") == "fixed"
            if phase.arrival_rate is not None:
                if fixed:
                    issues.append(
                        (("arrival_rate",), "the interval generator is fixed: give interval")
                    )
                else:
                    data["interval_generator"] = {**gen, "arrival_rate": phase.arrival_rate}
            if phase.interval is not None:
                if not fixed:
                    issues.append(
                        (("interval",), "the interval generator is not fixed: give arrival_rate")
                    )
                else:
                    data["interval_generator"] = {**gen, "interval": phase.interval}
    if phase.target_concurrent_sessions is not None:
        if not isinstance(base, ConcurrentScheduler):
            issues.append(
                (("target_concurrent_sessions",), "needs traffic_scheduler type concurrent")
            )
        else:
            data["target_concurrent_sessions"] = phase.target_concurrent_sessions
    try:
        scheduler = type(base).model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if p not in ("poisson", "gamma", "fixed"))
            message = value_message(err)
            if err["type"] == "extra_forbidden":
                message = f"not a key of a {base.type} scheduler"
            issues.append((("traffic_scheduler", *loc), message))
        return None, issues
    return scheduler, issues


def _burst(scheduler: object) -> str:
    """What makes a phase's scheduler start every session at one instant ('' if nothing): a
    fixed interval of 0, or a rate whose mean gap is under a nanosecond, the clock's step (a
    phase bounded by duration alone would then start sessions without end: its arrivals never
    reach its end)."""
    if not isinstance(scheduler, RateScheduler):
        return ""
    generator = scheduler.interval_generator
    if isinstance(generator, FixedInterval):
        return "a fixed interval of 0" if generator.interval == 0 else ""
    rate = generator.arrival_rate
    return f"an arrival rate of {rate:g}/s (gaps under a nanosecond)" if rate > 1e9 else ""


def phase_issues(scenario: Scenario) -> list[PhaseIssue]:
    """Every problem of the scenario's phases, each with the key path it concerns."""
    phases = scenario.phases
    runtime = scenario.runtime
    issues: list[PhaseIssue] = []
    burst = _burst(scenario.traffic_scheduler)
    if burst and runtime.warmup_seconds and not phases:
        # (the warmup is a phase of warmup_seconds: its arrivals never reach its end)
        issues.append(
            (
                ("runtime", "warmup_seconds"),
                f"{burst} starts every session at once, so a warmup of seconds never ends:"
                " give warmup_sessions instead",
            )
        )
    if not phases:
        return issues
    base = scenario.traffic_scheduler
    if isinstance(base, TraceScheduler):
        return [(("phases",), "a trace scheduler replays the trace's own times: no phases")]
    if isinstance(base, RateScheduler) and base.ramp is not None:
        issues.append((("traffic_scheduler", "ramp"), _RAMP_WITH_PHASES))
    seen: dict[str, int] = {}
    for i, phase in enumerate(phases):
        at: tuple[PathPart, ...] = ("phases", i)
        if phase.name in seen:
            issues.append(((*at, "name"), f"phase names must be unique ({phase.name!r} again)"))
        seen.setdefault(phase.name, i)
        if phase.name == WARMUP and i > 0:
            issues.append(((*at, "name"), "a warmup phase can only be the first phase"))
        both = phase.duration is not None and phase.max_sessions is not None
        if both:
            issues.append((at, "give one of duration and max_sessions, not both"))
        elif phase.duration is None and phase.max_sessions is None and i < len(phases) - 1:
            # (the last may be open: runtime.max_sessions or benchmark_timeout, one of which a
            # valid runtime always has, then ends the run)
            issues.append(
                (at, "needs duration or max_sessions (only the last phase may be open-ended)")
            )
        scheduler, own = scheduler_of(base, phase)
        issues += [((*at, *path), message) for path, message in own]
        if "ramp" in phase.traffic_scheduler and phase.traffic_scheduler["ramp"] is not None:
            issues.append(((*at, "traffic_scheduler", "ramp"), _RAMP_WITH_PHASES))
        burst = _burst(scheduler)
        if burst and phase.max_sessions is None:
            issues.append((at, f"{burst} starts all its sessions at once: give max_sessions"))
    if phases[0].name == WARMUP and (runtime.warmup_sessions or runtime.warmup_seconds):
        key = "warmup_sessions" if runtime.warmup_sessions else "warmup_seconds"
        issues.append(
            (("runtime", key), "the phases have a warmup phase already: remove one of them")
        )
    counts = [p.max_sessions for p in phases if p.name != WARMUP]
    if runtime.max_sessions > 0 and all(c is not None for c in counts):
        total = sum(c for c in counts if c is not None)
        if total > runtime.max_sessions:
            issues.append(
                (
                    ("runtime", "max_sessions"),
                    f"caps the run at {runtime.max_sessions} sessions but its phases start"
                    f" {total}: set -1 (the phases end the run) or shorten the phases",
                )
            )
    return issues


def resolve_phases(scenario: Scenario, extra_warmup_sessions: int = 0) -> list[PhaseSpec]:
    """The run's phases in order, each with its complete scheduler.

    ``extra_warmup_sessions`` (a trace's warmup, e.g. rag's documents) lengthen the warmup phase,
    which is made when the scenario has none. Raises ``ValueError`` on a scenario with issues.
    """
    base_sched: Any = scenario.traffic_scheduler  # (a trace scheduler: only the implicit phases)
    runtime = scenario.runtime
    warmup_sessions = runtime.warmup_sessions + extra_warmup_sessions
    warmup_seconds = runtime.warmup_seconds
    out: list[PhaseSpec] = []
    phases: Sequence[Phase] = scenario.phases
    if phases and phases[0].name == WARMUP:
        first, phases = phases[0], phases[1:]
        sched, issues = scheduler_of(base_sched, first)
        if issues or sched is None:
            raise ValueError(issues)
        sessions = first.max_sessions
        if extra_warmup_sessions:
            sessions = (sessions or 0) + extra_warmup_sessions
        out.append(PhaseSpec(WARMUP, sched, first.duration, sessions, first.drain))
    elif warmup_sessions or warmup_seconds:
        out.append(PhaseSpec(WARMUP, base_sched, warmup_seconds or None, warmup_sessions or None))
    if not phases:
        out.append(PhaseSpec(MEASURED, base_sched))
        return out
    for phase in phases:
        sched, issues = scheduler_of(base_sched, phase)
        if issues or sched is None:
            raise ValueError(issues)
        out.append(PhaseSpec(phase.name, sched, phase.duration, phase.max_sessions, phase.drain))
    return out
