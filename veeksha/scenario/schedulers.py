"""Traffic schedulers: when sessions start (open loop, closed loop, trace times)."""

from typing import Annotated, Literal

from pydantic import Field

from veeksha.scenario.base import StrictModel, factory
from veeksha.scenario.generators import IntervalGenerator, PoissonInterval

# ----------------------------------------------------------------------------- traffic schedulers


class RateScheduler(StrictModel, defer_build=False):
    """Open loop: sessions start on an absolute timeline of gaps from the interval generator."""

    type: Literal["rate"] = "rate"
    interval_generator: IntervalGenerator = Field(
        default_factory=factory(PoissonInterval), description="Gaps between session starts."
    )
    cancel_session_on_failure: bool = Field(
        True, description="A failed request cancels the rest of its session."
    )


class ConcurrentScheduler(StrictModel):
    """Closed loop: keep a number of sessions active, growing linearly during ramp-up."""

    type: Literal["concurrent"] = "concurrent"
    target_concurrent_sessions: int = Field(3, ge=1, description="Sessions active at once.")
    rampup_seconds: float = Field(
        10.0, ge=0, description="target(t) = floor(target × t / rampup) until t ≥ rampup."
    )
    cancel_session_on_failure: bool = Field(
        True, description="A failed request cancels the rest of its session."
    )


class TraceScheduler(StrictModel):
    """Open loop at the trace's own arrival times (needs session_generator type trace)."""

    type: Literal["trace"] = "trace"
    speedup: float = Field(
        1.0, gt=0, description="Time scale: 2.0 replays the trace twice as fast."
    )
    start_offset: float = Field(
        0.0, ge=0, description="Trace seconds skipped from its first arrival."
    )
    max_duration: float | None = Field(
        None, gt=0, description="Trace seconds replayed from start_offset (default: all)."
    )
    turn_timing: Literal["after_answer", "timestamps"] = Field(
        "after_answer",
        description=(
            "When a session's later requests leave: after_answer, when the requests they"
            " follow have answered plus their think time; timestamps, also no sooner than"
            " their own row's timestamp (mapped as the session starts are)."
        ),
    )
    cancel_session_on_failure: bool = Field(
        True, description="A failed request cancels the rest of its session."
    )


TrafficScheduler = Annotated[
    RateScheduler | ConcurrentScheduler | TraceScheduler, Field(discriminator="type")
]
