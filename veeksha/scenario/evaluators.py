"""Judging a run: performance evaluators with their SLOs, and the health checks' thresholds."""

from typing import Annotated, Literal

from pydantic import Field

from veeksha.scenario.base import MAX_SECONDS, StrictModel, empty_list

# ------------------------------------------------------------------------------------ evaluators


class SLO(StrictModel):
    """A service-level objective: the metric's percentile must be at most value (seconds)."""

    name: str = Field(..., description="Label shown in reports.")
    metric: Literal["ttfc", "answer_ttfc", "tbc", "tpot", "e2e", "normalized_e2e"] = Field(
        ...,
        description="Latency metric the objective is about (answer_ttfc: a reasoning model's"
        " time to its answer, docs/metrics.md).",
    )
    percentile: float = Field(..., ge=0, le=1, description="Quantile in [0, 1], e.g. 0.99.")
    value: float = Field(..., gt=0, description="Threshold in seconds.")
    type: Literal["constant"] = Field("constant", description="Threshold kind.")


class PerformanceEvaluator(StrictModel, defer_build=False):
    """Latency and throughput metrics over the measured phase, with SLOs."""

    type: Literal["performance"] = "performance"
    target_channels: list[Literal["text"]] = Field(
        default_factory=lambda: list[Literal["text"]](["text"]), description="Channels evaluated."
    )
    stream_metrics: bool = Field(True, description="Print periodic metrics while running.")
    stream_metrics_interval: float = Field(5.0, gt=0, description="Seconds between them.")
    slos: list[SLO] = Field(
        default_factory=empty_list, description="Objectives judged after the run."
    )
    timeslice_seconds: float | None = Field(
        None,
        gt=0,
        le=MAX_SECONDS,
        description="Cut the measured window into slices this long, each with its throughput "
        "and latency (summary.json timeslices, metrics/timeslices.csv); null: none.",
    )


Evaluator = Annotated[PerformanceEvaluator, Field(discriminator="type")]


# --------------------------------------------------------------------------------- health checks


class HealthChecks(StrictModel, defer_build=False):
    """Thresholds of the checks that prove the benchmark itself behaved."""

    dispatch_rate_tolerance: float = Field(
        0.15, gt=0, description="Max |observed − configured| / configured session rate."
    )
    arrival_ks_alpha: float = Field(
        0.01, gt=0, lt=1, description="Significance of the KS test of inter-arrival times."
    )
    late_threshold_s: float = Field(
        5.0, gt=0, description="No request dispatched later than this after it became ready."
    )
    prompt_length_tolerance: int = Field(
        15, ge=0, description="Tokens, actual vs target new prompt tokens."
    )
    output_length_tolerance: int = Field(
        15, ge=0, description="Tokens, actual vs requested output tokens."
    )
    max_dispatch_lag_p99_ms: float = Field(
        5.0, gt=0, description="Generator saturation: p99 of (sent − ready) in ms."
    )
    clock_sync_share: float = Field(
        0.1,
        gt=0,
        description="Distributed runs: max clock error of a shard (offset uncertainty or drift)"
        " as a share of the measured TTFC p50.",
    )
    clock_sync_floor_ms: float = Field(
        1.0,
        ge=0,
        description="Distributed runs: a clock error up to this many ms always passes.",
    )
    strict: bool = Field(False, description="A failed check makes `veeksha run` exit non-zero.")
