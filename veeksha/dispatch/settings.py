"""``WorkerSettings``: everything a worker process needs to send requests, as one msgspec Struct.

It travels to each worker once, at spawn, through the worker's stdin pipe (in memory: the API key
never appears in argv, the environment, logs or outputs; ``repr`` masks it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from veeksha.errors import ConfigurationError

if TYPE_CHECKING:
    from pathlib import Path

    from veeksha.scenario.models import AnyClient

__all__ = [
    "HeaderVariableMissing",
    "WorkerSettings",
    "WorkerSpawn",
    "client_secrets",
    "request_id_prefix",
    "resolve_api_key",
    "resolve_header_values",
    "resolve_headers",
]


class WorkerSettings(msgspec.Struct, kw_only=True):
    """How the workers send requests.

    ``endpoint`` is the full URL (``.../v1/chat/completions``, ``.../v1/completions`` or
    ``.../v1/embeddings``); ``chat`` and ``embeddings`` select the body and response shape.
    ``max_connections`` 0 means no cap on the keep-alive pool. ``dry_run`` sends nothing: each
    request completes at once with ``max_tokens`` synthetic words.
    """

    endpoint: str
    api_key: str | None = None
    model: str | None = None
    chat: bool = True
    embeddings: bool = False  # /v1/embeddings: the prompt is the input, the answer a vector
    thinking_opened: bool = False  # client.thinking_opened: every answer begins inside <think>
    stream: bool = True
    max_tokens_param: str = "max_completion_tokens"
    min_tokens_param: str | None = None
    ignore_eos: bool = True
    prompt_fallback: bool = False
    extra_params: dict[str, Any] = {}
    request_timeout_s: float = 300.0
    max_retries: int = 0
    max_connections: int = 0
    dry_run: bool = False
    chunk_timestamps: str = "kernel"  # runtime.chunk_timestamps: read | kernel
    headers: dict[str, str] = {}  # client.headers, resolved (``resolve_headers``)
    session_header: str = ""  # client.session_header; "": none
    request_id_header: str = ""  # client.request_id_header; "": none
    request_id_prefix: str = ""  # what precedes each request's id there (the run folder's name)
    secrets: list[str] = []  # what to mask in what servers echo (``client_secrets``)

    def __repr__(self) -> str:
        def shown(name: str, value: Any) -> str:
            if name == "api_key" and value:
                return "***"
            if name == "headers":
                return repr({k: "***" for k in value})
            if name == "secrets":
                return f"[{len(value)} secrets]"
            return repr(value)

        fields = ", ".join(f"{f}={shown(f, getattr(self, f))}" for f in self.__struct_fields__)
        return f"WorkerSettings({fields})"

    @classmethod
    def from_client(
        cls,
        client_cfg: AnyClient,
        api_base: str,
        api_key: str | None,
        dry_run: bool = False,
        headers: dict[str, str] | None = None,
    ) -> WorkerSettings:
        """Settings for a scenario's ``client`` section sending to ``api_base`` (…/v1).

        ``api_key`` is the resolved key (see ``resolve_api_key``) or None for no header;
        ``headers`` the client's resolved ``headers`` (``resolve_headers``).
        Raises ``ConfigurationError`` when ``additional_sampling_params`` sets a key veeksha
        controls itself.
        """
        chat = client_cfg.type == "openai_chat_completions"
        embeddings = client_cfg.type == "openai_embeddings"
        extra = dict(client_cfg.additional_sampling_params)
        # (the scenario's models are not imported here, for the workers: the type's keys by name)
        max_tokens_param: str = getattr(client_cfg, "max_tokens_param", "")
        if embeddings:
            reserved = {"input", "model", "encoding_format", "dimensions"}
            controlled = "client.model, client.encoding_format and client.dimensions"
            path = "/embeddings"
        else:
            reserved = {"messages", "prompt", "model", "stream", max_tokens_param}
            if client_cfg.min_tokens_param:
                reserved.add(client_cfg.min_tokens_param)
            controlled = "client.stream, client.model and the output length settings"
            path = "/chat/completions" if chat else "/completions"
        clash = sorted(reserved & set(extra))
        if clash:
            raise ConfigurationError(
                f"client.additional_sampling_params sets {', '.join(clash)}, which veeksha "
                f"controls (use {controlled})"
            )
        if embeddings:
            extra["encoding_format"] = getattr(client_cfg, "encoding_format", "float")
            dimensions = getattr(client_cfg, "dimensions", None)
            if dimensions is not None:
                extra["dimensions"] = dimensions
        return cls(
            endpoint=api_base.rstrip("/") + path,
            api_key=api_key,
            model=client_cfg.model,
            chat=chat,
            embeddings=embeddings,
            thinking_opened=chat and getattr(client_cfg, "thinking_opened", False),
            stream=client_cfg.stream,
            max_tokens_param=max_tokens_param,
            min_tokens_param=client_cfg.min_tokens_param,
            ignore_eos=client_cfg.ignore_eos,
            prompt_fallback=client_cfg.use_min_tokens_prompt_fallback,
            extra_params=extra,
            request_timeout_s=client_cfg.request_timeout,
            max_retries=client_cfg.max_retries,
            dry_run=dry_run,
            headers=dict(headers or {}),
            session_header=client_cfg.session_header or "",
            request_id_header=client_cfg.request_id_header or "",
            secrets=client_secrets(client_cfg),
        )


def request_id_prefix(run_dir: Path) -> str:
    """What precedes a request's id in ``client.request_id_header``, so that ids are unique
    across runs: the run's folder from the nearest one named with its UTC start (a run's own,
    ``20261127T200339Z-fda33e11ce``; a sweep's, a capacity search's or a microbenchmark's, above
    its point's: ``sweep-20261127T200339Z-abc123/000-rate=2``), and a hyphen."""
    parts = [run_dir.name]
    for folder in run_dir.parents:
        if _STARTED.search(parts[0]) or not folder.name:
            break
        parts.insert(0, folder.name)
    if not _STARTED.search(parts[0]):  # (no such folder: a shard's, its run's name alone)
        parts = [run_dir.name]
    # (a header's value: a point's label of another alphabet as ?, never a broken request)
    return ("/".join(parts) + "-").encode("ascii", "replace").decode("ascii")


