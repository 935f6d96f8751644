"""The server's own profiler around a run's traffic (the scenario's ``server_profile``).

vLLM (started with ``VLLM_TORCH_PROFILER_DIR``, or ``--profiler-config``) and SGLang answer
``POST /start_profile`` and ``POST /stop_profile`` at the server's root: between the two, the
server records a torch profiler trace of its own work, which ``vllm bench serve --profile``
uses to see where a load's time goes. veeksha calls them before t0 (a set-up call: a failure is
exit 2, nothing sent) and after the traffic has drained (the stop writes the trace, which can
take minutes; a failure then is a warning, the run's results kept). Nothing on the traffic path
waits for either. Each distinct server of the run's clients is profiled once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from veeksha.errors import TargetError
from veeksha.net import fetch, server_root, setup_timeout
from veeksha.scenario.server import ServerProfileConfig

__all__ = ["ServerProfiler"]

#: Seconds allowed to a start call (``$VEEKSHA_SETUP_TIMEOUT_S`` overrides it).
START_TIMEOUT_S = 30.0
_FIX = (
    "Does the server profile? vLLM needs VLLM_TORCH_PROFILER_DIR (or --profiler-config) when it "
    "starts, SGLang answers it as it is; set server_profile.start_path for another path, or "
    "server_profile.enabled: false"
)


@dataclass
class _Server:
    root: str
    api_key: str | None
    headers: dict[str, str]
    started: bool = False


@dataclass
class ServerProfiler:
    """Starts and stops the profiler of each server in ``targets`` ((api_base, api_key,
    headers) of the run's clients); ``account`` is summary.json's ``run.server_profile``."""

    config: ServerProfileConfig
    targets: Sequence[tuple[str, str | None, dict[str, str]]]
    warn: Callable[[str], None]
    _servers: list[_Server] = field(default_factory=list)
    account: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for api_base, api_key, headers in self.targets:
            root = server_root(api_base)
            if root not in seen:
                seen.add(root)
                self._servers.append(_Server(root, api_key, dict(headers)))
        self.account = {"servers": [s.root for s in self._servers], "started": False}

    def start(self) -> None:
        """Start every server's profiler; ``TargetError`` (exit 2) when one does not answer 2xx
        (the ones started before it are stopped first)."""
        timeout = setup_timeout(START_TIMEOUT_S)
        for server in self._servers:
            url = server.root + self.config.start_path
            answer = fetch(
                "POST", url, json_body={}, api_key=server.api_key, timeout_s=timeout,
                fix=_FIX, headers=server.headers,
            )  # fmt: skip
            if not answer.ok:
                self.stop()
                text = answer.excerpt(200)
                raise TargetError(f"POST {url}: HTTP {answer.status} {text}. {_FIX}")
            server.started = True
        self.account["started"] = True
        self.account["started_at_wall"] = time.time()

    def stop(self) -> None:
        """Stop every profiler started (none left: nothing to do); a failure is a warning (and
        ``account["error"]``)."""
        if not any(server.started for server in self._servers):
            return
        began = time.monotonic()
        errors = []
        for server in self._servers:
            if not server.started:
                continue
            server.started = False
            url = server.root + self.config.stop_path
            try:
                answer = fetch(
                    "POST", url, json_body={}, api_key=server.api_key,
                    timeout_s=self.config.stop_timeout, headers=server.headers,
                )  # fmt: skip
            except TargetError as exc:
                errors.append(str(exc))
                continue
            if not answer.ok:
                errors.append(f"POST {url}: HTTP {answer.status} {answer.excerpt(200)}")
        self.account["stop_s"] = round(time.monotonic() - began, 3)
        if errors:
            self.account["error"] = "; ".join(errors)
            self.warn(f"server profile: not stopped cleanly: {self.account['error']}")
