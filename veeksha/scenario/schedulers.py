"""Traffic schedulers: when sessions start (open loop, closed loop, trace times)."""

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from veeksha.scenario.base import KeyProblem, Seconds, StrictModel, factory
from veeksha.scenario.generators import FixedInterval, IntervalGenerator, PoissonInterval

# ----------------------------------------------------------------------------- traffic schedulers


class RateRampConfig(StrictModel):
    """The arrival rate moves from the interval generator's rate to end_rate over duration
    seconds from t0, then holds end_rate (gaps keep their law, rescaled in time)."""

    end_rate: float = Field(..., gt=0, description="Sessions per second at the ramp's end.")
    duration: Seconds = Field(..., gt=0, description="Seconds from t0 to reach end_rate.")
    shape: Literal["linear", "exponential"] = Field(
        "linear",
        description=(
            "How the rate moves: linear, r0 + (end − r0)·t/duration; exponential,"
            " r0·(end/r0)^(t/duration)."
        ),
    )


class RateScheduler(StrictModel, defer_build=False):
    """Open loop: sessions start on an absolute timeline of gaps from the interval generator."""

    type: Literal["rate"] = "rate"
    interval_generator: IntervalGenerator = Field(
        default_factory=factory(PoissonInterval), description="Gaps between session starts."
    )
    ramp: RateRampConfig | None = Field(
        None,
        description=(
            "Move the rate from the interval generator's to ramp.end_rate during the run"
            " (default: a constant rate)."
        ),
    )
    cancel_session_on_failure: bool = Field(
        True, description="A failed request cancels the rest of its session."
    )

    @model_validator(mode="after")
    def _ramp_from_a_rate(self) -> Self:
        gen = self.interval_generator
        if self.ramp is not None and isinstance(gen, FixedInterval) and gen.interval == 0:
            raise KeyProblem(
                "a fixed interval of 0 has no start rate to ramp from: give interval > 0",
                "ramp",
            )
        return self


class ConcurrentScheduler(StrictModel):
    """Closed loop: keep a number of sessions active, growing linearly during ramp-up."""

    type: Literal["concurrent"] = "concurrent"
    target_concurrent_sessions: int = Field(3, ge=1, description="Sessions active at once.")
    rampup_seconds: Seconds = Field(
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
    start_offset: Seconds = Field(
        0.0, ge=0, description="Trace seconds skipped from its first arrival."
    )
    max_duration: Seconds | None = Field(
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
