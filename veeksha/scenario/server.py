"""Settings of a managed server (the `server:` section), of the server-metrics scraper (the
`server_metrics:` section), of the server's profiler (the `server_profile:` section) and of
emptying its prefix cache before a run (the `prefix_cache_reset:` section). See docs/server.md.

A managed server is a process veeksha starts before the run, waits for, points the client at
and stops after the run. ``type: command`` runs any argv; the other types build the command
line of a known engine from ``model``, ``host``, ``port`` and ``args`` (the command line each
type builds is in ``veeksha.server.commands`` and docs/server.md).

Kept here, beside the other scenario models, so the scenario package imports nothing from the
runtime.

>>> VllmServer(model="Qwen/Qwen2.5-0.5B").ready_timeout
600.0
"""

import signal
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, field_validator

from veeksha.scenario.base import NumbersModel, empty_dict, empty_list

__all__ = [
    "CommandServer",
    "LlamaCppServer",
    "ManagedServerConfig",
    "PrefixCacheResetConfig",
    "ServerMetricsConfig",
    "ServerProfileConfig",
    "SglangServer",
    "SimulatorServer",
    "VllmServer",
    "exporter_url",
]


class _ServerBase(NumbersModel):
    """What every managed server has: where it listens, how it is judged ready and stopped."""

    model_config = ConfigDict(extra="forbid", validate_default=True, defer_build=True)

    env: dict[str, str] = Field(
        default_factory=empty_dict, description="Environment variables added to veeksha's for it."
    )
    cwd: str | None = Field(None, description="Working folder of the server (default: veeksha's).")
    host: str = Field("127.0.0.1", description="Address it listens on ({host} in the command).")
    port: int = Field(
        0, ge=0, le=65535, description="Port it listens on ({port}); 0 picks a free one."
    )
    ready_path: str | None = Field(
        None,
        description="Path answering 2xx once the server is ready (default: /health, "
        "else /v1/models when /health is 404).",
    )
    ready_timeout: float = Field(600.0, gt=0, description="Seconds to wait for it to be ready.")
    stop_signal: str = Field("SIGTERM", description="Signal asking it to stop.")
    stop_timeout: float = Field(
        30.0, ge=0, description="Seconds between the stop signal and SIGKILL of its process group."
    )

    @field_validator("stop_signal")
    @classmethod
    def _known_signal(cls, value: str) -> str:
        name = value.upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        if not isinstance(getattr(signal, name, None), signal.Signals):
            raise ValueError(f"{value!r} is not a signal name (e.g. SIGTERM, SIGINT)")
        return name

    @field_validator("ready_path")
    @classmethod
    def _absolute_path(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"{value!r} must start with / (e.g. /health)")
        return value


class CommandServer(_ServerBase):
    """Any server, started with the argv ``command`` (``{host}`` and ``{port}`` replaced)."""

    type: Literal["command"] = "command"
    command: list[str] = Field(
        ..., min_length=1, description="argv of the server; {host} and {port} are replaced."
    )
    model: str | None = Field(
        None, description="Model it serves (default: client.model, which is then required)."
    )


class _EngineServer(_ServerBase):
    model: str = Field(..., description="Model to serve (what the engine's CLI takes).")
    args: list[str] = Field(
        default_factory=empty_list, description="Extra arguments appended to the command line."
    )
    executable: str | None = Field(
        None,
        description="The program to run instead of the engine's usual one (sglang: the "
        "Python that has sglang installed).",
    )


class VllmServer(_EngineServer):
    """vLLM: ``vllm serve MODEL --host HOST --port PORT ARGS...``."""

    type: Literal["vllm"] = "vllm"


class SglangServer(_EngineServer):
    """SGLang: ``python3 -m sglang.launch_server --model-path MODEL --host HOST --port PORT
    --enable-metrics ARGS...``."""

    type: Literal["sglang"] = "sglang"


class LlamaCppServer(_EngineServer):
    """llama.cpp: ``llama-server -m MODEL --host HOST --port PORT --metrics ARGS...``
    (``model``: the path of a GGUF file)."""

    type: Literal["llama_cpp"] = "llama_cpp"


class SimulatorServer(_ServerBase):
    """The built-in simulator as a managed server: ``veeksha sim-server`` with the scenario's
    ``simulator:`` settings (``python -m veeksha.simulator``, the same command)."""

    type: Literal["veeksha_sim"] = "veeksha_sim"
    args: list[str] = Field(
        default_factory=empty_list, description="Extra arguments of veeksha sim-server."
    )
    ready_timeout: float = Field(60.0, gt=0, description="Seconds to wait for it to be ready.")
    stop_timeout: float = Field(
        5.0, ge=0, description="Seconds between the stop signal and SIGKILL of its process group."
    )


