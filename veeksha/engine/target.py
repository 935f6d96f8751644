"""The server under test: a configured endpoint, or the built-in simulator started for the run."""

from __future__ import annotations

import contextlib
import json
import os
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import psutil

from veeksha.dispatch.settings import resolve_api_key
from veeksha.errors import ConfigurationError, TargetError
from veeksha.net import fetch, setup_timeout
from veeksha.scenario.models import Scenario

if TYPE_CHECKING:
    from veeksha.server.managed import ManagedServer
    from veeksha.simulator.process import SimulatorProcess

__all__ = [
    "PROBE_TIMEOUT_S",
    "Target",
    "TargetContext",
    "check_reachable",
    "describe",
    "spawn_simulator",
]

PROBE_TIMEOUT_S = 5.0


@dataclass
class Target:
    """Where requests go, resolved: base URL (…/v1), model, API key, and what it is."""

    api_base: str
    model: str
    api_key: str | None
    kind: str  # "simulator" | "endpoint" | "managed" | "dry_run"
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
    api_base: str, api_key: str | None, timeout_s: float | None = None, model: str | None = None
) -> None:
    """GET {api_base}/models; a clear TargetError when no HTTP answer comes from there (within
    ``timeout_s``, the whole exchange: see ``veeksha.net``), when it refuses the key, when it
    answers 2xx with something that is not JSON, or when it lists its models and ``model`` is
    not one of them (every request would fail)."""
    url = api_base.rstrip("/") + "/models"
    answer = fetch(
        "GET",
        url,
        api_key=api_key,
        timeout_s=setup_timeout(PROBE_TIMEOUT_S) if timeout_s is None else timeout_s,
        fix="Is an OpenAI-compatible server running there? Fix client.api_base (or unset it "
        "to use the built-in simulator)",
    )
    if answer.status in (401, 403):
        raise TargetError(
            f"{api_base} refused the credentials (HTTP {answer.status}): set client.api_key_env "
            "to the environment variable holding a valid key"
        )
    if not answer.ok:  # some servers have no /models; anything that answers HTTP is reachable
        return
    try:
        served = _served_models(answer.json())
    except ValueError:
        kind = answer.headers.get("content-type") or "no content type"
        raise TargetError(
            f"GET {url} answered HTTP {answer.status} with something that is not JSON "
            f"({' '.join(kind.split())[:60]}): is client.api_base the address of an "
            "OpenAI-compatible API (usually ending in /v1)?"
        ) from None
    if model is not None and served and model not in served:
        raise TargetError(
            f"client.model {model!r} is not served by {api_base} (it serves "
            f"{', '.join(repr(m) for m in served[:5])}): fix client.model"
        )


def _served_models(answer: Any) -> list[str]:
    """Model ids of an OpenAI ``/models`` answer (decoded JSON); empty when it is not one."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        return []
    return [str(entry["id"]) for entry in data if isinstance(entry, dict) and "id" in entry]


class TargetContext(AbstractContextManager["Target"]):
    """Context manager resolving the scenario's target; starts and stops the simulator."""

    def __init__(
        self,
        scenario: Scenario,
        dry_run: bool = False,
        simulator_cpus: list[int] | None = None,
        simulator: SimulatorProcess | None = None,
        server: ManagedServer | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self._scenario = scenario
        self._dry_run = dry_run
        self._simulator_cpus = simulator_cpus
        # a simulator spawned ahead (``spawn_simulator``) is used and stopped here
        self._simulator: SimulatorProcess | None = simulator
        # a managed server already running (shared by several runs) is used, never stopped here
        self.server: ManagedServer | None = server
        self._own_server: ManagedServer | None = None
        self._run_dir = run_dir

    def __enter__(self) -> Target:
        scenario = self._scenario
        client = scenario.client
        api_key = resolve_api_key(client)
        if self._dry_run:
            return Target("dry-run://", client.model or "dry-run", None, "dry_run")
        if scenario.server is not None:
            return self._managed(api_key)
        api_base = _api_base(scenario)
        if api_base is not None:
            if not client.model:
                raise ConfigurationError(
                    f"client.model is required with api_base {api_base}: set client.model to "
                    "the model the server serves"
                )
            check_reachable(api_base, api_key, model=client.model)
            return Target(api_base.rstrip("/"), client.model, api_key, "endpoint")
        if self._simulator is None:
            self._simulator = _simulator_process(scenario)
            self._simulator.spawn()
        base = self._simulator.wait_ready()
        if self._simulator_cpus:
            _pin_tree(self._simulator.pid, self._simulator_cpus)
        return Target(
            base.rstrip("/"),
            self._simulator.config.model,
            api_key,
            "simulator",
            {"simulator": self._simulator.config_dict()},
        )

    def _managed(self, api_key: str | None) -> Target:
        """The scenario's managed server: the one given, or one started now for this run."""
        from veeksha.server.managed import SERVER_LOG, ManagedServer

        server = self.server
        if server is None:
            log_dir = self._run_dir if self._run_dir is not None else Path.cwd()
            server = ManagedServer.for_scenario(self._scenario, log_dir / SERVER_LOG)
            self._own_server = self.server = server
            server.start()
            if server.config.type == "veeksha_sim" and self._simulator_cpus:
                _pin_tree(server.pid, self._simulator_cpus)
        elif not server.running:
            raise TargetError(f"the managed server given to the run is not running: {server.argv}")
        description = {"server": server.describe()}
        return Target(server.api_base, server.model, api_key, "managed", description)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._own_server is not None:
            self._own_server.stop()
            self._own_server = None
        if self._simulator is not None:
            self._simulator.stop()
            self._simulator = None


def spawn_simulator(scenario: Scenario, dry_run: bool = False) -> SimulatorProcess | None:
    """The built-in simulator the run of ``scenario`` will use, spawned now and not waited for
    (None when the run has a target of its own, or sends nothing): hand it to
    ``TargetContext``, which waits for it and stops it. Spawned before the caller's own set-up
    (the engine's imports), its start-up runs beside that on the other core."""
    if dry_run or _api_base(scenario) is not None or scenario.server is not None:
        return None
    simulator = _simulator_process(scenario)
    simulator.spawn()
    return simulator


def _api_base(scenario: Scenario) -> str | None:
    return scenario.client.api_base or os.environ.get("OPENAI_API_BASE") or None


def _simulator_process(scenario: Scenario) -> SimulatorProcess:
    from veeksha.simulator.process import SimulatorProcess

    config = scenario.simulator
    if scenario.client.model:  # the simulator serves whatever model the scenario names
        config = config.model_copy(update={"model": scenario.client.model})
    return SimulatorProcess(config)


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
