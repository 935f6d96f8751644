"""The knob a capacity search varies, found from the scenario's traffic scheduler.

- ``rate`` scheduler: sessions per second. A ``poisson`` or ``gamma`` interval generator gets the
  value as its ``arrival_rate``; a ``fixed`` one gets ``interval = 1 / value``.
- ``concurrent`` scheduler: ``target_concurrent_sessions`` (an integer; the scenario's own
  ``rampup_seconds`` is kept).
- ``trace`` scheduler: no knob (the trace's own timeline); refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from veeksha.scenario.models import (
    ConcurrentScheduler,
    FixedInterval,
    RateScheduler,
    Scenario,
)

__all__ = ["Knob", "knob_of"]


@dataclass(frozen=True, slots=True)
class Knob:
    """What is searched: the scheduler kind and the key path that receives the value."""

    scheduler: Literal["rate", "concurrent"]
    path: str

    @property
    def integer(self) -> bool:
        return self.scheduler == "concurrent"

    @property
    def inverse(self) -> bool:
        """The key holds the gap between sessions, 1 / value (a ``fixed`` interval generator):
        the value searched is still a rate."""
        return self.path.endswith(".interval")

    @property
    def title(self) -> str:
        """What the value is, for the search's first line and the plot's axis."""
        if self.inverse:
            return f"the session rate ({self.path} = 1 / rate)"
        return self.path

    def describe(self, value: float) -> str:
        """``value`` as a probe line names it: ``arrival_rate=8``, ``rate=8/s (interval
        0.125 s)``."""
        if self.inverse:
            return f"rate={value:g}/s (interval {1.0 / value:.4g} s)"
        return f"{self.path.rsplit('.', 1)[-1]}={value:g}"

    def apply(self, scenario: Scenario, value: float) -> Scenario:
        """``scenario`` with the knob set to ``value``."""
        traffic = scenario.traffic_scheduler
        if isinstance(traffic, ConcurrentScheduler):
            traffic = traffic.model_copy(update={"target_concurrent_sessions": round(value)})
        elif isinstance(traffic, RateScheduler):
            gaps = traffic.interval_generator
            update = (
                {"interval": 1.0 / value}
                if isinstance(gaps, FixedInterval)
                else {"arrival_rate": float(value)}
            )
            traffic = traffic.model_copy(
                update={"interval_generator": gaps.model_copy(update=update)}
            )
        return scenario.model_copy(update={"traffic_scheduler": traffic})


def knob_of(scenario: Scenario) -> Knob | None:
    """The knob of ``scenario``'s scheduler, or None (a trace scheduler has none)."""
    traffic = scenario.traffic_scheduler
    if isinstance(traffic, ConcurrentScheduler):
        return Knob("concurrent", "traffic_scheduler.target_concurrent_sessions")
    if isinstance(traffic, RateScheduler):
        if isinstance(traffic.interval_generator, FixedInterval):
            return Knob("rate", "traffic_scheduler.interval_generator.interval")
        return Knob("rate", "traffic_scheduler.interval_generator.arrival_rate")
    return None