ManagedServerConfig = Annotated[
    CommandServer | VllmServer | SglangServer | LlamaCppServer | SimulatorServer,
    Field(discriminator="type"),
]


class ServerMetricsConfig(NumbersModel):
    """The Prometheus scraper: ``url`` read every ``interval`` seconds during the run, in a
    process of its own, into server_metrics.parquet."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    enabled: bool = Field(True, description="Scrape the server's metrics during the run.")
    interval: float = Field(1.0, gt=0, description="Seconds between scrapes.")
    url: str | None = Field(
        None, description="Metrics URL (default: the api_base without /v1, plus /metrics)."
    )
    gpu: bool = Field(
        True,
        description="Sample GPU utilisation, memory and power with nvidia-smi (managed "
        "servers on this host only, and only when gpu_urls is empty).",
    )
    gpu_urls: list[str] = Field(
        default_factory=empty_list,
        description="NVIDIA dcgm-exporter addresses scraped beside the server for its GPUs' "
        "utilisation, power, energy, memory and clocks (summary.json's gpus section: energy "
        "per output token); host:port means http://host:port/metrics, a path (/dcgm/metrics) "
        "one on the server's own address. No key or header is sent to them.",
    )

    @field_validator("gpu_urls")
    @classmethod
    def _exporter_addresses(cls, value: list[str]) -> list[str]:
        return [exporter_url(url) for url in value]


def exporter_url(address: str) -> str:
    """A metrics exporter's address as a URL: ``host:port`` → ``http://host:port/metrics``, a
    URL without a path gets ``/metrics``, a path (``/dcgm/metrics``) stays one (on the server's
    own address); ``ValueError`` for what is not an http(s) address.

    >>> exporter_url("node1:9400")
    'http://node1:9400/metrics'
    >>> exporter_url("https://gpu.example/dcgm")
    'https://gpu.example/dcgm'
    """
    from urllib.parse import urlsplit

    text = address.strip()
    if text.startswith("/") and " " not in text:
        return text  # (a path on the server's own address: resolved when the target is known)
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or " " in text:
        raise ValueError(
            f"{address!r} is not an exporter's address: give host:port (e.g. 127.0.0.1:9400) "
            "or an http(s) URL"
        )
    try:
        parts.port  # noqa: B018  (raises for a port that is not a number)
    except ValueError as exc:
        raise ValueError(f"{address!r}: {exc}") from None
    return text if parts.path not in ("", "/") else f"{parts.scheme}://{parts.netloc}/metrics"


class ServerProfileConfig(NumbersModel):
    """The server's own profiler, started before the traffic and stopped after it (vLLM's and
    SGLang's ``POST /start_profile`` and ``POST /stop_profile`` at the server's root, as
    ``vllm bench serve --profile`` calls them)."""

    model_config = ConfigDict(extra="forbid", validate_default=True, defer_build=False)

    enabled: bool = Field(False, description="Profile the server during the run.")
    start_path: str = Field(
        "/start_profile", description="Path (at the server's root) that starts its profiler."
    )
    stop_path: str = Field(
        "/stop_profile", description="Path (at the server's root) that stops its profiler."
    )
    stop_timeout: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description="Seconds allowed to the stop call (the server writes its trace then).",
    )

    @field_validator("start_path", "stop_path")
    @classmethod
    def _a_path(cls, value: str) -> str:
        if not value.startswith("/") or any(c.isspace() for c in value):
            raise ValueError(f"must be a path starting with / and without spaces (got {value!r})")
        return value


class PrefixCacheResetConfig(NumbersModel):
    """Emptying each server's prefix cache before the run (before its warmup), so that a run
    does not find the prompts of the run before it cached: vLLM's ``POST /reset_prefix_cache``
    (served when vLLM runs with ``VLLM_SERVER_DEV_MODE=1``), SGLang's ``POST /flush_cache``,
    llama.cpp's ``POST /slots/{id}?action=erase`` for each of its slots."""

    model_config = ConfigDict(extra="forbid", validate_default=True, defer_build=False)

    enabled: bool = Field(False, description="Empty the servers' prefix caches before the run.")
    api: Literal["auto", "vllm", "sglang", "llama_cpp"] = Field(
        "auto",
        description="Which server's call empties it; auto: vLLM's, else SGLang's, else "
        "llama.cpp's, the first the server does not answer 404.",
    )
