"""The settings of ``veeksha stress``: which load levels, how long each point lasts.

The load is either a closed loop (``traffic: concurrency``: that many requests in flight) or an
open loop (``traffic: rate``: Poisson arrivals, that many requests per second). The levels come
from one of three modes:

- ``manual``: the levels given, ``concurrencies: [1, 2, 4]`` or ``rates: [2, 4, 8]`` (which list
  is given sets ``traffic``);
- ``range``: ``num_levels`` levels log-spaced from ``min_level`` to ``max_level``;
- ``auto``: from ``min_level``, double until the output throughput grows by less than
  ``auto_threshold`` (or ``max_level`` is passed), then ``fill_points`` levels inside the knee
  (``veeksha.experiment.microbench.stress_levels``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from veeksha.experiment.microbench.config import BenchConfig, refuse_embeddings

__all__ = ["StressConfig"]

#: manual concurrencies when none are given (full, --quick)
DEFAULT_CONCURRENCIES = [1, 2, 4, 8, 16, 32]
QUICK_CONCURRENCIES = [1, 2, 4, 8]


class StressConfig(BenchConfig):
    """``veeksha stress``: a throughput–latency curve, one timed point per load level."""

    QUICK: ClassVar[dict[str, Any]] = {
        "input_length": 128,
        "output_length": 32,
        "point_duration": 3.0,
        "warmup_duration": 1.0,
        "min_samples": 10,
        "max_level": 16,
        "num_levels": 4,
        "output_dir": "stress_output",
    }
    FULL: ClassVar[dict[str, Any]] = {
        "input_length": 512,
        "output_length": 128,
        "point_duration": 20.0,
        "warmup_duration": 5.0,
        "min_samples": 20,
        "max_level": 64,
        "num_levels": 6,
        "output_dir": "stress_output",
    }

    mode: Literal["manual", "range", "auto"] = Field(
        "manual", description="How the levels are chosen: manual, range or auto."
    )
    traffic: Literal["concurrency", "rate"] | None = Field(
        None,
        description="Load knob: concurrency (closed loop) or rate (Poisson, requests/s); "
        "manual: set by which list is given; else concurrency.",
    )
    concurrencies: list[int] | None = Field(
        None, description=f"manual: requests in flight per level (default {DEFAULT_CONCURRENCIES})."
    )
    rates: list[float] | None = Field(None, description="manual: requests per second per level.")
    min_level: float = Field(1.0, gt=0, description="range, auto: the first level.")
    max_level: float | None = Field(None, gt=0, description="range: the last level; auto: cap.")
    num_levels: int | None = Field(None, ge=2, description="range: how many levels.")
    auto_threshold: float = Field(
        0.10, gt=0, description="auto: stop doubling when output throughput grows less than this."
    )
    fill_points: int = Field(2, ge=0, description="auto: levels added inside the knee.")
    input_length: int | None = Field(None, ge=1, description="Prompt tokens of every request.")
    output_length: int | None = Field(None, ge=2, description="Output tokens of every request.")
    point_duration: float | None = Field(
        None, gt=0, description="Seconds of each point's measured phase (after its warmup)."
    )
    warmup_duration: float | None = Field(
        None, ge=0, description="Seconds of each point's warmup, left out of every figure."
    )
    min_samples: int | None = Field(
        None, ge=1, description="Measured ok requests a point needs (the enough_samples check)."
    )

    @model_validator(mode="after")
    def _check_levels(self) -> StressConfig:
        refuse_embeddings(self.client_type, "stress")
        if self.concurrencies is not None and self.rates is not None:
            raise ValueError("rates: give concurrencies or rates, not both")
        given: Literal["concurrency", "rate"] = "rate" if self.rates is not None else "concurrency"
        if self.mode == "manual":
            if self.traffic is not None and self.traffic != given:
                wanted = "rates" if self.traffic == "rate" else "concurrencies"
                raise ValueError(
                    f"traffic: {self.traffic} in manual mode takes its levels from {wanted}"
                )
            self.traffic = given
            if self.rates is None and self.concurrencies is None:
                self.concurrencies = list(
                    QUICK_CONCURRENCIES if self.quick else DEFAULT_CONCURRENCIES
                )
            levels = self.levels_given()
            if not levels:
                raise ValueError(f"{given}: give at least one level")
            if any(level <= 0 for level in levels):
                raise ValueError(f"{self.level_key()}: every level must be > 0 (got {levels})")
        else:
            self.traffic = self.traffic or "concurrency"
            if self.concurrencies is not None or self.rates is not None:
                raise ValueError(
                    f"mode: {self.mode} chooses its levels; concurrencies and rates are for "
                    "mode manual (use min_level and max_level)"
                )
            assert self.max_level is not None
            if self.max_level < self.min_level:
                raise ValueError(f"max_level: {self.max_level} is below min_level {self.min_level}")
        assert self.point_duration is not None
        assert self.warmup_duration is not None
        limit = self.context_limit()
        assert self.input_length is not None
        assert self.output_length is not None
        if limit and self.input_length + self.output_length > limit:
            raise ValueError(
                f"input_length: {self.input_length} plus {self.output_length} output tokens "
                f"exceed the model context of {limit} tokens; use shorter lengths (or set "
                "max_model_len to the server's context)"
            )
        return self

    def levels_given(self) -> list[float]:
        """The manual levels (concurrencies or rates)."""
        return [
            float(v) for v in (self.rates if self.traffic == "rate" else self.concurrencies) or ()
        ]

    def level_key(self) -> str:
        """The key naming the manual levels: ``concurrencies`` or ``rates``."""
        return "rates" if self.traffic == "rate" else "concurrencies"

    @property
    def integer_levels(self) -> bool:
        """Concurrency levels are whole requests; rates are not."""
        return self.traffic == "concurrency"
