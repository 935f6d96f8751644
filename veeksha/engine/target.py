"""The server under test: a configured endpoint, or the built-in simulator started for the run."""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import psutil

from veeksha.dispatch.settings import resolve_api_key
from veeksha.errors import ConfigurationError, TargetError
from veeksha.scenario.models import Scenario

__all__ = ["Target", "TargetContext", "check_reachable", "describe"]


@dataclass
class Target:
    """Where requests go, resolved: base URL (…/v1), model, API key, and what it is."""

    api_base: str
    model: str
    api_key: str | None
    kind: str  # "simulator" | "endpoint" | "dry_run"
    description: dict[str, Any] = field(default_factory=dict)

    def public_description(self) -> dict[str, Any]:
        """What may be written to outputs: never the API key."""
        return {
            "kind": self.kind,
            "api_base": self.api_base,
            "model": self.model,
            **self.description,
        }


def check_reachable(
    api_base: str, api_key: str | None, timeout_s: float = 5.0, model: str | None = None
) -> None:
    """GET {api_base}/models; a clear TargetError when nothing answers there, or when the
    server lists its models and ``model`` is not one of them (every request would fail)."""
    request = urllib.request.Request(api_base.rstrip("/") + "/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            served = _served_models(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise TargetError(
                f"{api_base} refused the credentials (HTTP {exc.code}): set client.api_key_env "
                "to the environment variable holding a valid key"
            ) from None
        # Some servers have no /models; anything that answers HTTP is reachable.
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TargetError(
            f"cannot reach client.api_base {api_base}: {reason}. Is the server running? "
            "Fix client.api_base (or unset it to use the built-in simulator)"
        ) from None
    else:
        if model is not None and served and model not in served:
            raise TargetError(
                f"client.model {model!r} is not served by {api_base} (it serves "
                f"{', '.join(repr(m) for m in served[:5])}): fix client.model"
            )


def _served_models(body: bytes) -> list[str]:
    """Model ids of an OpenAI ``/models`` answer; empty when it is not one."""
    try:
        data = json.loads(body).get("data")
        return [str(entry["id"]) for entry in data if isinstance(entry, dict) and "id" in entry]
    except (ValueError, AttributeError, TypeError):
        return []


class TargetContext(AbstractContextManager["Target"]):
    """Context manager resolving the scenario's target; starts and stops the simulator."""

    def __init__(
        self, scenario: Scenario, dry_run: bool = False, simulator_cpus: list[int] | None = None
    ) -> None:
        self._scenario = scenario
        self._dry_run = dry_run
        self._simulator_cpus = simulator_cpus
        self._simulator: Any = None

    def __enter__(self) -> Target:
        scenario = self._scenario
        client = scenario.client
        api_key = resolve_api_key(client)
        if self._dry_run:
            return Target("dry-run://", client.model or "dry-run", None, "dry_run")
        api_base = client.api_base or os.environ.get("OPENAI_API_BASE") or None
        if api_base is not None:
            if not client.model:
                raise ConfigurationError(
                    f"client.model is required with api_base {api_base}: set client.model to "
                    "the model the server serves"
                )
            check_reachable(api_base, api_key, model=client.model)
            return Target(api_base.rstrip("/"), client.model, api_key, "endpoint")
        from veeksha.simulator.process import SimulatorProcess

        config = scenario.simulator
        if client.model:  # the simulator serves whatever model the scenario names
            config = config.model_copy(update={"model": client.model})
        self._simulator = SimulatorProcess(config)
        base = self._simulator.start()
        if self._simulator_cpus:
            _pin_tree(self._simulator.pid, self._simulator_cpus)
        model = config.model
        return Target(
            base.rstrip("/"),
            model,
            api_key,
            "simulator",
            {"simulator": self._simulator.config_dict()},
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._simulator is not None:
            self._simulator.stop()
            self._simulator = None


def _pin_tree(pid: int | None, cpus: list[int]) -> None:
    """Pin a process and its children (the simulator) to ``cpus``, best effort."""
    if pid is None:
        return
    with contextlib.suppress(psutil.Error, OSError):
        root = psutil.Process(pid)
        for process in (root, *root.children(recursive=True)):
            process.cpu_affinity(cpus)


def describe(target: Target) -> str:
    """The target as one JSON string for Parquet metadata."""
    return json.dumps(target.public_description(), sort_keys=True, default=str)