_STARTED = re.compile(r"\d{8}T\d{6}Z")  # a folder's UTC start, as every result folder has


def resolve_api_key(client_cfg: AnyClient) -> str | None:
    """The key to send: ``client.api_key``, else the variable named by ``api_key_env``; None
    when the client's ``headers`` set ``Authorization`` (it replaces the bearer key: the
    scenario's validation refuses it beside an ``api_key`` or ``api_key_env`` given)."""
    if client_cfg.api_key is not None:
        return client_cfg.api_key.get_secret_value() or None
    if any(name.lower() == "authorization" for name in client_cfg.headers):
        return None
    return os.environ.get(client_cfg.api_key_env) or None


class HeaderVariableMissing(ConfigurationError):
    """A ``${NAME}`` of ``client.headers`` names a variable that is unset or empty (or whose
    value cannot be sent): ``header`` is the header's name, ``variable`` the variable's, and
    ``message`` what to do, without the key's place (the caller adds it: ``Scenario.at_key``)."""

    def __init__(self, header: str, variable: str, message: str) -> None:
        super().__init__(f"headers.{header}: {message}")
        self.header = header
        self.variable = variable
        self.message = message


def resolve_headers(
    client_cfg: AnyClient,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """``client.headers`` with each ``${NAME}`` replaced by the variable ``NAME`` of
    ``environ`` (default: this process' environment, as ``api_key_env`` is read: a distributed
    run's shards read their own nodes'). Raises :class:`HeaderVariableMissing` when one is unset
    or empty, or holds what a header cannot (a line break, a control character)."""
    return resolve_header_values(client_cfg.headers, environ)


def resolve_header_values(
    headers: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
    where: str = "the scenario",
) -> dict[str, str]:
    """``headers`` with each ``${NAME}`` replaced by the variable ``NAME`` of ``environ``
    (default: this process' environment); :class:`HeaderVariableMissing` as
    :func:`resolve_headers` raises it, its fix naming ``where`` (where the value may be written
    instead: ``the scenario``, a microbenchmark's ``--headers``)."""
    from veeksha.scenario.clients import ENV_REFERENCE, header_value_problem

    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, value in headers.items():
        if "${" in value:
            for variable in ENV_REFERENCE.findall(value):
                given = env.get(variable, "")
                if not given:
                    raise HeaderVariableMissing(
                        name,
                        variable,
                        f"${{{variable}}} is not set (or is empty) in this environment: export "
                        f"{variable}, or write the header's value in {where}",
                    )
                problem = header_value_problem(given)
                if problem is not None:
                    raise HeaderVariableMissing(
                        name, variable, f"${{{variable}}} cannot be sent: {problem}"
                    )
        out[name] = ENV_REFERENCE.sub(lambda m: env[m.group(1)], value)
    return out


def client_secrets(
    client_cfg: AnyClient,
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """What a client sends that must never be written out, for the redactors of error texts,
    run.log and server.log: its API key, the value of each credential-like header
    (``secret_header``), and each variable a ``${NAME}`` of its headers reads that is at least
    :data:`~veeksha.redact.MIN_SECRET_LENGTH` long (shorter ones, ``eu-1``, would mask common
    words). Variables that are unset are left out (the run refuses them before it starts)."""
    from veeksha.redact import MIN_SECRET_LENGTH, header_secrets
    from veeksha.scenario.clients import ENV_REFERENCE

    env = os.environ if environ is None else environ
    resolved: dict[str, str] = {}
    variables: list[str] = []
    for name, value in client_cfg.headers.items():
        read = [env.get(variable, "") for variable in ENV_REFERENCE.findall(value)]
        variables += [v for v in read if len(v) >= MIN_SECRET_LENGTH]
        if all(read):
            resolved[name] = ENV_REFERENCE.sub(lambda m: env[m.group(1)], value)
    secrets = header_secrets(resolve_api_key(client_cfg), resolved) + variables
    return [secret for secret in secrets if secret]


class WorkerSpawn(msgspec.Struct, kw_only=True):
    """What a worker process reads from its stdin at start-up."""

    worker_id: int
    parent_pid: int
    cpus: list[int]
    channel_fd: int  # the worker's end of its link to the main process (inherited)
    bulk_fd: int = -1  # the worker's end of its bulk link (deferrable Results); -1: none
    settings: WorkerSettings
    more_settings: list[WorkerSettings] = []  # clients 1, 2, … of a run with several clients
