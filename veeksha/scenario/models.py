"""Typed models of the scenario language (see docs/scenario.md).

Polymorphic sections are static discriminated unions on ``type`` with ``Literal`` tags: no
registries, no import side effects. Unknown keys are errors everywhere. This package imports
nothing from the runtime.

This module holds the root, ``Scenario``, and its ``Phase``; it re-exports every model of the
language (``__all__``), one module per concept beside it:
``base`` (StrictModel), ``generators`` (interval and length generators), ``schedulers`` (traffic
schedulers), ``graphs`` (session graphs, agents, validations), ``session_generators`` (synthetic
and trace sessions, flavors, client selection), ``clients`` (clients and tokenizers), ``runtime``
(runtime, distributed, trace recorder), ``evaluators`` (evaluators, SLOs, health checks);
``server`` and ``simulator`` hold the managed server's and the simulator's settings.
"""

import dataclasses
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from veeksha.scenario.abandonment import Abandonment
from veeksha.scenario.base import (
    KeyProblem,
    Seconds,
    StrictModel,
    _default_tags,  # noqa: F401 (re-exported)
    empty_dict,
    empty_list,
    factory,
)
from veeksha.scenario.clients import (
    DEFAULT_CLIENT,
    AnyClient,
    BuiltinTokenizer,
    ChatCompletionsClient,
    Client,
    CompletionsClient,
    EmbeddingsClient,
    HfTokenizer,
    NamedChatCompletionsClient,
    NamedClient,
    NamedCompletionsClient,
    NamedEmbeddingsClient,
    ServerTokenizer,
)
from veeksha.scenario.evaluators import SLO, Evaluator, HealthChecks, PerformanceEvaluator
from veeksha.scenario.generators import (
    ChoiceLength,
    FixedInterval,
    FixedLength,
    FixedStairLength,
    GammaInterval,
    IntervalGenerator,
    InverseGaussianLength,
    LengthGenerator,
    NormalLength,
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
from veeksha.scenario.runtime import Runtime, TraceRecorder
from veeksha.scenario.schedulers import (
    ConcurrentScheduler,
    RateScheduler,
    TraceScheduler,
    TrafficScheduler,
)
from veeksha.scenario.server import (
    ManagedServerConfig,
    PrefixCacheResetConfig,
    ServerMetricsConfig,
    ServerProfileConfig,
)
from veeksha.scenario.session_generators import (
    AutoFlavor,
    AzureLlmFlavor,
    BurstGptFlavor,
    ClientSelection,
    ImageChannel,
    MooncakeFlavor,
    OutputSpec,
    PromptsFlavor,
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

#: the keys of a ``server:`` section that starting the server may find wrong (``placed_keys``)
_SERVER_KEYS = (
    "type",
    "command",
    "model",
    "executable",
    "args",
    "cwd",
    "host",
    "port",
    "ready_path",
    "ready_timeout",
)

__all__ = [
    "SLO",
    "Abandonment",
    "Agent",
    "AgentRoundsGraph",
    "AnyClient",
    "AutoFlavor",
    "AzureLlmFlavor",
    "BranchingGraph",
    "BuiltinTokenizer",
    "BurstGptFlavor",
    "ChatCompletionsClient",
    "ChoiceLength",
    "Client",
    "ClientSelection",
    "CompletionsClient",
    "ConcurrentScheduler",
    "EmbeddingsClient",
    "FixedInterval",
    "FixedLength",
    "FixedStairLength",
    "GammaInterval",
    "HealthChecks",
    "HfTokenizer",
    "ImageChannel",
    "IntervalGenerator",
    "InverseGaussianLength",
    "LengthGenerator",
    "LinearGraph",
    "MooncakeFlavor",
    "NamedChatCompletionsClient",
    "NamedClient",
    "NamedCompletionsClient",
    "NamedEmbeddingsClient",
    "NormalLength",
    "OutputSpec",
    "PerformanceEvaluator",
    "Phase",
    "PoissonInterval",
    "PromptsFlavor",
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
    duration: Seconds | None = Field(None, gt=0, description="Seconds the phase lasts.")
    max_sessions: int | None = Field(None, ge=1, description="Sessions started in the phase.")
    drain: bool = Field(
        False,
        description="At the phase's end, start nothing until every session started so far"
        " has ended; the next phase starts then.",
    )
    arrival_rate: float | None = Field(
        None, gt=0, description="rate scheduler: the interval generator's arrival_rate."
    )
    interval: Seconds | None = Field(
        None, ge=0, description="rate scheduler, fixed interval: seconds between sessions."
    )
    target_concurrent_sessions: int | None = Field(
        None, ge=1, description="concurrent scheduler: the target of this phase."
    )
    traffic_scheduler: dict[str, Any] = Field(
        default_factory=empty_dict,
        description="Any other traffic_scheduler keys of the run's scheduler type, merged into it"
        " for this phase (not type, cancel_session_on_failure).",
    )


# ----------------------------------------------------------------------------------- the scenario


class Scenario(StrictModel, defer_build=False):
    """A whole benchmark: what sessions look like, when they arrive, where they go."""

    seed: int = Field(42, ge=0, description="Root of all randomness; 0 is a valid seed.")
    traffic_scheduler: TrafficScheduler = Field(
        default_factory=factory(RateScheduler), description="When sessions start."
    )
    session_generator: SessionGenerator = Field(
        default_factory=factory(SyntheticSessionGenerator), description="What sessions look like."
    )
    abandonment: Abandonment = Field(
        default_factory=factory(Abandonment),
        description="Requests whose user gives up before the answer ends: the connection is "
        "dropped a drawn time after the request was sent (docs/scenario.md).",
    )
    client: Client = Field(
        default_factory=factory(ChatCompletionsClient), description="How requests are sent."
    )
    clients: list[NamedClient] | None = Field(
        None,
        min_length=1,
        description="Several targets in one run, each with a name (instead of client); each "
        "client's prompts are sized in its own tokenizer, a trace replay's rows too "
        "(docs/agents.md).",
    )
    runtime: Runtime = Field(
        default_factory=factory(Runtime),
        description="Stop conditions, workers, CPU affinity, warmup.",
    )
    trace_recorder: TraceRecorder = Field(
        default_factory=factory(TraceRecorder), description="trace.jsonl of dispatched requests."
    )
    evaluators: list[Evaluator] = Field(
        default_factory=lambda: [PerformanceEvaluator()], description="Metrics and SLOs."
    )
    health_checks: HealthChecks = Field(
        default_factory=factory(HealthChecks),
        description="Thresholds of the benchmark's self-checks.",
    )
    simulator: SimulatorConfig = Field(
        default_factory=factory(SimulatorConfig),
        description="The built-in server, used when client.api_base is absent.",
    )
    output_dir: str = Field("benchmark_output", description="Base folder of run folders.")
    labels: dict[str, str | int | float | bool] = Field(
        default_factory=empty_dict,
        description="Labels of the run (engine version, GPU, tensor parallelism, ...), as vLLM's "
        "--metadata: in summary.json's run and in compare's differences; not in the scenario's "
        "hash (they describe the run, they change no request).",
    )
    phases: list[Phase] = Field(
        default_factory=empty_list,
        description="Phases of one run (warmup, then load steps); empty: warmup and measured.",
    )
    server: ManagedServerConfig | None = Field(
        None,
        description="A server veeksha starts for the run and stops after it (docs/server.md).",
    )
    server_metrics: ServerMetricsConfig = Field(
        default_factory=factory(ServerMetricsConfig),
        description="Scraping the server's Prometheus /metrics during the run.",
    )
    server_profile: ServerProfileConfig = Field(
        default_factory=factory(ServerProfileConfig),
        description="The server's profiler (vLLM's, SGLang's /start_profile) run during the "
        "traffic (docs/server.md).",
    )
    prefix_cache_reset: PrefixCacheResetConfig = Field(
        default_factory=factory(PrefixCacheResetConfig),
        description="Emptying the servers' prefix caches before the run (docs/server.md).",
    )
    #: Where the loader found each key a run may find wrong only when it acts on it
    #: (``placed_keys``: a file it reads, the managed server it starts): key path → a
    #: ScenarioIssue with no message (``at_key``, ``veeksha.scenario.loader.named_file_error``);
    #: None for a scenario not read from a file.
    _places: dict[tuple[str | int, ...], Any] | None = None

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

    def client_entries(self) -> list[tuple[str, AnyClient]]:
        """Every client of the run as (name, client), in order: ``clients:``, or the one
        ``client:`` named ``default``. A node's client index points into this list."""
        if self.clients:
            return [(c.name, c) for c in self.clients]
        return [(DEFAULT_CLIENT, self.client)]

    def tokenizer_sharing(self) -> list[int]:
        """Per client (``client_entries`` order), the index of the first client whose prompts
        the same tokenizer counts: the same ``tokenizer`` (none is ``builtin``) and, for a
        ``server`` one, the same target too (``api_base``, ``model``, ``api_key_env``: it is
        calibrated against the client's own server). Clients of one index share one tokenizer
        instance (a trace replay's rows too, each in its client's)."""
        entries = self.client_entries()
        seen: dict[str, int] = {}
        sharing: list[int] = []
        for index, (_, client) in enumerate(entries):
            key = client.tokenizer.model_dump_json()
            if client.tokenizer.type == "server":
                key += f"\0{client.api_base}\0{client.model}\0{client.api_key_env}"
            sharing.append(seen.setdefault(key, index))
        return sharing

    def tokenizer_key(self, index: int) -> str:
        """The key path of client ``index``'s tokenizer, as messages name it."""
        return f"clients[{index}].tokenizer" if self.clients else "client.tokenizer"

    def named_files(self) -> list[tuple[str | int, ...]]:
        """The key paths of the files the scenario names and a run reads: the trace, each
        client's local tokenizer."""
        keys: list[tuple[str | int, ...]] = []
        if self.session_generator.type == "trace":
            keys.append(("session_generator", "trace_file"))
        for prefix, (_, client) in zip(self.client_key_paths(), self.client_entries(), strict=True):
            if client.tokenizer.type == "hf":
                keys.append((*prefix, "tokenizer", "path"))
        return keys

    def client_key_paths(self) -> list[tuple[str | int, ...]]:
        """Where each client of ``client_entries`` is written: ``("clients", i)``, or
        ``("client",)``."""
        return [("clients", i) for i in range(len(self.clients or []))] or [("client",)]

    def placed_keys(self) -> list[tuple[str | int, ...]]:
        """The key paths whose place the loader records (``_places``): the files the scenario
        names, each client's ``headers`` that read a ``${NAME}`` when the run starts
        (``veeksha.engine.target``), and the keys of its ``server:`` section that starting the
        server may find wrong (a program not found, a port taken, a model file missing, a
        readiness wait that runs out: ``veeksha.server.managed``)."""
        keys = self.named_files()
        for prefix, (_, client) in zip(
            self.client_key_paths(), self.client_entries(), strict=True
        ):  # (a ${NAME} read when the run starts)
            keys += [(*prefix, "headers", k) for k, v in client.headers.items() if "${" in v]
        if self.server is not None:
            keys += [("server",), *(("server", key) for key in _SERVER_KEYS)]
            if self.server.type == "command":
                keys.append(("server", "command", 0))
        return keys

    def at_key(self, parts: tuple[str | int, ...], message: str) -> str:
        """``message`` about the key ``parts``, said where the key is written, as a validation
        error is: ``scenario.yaml:12:3: server.port: MESSAGE`` (or ``--set server.port=8000:
        server.port: MESSAGE``); ``server.port: MESSAGE`` for a scenario not read from a file
        (or a key not in ``placed_keys``)."""
        where = (self._places or {}).get(tuple(parts))
        if where is None:
            from veeksha.scenario.overrides import format_path

            return f"{format_path(parts)}: {message}"
        return str(dataclasses.replace(where, message=message))

    def problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Mistakes that span sections, as (key path, message): the loader gives each its
        file and line (``veeksha.scenario.loader``)."""
        from veeksha.scenario.crosscheck import scenario_problems

        return scenario_problems(self)

    @model_validator(mode="after")
    def _model_with_api_base(self) -> Self:
        if self.server is not None and self.client.api_base is not None:
            raise KeyProblem(
                "server is set too: the managed server's address becomes the api_base; remove "
                "client.api_base",
                "client.api_base",
                "server",
            )
        server = self.server
        if server is not None and server.type == "command" and not server.model:
            if not self.clients and not self.client.model:
                raise KeyProblem(
                    "server type 'command' needs server.model or client.model",
                    "server.model",
                    "client.model",
                )
            # (the clients without an api_base go to the managed server: each names its model,
            # else server.model is the one it asks for)
            for i, named in enumerate(self.clients or []):
                if named.api_base is None and not named.model:
                    raise KeyProblem(
                        f"client {named.name!r} goes to the managed server (it has no "
                        "api_base), and server type 'command' has no model: set this client's "
                        "model, or server.model",
                        ("clients", i, "model"),
                        ("server", "model"),
                    )
        if self.client.api_base is not None and not self.client.model:
            raise KeyProblem(
                "required when client.api_base is set (the model the server serves)",
                "client.model",
                "client.api_base",
            )
        if isinstance(self.traffic_scheduler, TraceScheduler) and not isinstance(
            self.session_generator, TraceSessionGenerator
        ):
            raise KeyProblem(
                "'trace' takes arrival times from a trace: set session_generator type 'trace' "
                "too (or use type 'rate')",
                "traffic_scheduler.type",
                "session_generator.type",
            )
        return self
