"""``WorkerSettings``: everything a worker process needs to send requests, as one msgspec Struct.

It travels to each worker once, at spawn, through the worker's stdin pipe (in memory: the API key
never appears in argv, the environment, logs or outputs; ``repr`` masks it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from veeksha.errors import ConfigurationError

if TYPE_CHECKING:
    from veeksha.scenario.models import ChatCompletionsClient, CompletionsClient

__all__ = ["WorkerSettings", "WorkerSpawn", "resolve_api_key"]


class WorkerSettings(msgspec.Struct, kw_only=True):
    """How the workers send requests.

    ``endpoint`` is the full URL (``.../v1/chat/completions`` or ``.../v1/completions``);
    ``chat`` selects the body and response shape. ``max_connections`` 0 means no cap on the
    keep-alive pool. ``dry_run`` sends nothing: each request completes at once with
    ``max_tokens`` synthetic words.
    """

    endpoint: str
    api_key: str | None = None
    model: str | None = None
    chat: bool = True
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

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={'***' if name == 'api_key' and value else value!r}"
            for name, value in ((f, getattr(self, f)) for f in self.__struct_fields__)
        )
        return f"WorkerSettings({fields})"

    @classmethod
    def from_client(
        cls,
        client_cfg: ChatCompletionsClient | CompletionsClient,
        api_base: str,
        api_key: str | None,
        dry_run: bool = False,
    ) -> WorkerSettings:
        """Settings for a scenario's ``client`` section sending to ``api_base`` (…/v1).

        ``api_key`` is the resolved key (see ``resolve_api_key``) or None for no header.
        Raises ``ConfigurationError`` when ``additional_sampling_params`` sets a key veeksha
        controls itself.
        """
        chat = client_cfg.type == "openai_chat_completions"
        reserved = {"messages", "prompt", "model", "stream", client_cfg.max_tokens_param}
        if client_cfg.min_tokens_param:
            reserved.add(client_cfg.min_tokens_param)
        clash = sorted(reserved & set(client_cfg.additional_sampling_params))
        if clash:
            raise ConfigurationError(
                f"client.additional_sampling_params sets {', '.join(clash)}, which veeksha "
                "controls (use client.stream, client.model and the output length settings)"
            )
        path = "/chat/completions" if chat else "/completions"
        return cls(
            endpoint=api_base.rstrip("/") + path,
            api_key=api_key,
            model=client_cfg.model,
            chat=chat,
            stream=client_cfg.stream,
            max_tokens_param=client_cfg.max_tokens_param,
            min_tokens_param=client_cfg.min_tokens_param,
            ignore_eos=client_cfg.ignore_eos,
            prompt_fallback=client_cfg.use_min_tokens_prompt_fallback,
            extra_params=dict(client_cfg.additional_sampling_params),
            request_timeout_s=client_cfg.request_timeout,
            max_retries=client_cfg.max_retries,
            dry_run=dry_run,
        )


def resolve_api_key(client_cfg: ChatCompletionsClient | CompletionsClient) -> str | None:
    """The key to send: ``client.api_key``, else the variable named by ``api_key_env``."""
    if client_cfg.api_key is not None:
        return client_cfg.api_key.get_secret_value() or None
    return os.environ.get(client_cfg.api_key_env) or None


class WorkerSpawn(msgspec.Struct, kw_only=True):
    """What a worker process reads from its stdin at start-up."""

    worker_id: int
    parent_pid: int
    cpus: list[int]
    channel_fd: int  # the worker's end of its link to the main process (inherited)
    bulk_fd: int = -1  # the worker's end of its bulk link (deferrable Results); -1: none
    settings: WorkerSettings
    more_settings: list[WorkerSettings] = []  # clients 1, 2, … of a run with several clients
