"""The run's runtime: stop conditions, workers, CPU affinity, warmup, the Ray cluster, and the
trace recorder."""

import re
import warnings
from typing import Annotated, Literal, Self

from pydantic import Field, field_validator, model_validator

from veeksha.scenario.base import KeyProblem, Seconds, StrictModel

# ---------------------------------------------------------------------------------------- runtime

_IGNORED_THREAD_KEYS = ("num_dispatcher_threads", "num_completion_threads", "num_client_threads")


_ADDRESS = re.compile(r"^(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class Distributed(StrictModel):
    """One experiment on several hosts through a Ray cluster (docs/distributed.md).

    Read by the driver (``veeksha run --ray``); the engine itself ignores it: each shard runs
    the scenario as written, its share of the sessions (``veeksha.schedule.shards``).
    """

    backend: Literal["ray"] = Field("ray", description="The cluster runtime: ray.")
    address: str = Field(
        "auto",
        description="auto (the running cluster: RAY_ADDRESS, else the local one), local (start"
        " a cluster for this run), or the head's host:port (ray://host:port for Ray Client).",
    )
    shards: int | None = Field(
        None, ge=1, description="Shards (engines, each on one node); null: one per node."
    )
    workers_per_shard: int | None = Field(
        None,
        ge=1,
        description="Worker processes of each shard; null: runtime.num_workers on its node.",
    )

    @field_validator("address")
    @classmethod
    def _address(cls, value: str) -> str:
        if value in ("auto", "local"):
            return value
        match = _ADDRESS.match(value)
        if match is None or not 0 < int(match.group(3)) < 65536:
            raise ValueError(
                f"{value!r} is not auto, local, host:port or ray://host:port (e.g. 10.0.0.5:6379)"
            )
        return value


class Runtime(StrictModel, defer_build=False):
    """Stop conditions, workers, CPU affinity and warmup."""

    max_sessions: int = Field(25, ge=-1, description="Sessions to start; -1 unlimited.")
    benchmark_timeout: Seconds = Field(
        300.0,
        description=(
            "Stop starting new work this many seconds after the first measured session"
            " started (a warmup not counted); <= 0 disables."
        ),
    )
    post_timeout_grace_seconds: Seconds = Field(
        -1.0,
        ge=-1,
        description="After the timeout: -1 wait for all in flight, 0 stop at once, N wait N s.",
    )
    num_workers: int | Literal["auto"] = Field(
        "auto", description="HTTP worker processes; auto = one per core beyond the main one."
    )
    cpu_affinity: Literal["auto", "off"] | list[Annotated[int, Field(ge=0)]] = Field(
        "auto", description="auto (topology plan), off, or CPU ids (first = main process)."
    )
    warmup_sessions: int = Field(0, ge=0, description="Sessions of an untracked warmup phase.")
    warmup_seconds: Seconds = Field(0.0, ge=0, description="Seconds of an untracked warmup phase.")
    pregenerate_sessions: bool = Field(
        False, description="Generate all sessions before t0 (needs max_sessions > 0)."
    )
    dispatch_ahead_ms: float = Field(
        20.0,
        ge=0,
        le=1000,
        description=(
            "Hand requests to their worker up to this many ms before they are ready; the worker"
            " sends each at its ready time on a precise timer. 0 = hand over when ready."
        ),
    )
    chunk_timestamps: Literal["kernel", "read"] = Field(
        "kernel",
        description="A chunk's time: kernel (when its bytes reached the socket, the kernel's "
        "receive timestamp; Linux, plain http; the worker's CPU a request +7-19 %) or read (when "
        "the worker read them).",
    )
    priority: Literal["fifo", "progress", "node"] = Field(
        "fifo",
        description="Order of ready requests waiting for a capped client's slot: fifo (ready "
        "time), progress (re-prompts, further sessions, older sessions, lower rounds first) "
        "or node (the nodes' priority field, higher first).",
    )
    max_errors: int | None = Field(
        None,
        ge=1,
        description="Stop the run once this many requests have failed (error or timeout; an "
        "abandoned or cancelled one is not a failure): a server that died is not benchmarked "
        "for the rest of the run; exit 3. null: never.",
    )
    max_error_rate: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Stop the run once more than this share of the last error_rate_window "
        "requests that ended (answered or failed) failed; exit 3. null: never.",
    )
    error_rate_window: int = Field(
        100, ge=1, description="Requests max_error_rate is judged over (the latest that ended)."
    )
    distributed: Distributed | None = Field(
        None,
        description="Run on a Ray cluster: {backend: ray, address, shards, workers_per_shard}"
        " (docs/distributed.md); null: one host.",
    )
    num_dispatcher_threads: int | None = Field(None, description="Accepted and ignored.")
    num_completion_threads: int | None = Field(None, description="Accepted and ignored.")
    num_client_threads: int | None = Field(None, description="Accepted and ignored.")

    @field_validator("max_sessions")
    @classmethod
    def _sessions_or_unlimited(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be at least 1, or -1 for no limit")
        return value

    @field_validator("num_workers")
    @classmethod
    def _positive_workers(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be at least 1 or 'auto'")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if self.max_sessions == -1 and self.benchmark_timeout <= 0:
            raise KeyProblem(
                "-1 (unlimited) needs a benchmark_timeout > 0",
                "max_sessions",
                "benchmark_timeout",
            )
        if self.pregenerate_sessions and self.max_sessions < 0:
            raise KeyProblem(
                "needs max_sessions > 0 (got -1, unlimited)", "pregenerate_sessions", "max_sessions"
            )
        for key in _IGNORED_THREAD_KEYS:
            if getattr(self, key) is not None:
                warnings.warn(
                    f"runtime.{key} is ignored: veeksha uses worker processes, not threads",
                    UserWarning,
                    stacklevel=2,
                )
        return self


# ------------------------------------------------------------------------------- trace recorder


class TraceRecorder(StrictModel, defer_build=False):
    """trace.jsonl: one line per dispatched request with its session context."""

    enabled: bool = Field(True, description="Write trace.jsonl.")
    include_content: bool = Field(
        False,
        description="Also write the messages sent (prompt text and history) in trace.jsonl, "
        "and each answer's text in requests.parquet's output_text.",
    )
