"""The scenario's phases as the traffic loop runs them (``LoopSettings.phases`` and the
per-phase arrival samplers or concurrency targets). See ``veeksha.schedule.phases``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from veeksha.engine.loop import LoopSettings
from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.generate.distributions import make_interval_sampler, mean_interval
from veeksha.generate.rng import RandomStreams
from veeksha.scenario.models import ConcurrentScheduler, RateScheduler, Scenario
from veeksha.scenario.overrides import format_path
from veeksha.scenario.phases import phase_issues, resolve_phases
from veeksha.schedule.phases import PhaseBounds

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["apply_phases"]

_NS = 1_000_000_000


def apply_phases(settings: LoopSettings, scenario: Scenario, extra_warmup: int = 0) -> None:
    """Set ``settings``' phases from ``scenario`` (its rate or concurrency already set).

    A scenario built in code is checked here as the loader checks a file (exit 2, no run).
    """
    issues = phase_issues(scenario)
    if issues:
        raise ScenarioError(
            [ScenarioIssue("<scenario>", None, None, format_path(list(p)), m) for p, m in issues]
        )
    specs = resolve_phases(scenario, extra_warmup)
    settings.phases = [
        PhaseBounds(
            spec.name,
            None if spec.duration_s is None else round(spec.duration_s * _NS),
            spec.max_sessions,
            spec.drain,
        )
        for spec in specs
    ]
    schedulers = [spec.scheduler for spec in specs]
    if settings.rate_gaps is not None and all(isinstance(s, RateScheduler) for s in schedulers):
        first_gaps = settings.rate_gaps
        streams = RandomStreams(scenario.seed)

        def gaps_for(phase: int) -> Callable[[int], NDArray[np.float64]]:
            if phase == 0:
                return first_gaps  # the run's own stream: a run without phases is unchanged
            scheduler = schedulers[phase]
            assert isinstance(scheduler, RateScheduler)
            rng = streams.stream("arrivals", phase)
            return make_interval_sampler(scheduler.interval_generator, rng).sample

        settings.phase_gaps = gaps_for
        settings.phase_mean_gaps = [
            mean_interval(s.interval_generator) for s in schedulers if isinstance(s, RateScheduler)
        ]
        settings.phase_keys = [s.model_dump_json() for s in schedulers]
    elif settings.concurrency is not None:
        settings.phase_targets = [
            (s.target_concurrent_sessions, s.rampup_seconds)
            for s in schedulers
            if isinstance(s, ConcurrentScheduler)
        ]
