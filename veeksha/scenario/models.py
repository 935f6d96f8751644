"""Typed models of the scenario language (see docs/scenario.md).

Polymorphic sections are static discriminated unions on ``type`` with ``Literal`` tags: no
registries, no import side effects. Unknown keys are errors everywhere. This package imports
nothing from the runtime.
"""

from __future__ import annotations

import re
import warnings
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from veeksha.scenario.base import (
    StrictModel,
    _default_tags,  # noqa: F401 (re-exported)
)
from veeksha.scenario.clients import (
    DEFAULT_CLIENT,
    BuiltinTokenizer,
    ChatCompletionsClient,
    Client,
    CompletionsClient,
    HfTokenizer,
    NamedChatCompletionsClient,
    NamedClient,
    NamedCompletionsClient,
    ServerTokenizer,
)
from veeksha.scenario.generators import (
    FixedInterval,
    FixedLength,
    FixedStairLength,
    GammaInterval,
    IntervalGenerator,
    InverseGaussianLength,
    LengthGenerator,
    PoissonInterval,
    UniformLength,
    ZipfLength,
)
from veeksha.scenario.graphs import (  # noqa: F401 (re-exported)
    Agent,
    AgentRoundsGraph,
    BranchingGraph,
    ChoicesValidation,
    JsonValidation,
    LinearGraph,
    RegexValidation,
    SessionGraph,
    SingleRequestGraph,
    Validation,
)
from veeksha.scenario.schedulers import (
    ConcurrentScheduler,
    RateScheduler,
    TraceScheduler,
    TrafficScheduler,
)
from veeksha.scenario.server import ManagedServerConfig, ServerMetricsConfig
from veeksha.scenario.session_generators import (
    AutoFlavor,
    AzureLlmFlavor,
    BurstGptFlavor,
    ClientSelection,
    MooncakeFlavor,
    OutputSpec,
    RagFlavor,
    RequestLogFlavor,
    RoundRobinClients,
    SessionGenerator,
    SharedPrefixFlavor,
    SyntheticSessionGenerator,
    TextChannel,
    TextOutputSpec,
    TimedSyntheticSessionFlavor,
    TraceFlavor,
    TraceSessionGenerator,
    UntimedContentMultiTurnFlavor,
    WeightedClients,
)
from veeksha.scenario.simulator import SimulatorConfig

__all__ = [
    "SLO",
    "Agent",
    "AgentRoundsGraph",
    "AutoFlavor",
    "AzureLlmFlavor",
    "BranchingGraph",
    "BuiltinTokenizer",
    "BurstGptFlavor",
    "ChatCompletionsClient",
    "Client",
    "ClientSelection",
    "CompletionsClient",
    "ConcurrentScheduler",
    "FixedInterval",
    "FixedLength",
    "FixedStairLength",
    "GammaInterval",
    "HealthChecks",
    "HfTokenizer",
    "IntervalGenerator",
    "InverseGaussianLength",
    "LengthGenerator",
    "LinearGraph",
    "MooncakeFlavor",
    "NamedChatCompletionsClient",
    "NamedClient",
    "NamedCompletionsClient",
    "OutputSpec",
    "PerformanceEvaluator",
    "Phase",
    "PoissonInterval",
    "RagFlavor",
    "RateScheduler",
    "RequestLogFlavor",
    "RoundRobinClients",
    "Runtime",
    "Scenario",
    "ServerTokenizer",
    "SessionGraph",
    "SharedPrefixFlavor",
    "SingleRequestGraph",
    "SyntheticSessionGenerator",
    "TextChannel",
    "TextOutputSpec",
    "TimedSyntheticSessionFlavor",
    "TraceFlavor",
    "TraceRecorder",
    "TraceScheduler",
    "TraceSessionGenerator",
    "UniformLength",
    "UntimedContentMultiTurnFlavor",
    "WeightedClients",
    "ZipfLength",
]


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


class Runtime(StrictModel):
    """Stop conditions, workers, CPU affinity and warmup."""

    max_sessions: int = Field(25, ge=-1, description="Sessions to start; -1 unlimited.")
    benchmark_timeout: float = Field(
        300.0, description="Stop starting new work after this many seconds; <= 0 disables."
    )
    post_timeout_grace_seconds: float = Field(
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
    warmup_seconds: float = Field(0.0, ge=0, description="Seconds of an untracked warmup phase.")
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
    distributed: Distributed | None = Field(
        None,
        description="Run on a Ray cluster: {backend: ray, address, shards, workers_per_shard}"
        " (docs/distributed.md); null: one host.",
    )
    num_dispatcher_threads: int | None = Field(None, description="Accepted and ignored.")
    num_completion_threads: int | None = Field(None, description="Accepted and ignored.")
    num_client_threads: int | None = Field(None, description="Accepted and ignored.")

    @field_validator("num_workers")
    @classmethod
    def _positive_workers(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be at least 1 or 'auto'")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> Runtime:
        if self.max_sessions == 0:
            raise ValueError("max_sessions must be positive or -1 (unlimited)")
        if self.max_sessions == -1 and self.benchmark_timeout <= 0:
            raise ValueError("max_sessions: -1 (unlimited) needs a benchmark_timeout > 0")
        if self.pregenerate_sessions and self.max_sessions < 0:
            raise ValueError("pregenerate_sessions needs max_sessions > 0")
        for key in _IGNORED_THREAD_KEYS:
            if getattr(self, key) is not None:
                warnings.warn(
                    f"runtime.{key} is ignored: veeksha uses worker processes, not threads",
                    UserWarning,
                    stacklevel=2,
                )
        return self


# ------------------------------------------------------------------------------- trace recorder


class TraceRecorder(StrictModel):
    """trace.jsonl: one line per dispatched request with its session context."""

    enabled: bool = Field(True, description="Write trace.jsonl.")
    include_content: bool = Field(
        False, description="Also write the messages sent (prompt text and history)."
    )


# ------------------------------------------------------------------------------------ evaluators


class SLO(StrictModel):
    """A service-level objective: the metric's percentile must be at most value (seconds)."""

    name: str = Field(..., description="Label shown in reports.")
    metric: Literal["ttfc", "tbc", "tpot", "e2e", "normalized_e2e"] = Field(
        ..., description="Latency metric the objective is about."
    )
    percentile: float = Field(..., ge=0, le=1, description="Quantile in [0, 1], e.g. 0.99.")
    value: float = Field(..., gt=0, description="Threshold in seconds.")
    type: Literal["constant"] = Field("constant", description="Threshold kind.")


class PerformanceEvaluator(StrictModel):
    """Latency and throughput metrics over the measured phase, with SLOs."""

    type: Literal["performance"] = "performance"
    target_channels: list[Literal["text"]] = Field(
        default_factory=lambda: list[Literal["text"]](["text"]), description="Channels evaluated."
    )
    stream_metrics: bool = Field(True, description="Print periodic metrics while running.")
    stream_metrics_interval: float = Field(5.0, gt=0, description="Seconds between them.")
    slos: list[SLO] = Field(default_factory=list, description="Objectives judged after the run.")


Evaluator = Annotated[PerformanceEvaluator, Field(discriminator="type")]


# --------------------------------------------------------------------------------- health checks


class HealthChecks(StrictModel):
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


# ---------------------------------------------------------------------------------------- phases


class Phase(StrictModel):
    """One phase of a multi-phase run: a name, a length, and what the traffic does differently.

    A phase needs exactly one of ``duration`` and ``max_sessions`` (the last phase may have
    neither when runtime.max_sessions or runtime.benchmark_timeout ends the run). The overrides
    change the traffic scheduler of the run for this phase only; which keys may change is
    checked against the scheduler's type (``veeksha.scenario.phases``, docs/experiments.md).
    """

    name: str = Field(
        ..., min_length=1, description="Unique label; `warmup` (first phase only) is untracked."
    )
    duration: float | None = Field(None, gt=0, description="Seconds the phase lasts.")
    max_sessions: int | None = Field(None, ge=1, description="Sessions started in the phase.")
    drain: bool = Field(
        False,
        description="At the phase's end, start nothing until every session started so far"
        " has ended; the next phase starts then.",
    )
    arrival_rate: float | None = Field(
        None, gt=0, description="rate scheduler: the interval generator's arrival_rate."
    )
    interval: float | None = Field(
        None, ge=0, description="rate scheduler, fixed interval: seconds between sessions."
    )
    target_concurrent_sessions: int | None = Field(
        None, ge=1, description="concurrent scheduler: the target of this phase."
    )
    traffic_scheduler: dict[str, Any] = Field(
        default_factory=dict,
        description="Any other traffic_scheduler keys of the run's scheduler type, merged into it"
        " for this phase (not type, cancel_session_on_failure).",
    )


# ----------------------------------------------------------------------------------- the scenario


class Scenario(StrictModel):
    """A whole benchmark: what sessions look like, when they arrive, where they go."""

    seed: int = Field(42, ge=0, description="Root of all randomness; 0 is a valid seed.")
    traffic_scheduler: TrafficScheduler = Field(
        default_factory=RateScheduler, description="When sessions start."
    )
    session_generator: SessionGenerator = Field(
        default_factory=SyntheticSessionGenerator, description="What sessions look like."
    )
    client: Client = Field(
        default_factory=ChatCompletionsClient, description="How requests are sent."
    )
    clients: list[NamedClient] | None = Field(
        None,
        min_length=1,
        description="Several targets in one run, each with a name (instead of client).",
    )
    runtime: Runtime = Field(
        default_factory=Runtime, description="Stop conditions, workers, CPU affinity, warmup."
    )
    trace_recorder: TraceRecorder = Field(
        default_factory=TraceRecorder, description="trace.jsonl of dispatched requests."
    )
    evaluators: list[Evaluator] = Field(
        default_factory=lambda: [PerformanceEvaluator()], description="Metrics and SLOs."
    )
    health_checks: HealthChecks = Field(
        default_factory=HealthChecks, description="Thresholds of the benchmark's self-checks."
    )
    simulator: SimulatorConfig = Field(
        default_factory=SimulatorConfig,
        description="The built-in server, used when client.api_base is absent.",
    )
    output_dir: str = Field("benchmark_output", description="Base folder of run folders.")
    phases: list[Phase] = Field(
        default_factory=list,
        description="Phases of one run (warmup, then load steps); empty: warmup and measured.",
    )
    server: ManagedServerConfig | None = Field(
        None,
        description="A server veeksha starts for the run and stops after it (docs/server.md).",
    )
    server_metrics: ServerMetricsConfig = Field(
        default_factory=ServerMetricsConfig,
        description="Scraping the server's Prometheus /metrics during the run.",
    )

    @field_validator("clients", mode="before")
    @classmethod
    def _default_client_type(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [
                {"type": "openai_chat_completions", **item}
                if isinstance(item, dict) and "type" not in item
                else item
                for item in value
            ]
        return value

    def client_entries(self) -> list[tuple[str, ChatCompletionsClient | CompletionsClient]]:
        """Every client of the run as (name, client), in order: ``clients:``, or the one
        ``client:`` named ``default``. A node's client index points into this list."""
        if self.clients:
            return [(c.name, c) for c in self.clients]
        return [(DEFAULT_CLIENT, self.client)]

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Mistakes that span sections, as (key path, message): the loader gives each its
        file and line (``veeksha.scenario.loader``)."""
        from veeksha.scenario.crosscheck import scenario_problems

        return scenario_problems(self)

    @model_validator(mode="after")
    def _model_with_api_base(self) -> Scenario:
        if self.server is not None and self.client.api_base is not None:
            raise ValueError(
                "client.api_base and server are both set: the managed server's address becomes "
                "the api_base; remove client.api_base"
            )
        server = self.server
        if (
            server is not None
            and server.type == "command"
            and not (server.model or self.client.model)
        ):
            raise ValueError("server type 'command' needs server.model or client.model")
        if self.client.api_base is not None and not self.client.model:
            raise ValueError("client.model is required when client.api_base is set")
        if isinstance(self.traffic_scheduler, TraceScheduler) and not isinstance(
            self.session_generator, TraceSessionGenerator
        ):
            raise ValueError(
                "traffic_scheduler type 'trace' takes arrival times from a trace: set "
                "session_generator type 'trace' too (or use type 'rate')"
            )
        return self
