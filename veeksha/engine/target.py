"""The server under test: a configured endpoint, or the built-in simulator started for the run."""

from __future__ import annotations

import contextlib
import json
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from veeksha.dispatch.settings import HeaderVariableMissing, resolve_api_key, resolve_headers
from veeksha.errors import ConfigurationError, TargetError
from veeksha.net import NOT_READY_STATUSES, fetch, setup_timeout
from veeksha.scenario.clients import DEFAULT_KEY_ENV
from veeksha.scenario.models import (
    DEFAULT_CLIENT,
    AnyClient,
    Scenario,
)
from veeksha.scenario.windows import (
    client_api_base,
    context_limits,
    served_simulator,
    simulated_models,
    with_context_limits,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from veeksha.server.managed import ManagedServer
    from veeksha.simulator.process import SimulatorProcess

__all__ = [
    "PROBE_TIMEOUT_S",
    "SCENARIO_NAMES",
    "ClientTarget",
    "SettingNames",
    "Target",
    "TargetContext",
    "check_reachable",
    "client_api_base",
    "context_limits",
    "describe",
    "dry_run_model",
    "resolved_headers",
    "spawn_simulator",
    "wait_until_ready",
    "with_context_limits",
]

PROBE_TIMEOUT_S = 5.0
#: Seconds allowed to the one request sent when ``/models`` does not answer (a real server's
#: first answer may come late: it compiles, it warms up).
TRIAL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class SettingNames:
    """How the target check's messages name the settings its fixes change: a scenario's keys
    (``SCENARIO_NAMES``), or the flags of a command that writes the scenario itself (a
    microbenchmark's ``--api_base``), so that a message never names a key the user did not
    write."""

    api_base: str
    model: str
    api_key: str  # (what to set to a valid key)
    headers: str = "the client's headers"  # (what to check beside it, when headers are sent)
    ready_timeout: str = ""  # (what waits for a server that is starting; "": nothing does)


SCENARIO_NAMES = SettingNames(
    "client.api_base",
    "client.model",
    "client.api_key_env to the environment variable holding",
    ready_timeout="client.ready_timeout",
)


@dataclass
class ClientTarget:
    """Where one client's requests go (``Scenario.client_entries``, in order)."""

    name: str
    api_base: str
    model: str
    api_key: str | None
    kind: str  # "simulator" | "endpoint" | "dry_run"
    headers: dict[str, str] = field(default_factory=dict)  # client.headers, resolved

    def public_description(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "api_base": self.api_base,
            "model": self.model,
        }


@dataclass
class Target:
    """Where requests go, resolved: base URL (…/v1), model, API key, and what it is.

    These are the first client's; ``clients`` holds every client's (one, named ``default``,
    for a scenario with a single ``client:``).
    """

    api_base: str
    model: str
    api_key: str | None
    kind: str  # "simulator" | "endpoint" | "managed" | "dry_run"
    description: dict[str, Any] = field(default_factory=dict)
    clients: list[ClientTarget] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.clients:
            self.clients = [
                ClientTarget(DEFAULT_CLIENT, self.api_base, self.model, self.api_key, self.kind)
            ]

    @property
    def headers(self) -> dict[str, str]:
        """The first client's resolved ``headers`` (sent beside ``api_key``)."""
        return self.clients[0].headers

    def public_description(self) -> dict[str, Any]:
        """What may be written to outputs: never the API key."""
        out = {
            "kind": self.kind,
            "api_base": self.api_base,
            "model": self.model,
            **self.description,
        }
        if len(self.clients) > 1 or self.clients[0].name != DEFAULT_CLIENT:
            out["clients"] = [client.public_description() for client in self.clients]
        return out


def trial_request(client: AnyClient, model: str) -> tuple[str, dict[str, Any]]:
    """The smallest request of ``client``'s kind (path under its api_base, JSON body): a word
    in, one token out (an embedding of a word), as the client sends its own."""
    if client.type == "openai_embeddings":
        return "/embeddings", {"model": model, "input": "Hello"}
    if client.type == "openai_completions":
        return "/completions", {"model": model, "prompt": "Hello", client.max_tokens_param: 1}
    message = {"role": "user", "content": "Hello"}
    return "/chat/completions", {"model": model, "messages": [message], client.max_tokens_param: 1}


_READY_POLL_S = (0.1, 0.2, 0.5, 1.0)  # between readiness probes: quick at first, then calmer


def wait_until_ready(
    api_base: str,
    api_key: str | None,
    timeout_s: float,
    key: str,
    headers: dict[str, str] | None = None,
    say: Callable[[str], None] | None = None,
    trial: tuple[str, dict[str, Any]] | None = None,
) -> float:
    """Wait, at most ``timeout_s`` seconds (``key``: the setting that holds it, named by the
    failure's fix), for a server that is starting: poll ``GET {api_base}/models`` until it
    answers with a status not in :data:`NOT_READY_STATUSES`, then send ``trial`` (a path and a
    body: :func:`trial_request`, one token) until it too answers outside them, since a server
    may list its models before it can serve them (llama.cpp answers ``/models`` while it loads
    and 503 to everything else); what they answer then is :func:`check_reachable`'s to judge.
    The seconds waited. ``say`` gets a line when the wait begins and each time what stops the
    server changes, and one when it ends, so that a long wait is never silent."""
    base = api_base.rstrip("/")
    calls: list[tuple[str, str, dict[str, Any] | None]] = [("GET", "/models", None)]
    if trial is not None:
        calls.append(("POST", trial[0], trial[1]))
    start = time.monotonic()
    deadline = start + timeout_s
    said = ""
    attempt = 0
    for method, path, body in calls:
        while True:
            problem = _not_ready(method, base + path, body, api_key, headers, deadline)
            if problem is None:
                break
            if say is not None and problem != said:
                say(f"waiting up to {timeout_s:g} s ({key}) for {api_base}: {problem}")
            said = problem
            left = deadline - time.monotonic()
            if left <= 0:
                raise TargetError(
                    f"{api_base} was not ready within {timeout_s:g} s ({problem}); start the "
                    f"server, or raise {key} if it needs longer"
                )
            time.sleep(min(_READY_POLL_S[min(attempt, len(_READY_POLL_S) - 1)], left))
            attempt += 1
    waited = time.monotonic() - start
    if said and say is not None:
        say(f"{api_base} is ready after {waited:.1f} s")
    return waited


def _not_ready(
    method: str,
    url: str,
    body: dict[str, Any] | None,
    api_key: str | None,
    headers: dict[str, str] | None,
    deadline: float,
) -> str | None:
    """Why the server is not ready to serve ``method url`` (no answer, or one of
    :data:`NOT_READY_STATUSES`), or None when it answered otherwise."""
    limit = setup_timeout(PROBE_TIMEOUT_S if body is None else TRIAL_TIMEOUT_S)
    try:
        answer = fetch(
            method,
            url,
            json_body=body,
            api_key=api_key,
            headers=headers,
            timeout_s=max(min(limit, deadline - time.monotonic()), 0.1),
        )
    except TargetError as exc:
        return str(exc)
    if answer.status not in NOT_READY_STATUSES:
        return None
    text = answer.excerpt()
    return f"{method} {url}: HTTP {answer.status}{': ' + text if text else ''}"


def check_reachable(
    api_base: str,
    api_key: str | None,
    timeout_s: float | None = None,
    model: str | None = None,
    names: SettingNames = SCENARIO_NAMES,
    headers: dict[str, str] | None = None,
    trial: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """GET {api_base}/models; a clear TargetError when no HTTP answer comes from there (within
    ``timeout_s``, the whole exchange: see ``veeksha.net``), when it refuses the key, when it
    answers 2xx with something that is not JSON, or when it lists its models and ``model`` is
    not one of them (every request would fail). ``names``: how the fixes name the settings;
    ``headers``: the client's own (``client.headers``), sent as its requests send them.

    Some servers have no ``/models``: when it answers otherwise than 2xx, ``trial`` (a path
    under ``api_base`` and a body: :func:`trial_request`) is sent, and a TargetError says so
    when that is not answered 2xx either (a web server that is not an OpenAI API, a proxy's
    404 page: every request of the run would fail). Without ``trial`` any HTTP answer is
    taken as a server that is there."""
    url = api_base.rstrip("/") + "/models"
    answer = fetch(
        "GET",
        url,
        api_key=api_key,
        headers=headers,
        timeout_s=setup_timeout(PROBE_TIMEOUT_S) if timeout_s is None else timeout_s,
        fix=f"Is an OpenAI-compatible server running there? Fix {names.api_base} (or unset it "
        f"to use the built-in simulator){_wait_fix(names)}",
    )
    if answer.status in (401, 403):
        also = f" (and check {names.headers})" if headers else ""
        raise TargetError(
            f"{api_base} refused the credentials (HTTP {answer.status}): set {names.api_key} "
            f"a valid key{also}"
        )
    if answer.status == 404 and not api_base.rstrip("/").endswith("/v1"):
        _refuse_missing_v1(api_base, api_key, names, headers)
    if answer.status in NOT_READY_STATUSES and names.ready_timeout:
        text = answer.excerpt()
        raise TargetError(
            f"GET {url} answered HTTP {answer.status}{': ' + text if text else ''}: the server "
            f"is there but not serving yet (still loading its model?){_wait_fix(names)}"
        )
    if not answer.ok:  # some servers have no /models: one request of the run's kind then
        if trial is not None:
            _try_one_request(api_base, api_key, headers, trial, answer.status, names)
        return
    try:
        served = _served_models(answer.json())
    except ValueError:
        kind = answer.headers.get("content-type") or "no content type"
        raise TargetError(
            f"GET {url} answered HTTP {answer.status} with something that is not JSON "
            f"({' '.join(kind.split())[:60]}): is {names.api_base} the address of an "
            "OpenAI-compatible API (usually ending in /v1)?"
        ) from None
    if model is not None and served and model not in served:
        raise TargetError(
            f"{names.model} {model!r} is not served by {api_base} (it serves "
            f"{', '.join(repr(m) for m in served[:5])}): fix {names.model}"
        )


def _wait_fix(names: SettingNames) -> str:
    if not names.ready_timeout:
        return ""
    return f"; to wait for a server that is starting, set {names.ready_timeout} (seconds)"


def _try_one_request(
    api_base: str,
    api_key: str | None,
    headers: dict[str, str] | None,
    trial: tuple[str, dict[str, Any]],
    models_status: int,
    names: SettingNames,
) -> None:
    path, body = trial
    url = api_base.rstrip("/") + path
    fix = (
        f"is {names.api_base} the address of an OpenAI-compatible API, and {names.model} "
        f"{body['model']!r} a model it serves?"
    )
    answer = fetch(
        "POST",
        url,
        json_body=body,
        api_key=api_key,
        headers=headers,
        timeout_s=setup_timeout(TRIAL_TIMEOUT_S),
        fix=f"(GET {api_base.rstrip('/')}/models answered HTTP {models_status}) {fix}",
    )
    if not answer.ok:
        text = answer.excerpt()
        raise TargetError(
            f"GET {api_base.rstrip('/')}/models answered HTTP {models_status}, and a request of "
            f"one token, POST {url}, HTTP {answer.status}{': ' + text if text else ''}; every "
            f"request of the run would fail: {fix}"
        )


def _refuse_missing_v1(
    api_base: str, api_key: str | None, names: SettingNames, headers: dict[str, str] | None
) -> None:
    """``{api_base}/models`` is not found: when ``{api_base}/v1/models`` lists models, every
    request would be a 404 too (the paths live under /v1): a TargetError naming the fix."""
    with_v1 = api_base.rstrip("/") + "/v1"
    try:
        answer = fetch(
            "GET",
            with_v1 + "/models",
            api_key=api_key,
            headers=headers,
            timeout_s=setup_timeout(2.0),
        )
        served = _served_models(answer.json()) if answer.ok else []
    except (TargetError, ValueError):
        return
    if served:
        raise TargetError(
            f"GET {api_base.rstrip('/')}/models answered HTTP 404 and {with_v1}/models lists "
            f"models: every request would be a 404; set {names.api_base} to {with_v1}"
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
        say: Callable[[str], None] | None = None,
    ) -> None:
        """``say``: where the wait for a server that is starting says so (run.log)."""
        self._scenario = scenario
        self._say = say
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
        entries = scenario.client_entries()
        if self._dry_run:
            # (nothing is sent, but the run it stands for would refuse an unset ${NAME}: a dry
            # run that checks a scenario says so too)
            resolved_headers(scenario)
            clients = [
                ClientTarget(name, "dry-run://", dry_run_model(scenario, client), None, "dry_run")
                for name, client in entries
            ]
            first = clients[0]
            return Target(first.api_base, first.model, None, "dry_run", clients=clients)
        headers = resolved_headers(scenario)  # (before a managed server starts)
        managed = self._managed() if scenario.server is not None else None
        resolved: list[ClientTarget | None] = []
        for (name, client), sent in zip(entries, headers, strict=True):
            api_key = resolve_api_key(client)
            api_base = client_api_base(client)
            label = "client" if name == DEFAULT_CLIENT and not scenario.clients else name
            # (the default variable, unset, is a server without keys; any other was chosen)
            named = client.api_key_env != DEFAULT_KEY_ENV and client.api_key is None
            if named and api_key is None and (api_base is not None or managed is not None):
                raise ConfigurationError(
                    f"{label}.api_key_env names {client.api_key_env}, which is not set (or is"
                    " empty) in this environment: export it, or remove api_key_env to send no key"
                )
            if api_base is None and managed is not None:  # served by the managed server
                model = client.model or managed.model
                resolved.append(
                    ClientTarget(name, managed.api_base, model, api_key, "managed", sent)
                )
                continue
            if api_base is None:
                resolved.append(None)  # served by the built-in simulator
                continue
            if not client.model:
                raise ConfigurationError(
                    f"{label}: model is required with api_base {api_base}: set its model to "
                    "the model the server serves"
                )
            trial = trial_request(client, client.model)
            if client.ready_timeout > 0:
                wait = client.ready_timeout
                setting = f"{label}.ready_timeout"
                wait_until_ready(api_base, api_key, wait, setting, sent, self._say, trial)
            check_reachable(api_base, api_key, model=client.model, headers=sent, trial=trial)
            resolved.append(
                ClientTarget(name, api_base.rstrip("/"), client.model, api_key, "endpoint", sent)
            )
        description: dict[str, Any] = {} if managed is None else {"server": managed.describe()}
        if managed is not None and managed.config.type == "veeksha_sim":
            limits = context_limits(scenario)[1]
            if limits:  # (it adopts client windows as the built-in one does: say so)
                description["context_limits"] = limits
        if any(target is None for target in resolved):
            if self._simulator is None:
                self._simulator = _simulator_process(scenario)
                self._simulator.spawn()
            base = self._simulator.wait_ready().rstrip("/")
            if self._simulator_cpus:
                # (one process: no children to find in /proc, ~2-4 ms of the start-up)
                children = self._simulator.config.processes > 1
                _pin_tree(self._simulator.pid, self._simulator_cpus, descendants=children)
            description = {"simulator": self._simulator.config_dict()}
            limits = context_limits(scenario)[1]
            if limits:  # (run.log's target line says where each context window came from)
                description["context_limits"] = limits
            default_model = self._simulator.config.model
            for i, (name, client) in enumerate(entries):
                if resolved[i] is None:
                    model = client.model or default_model
                    key = resolve_api_key(client)
                    resolved[i] = ClientTarget(name, base, model, key, "simulator", headers[i])
        clients = [target for target in resolved if target is not None]
        first = clients[0]
        return Target(first.api_base, first.model, first.api_key, first.kind, description, clients)

    def _managed(self) -> ManagedServer:
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
        return server

    def stop_simulator_soon(self) -> None:
        """Ask the built-in simulator to stop now, without waiting (the run needs it no more):
        its shutdown runs beside the evaluation; leaving the context waits for it."""
        if self._simulator is not None:
            self._simulator.terminate()

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


def resolved_headers(scenario: Scenario) -> list[dict[str, str]]:
    """Each client's ``headers`` with its ``${NAME}`` variables read (``resolve_headers``); a
    variable unset is a ConfigurationError at the key that names it. A run reads them when its
    target is resolved (before t0, a dry run too); a sweep or capacity search reads every
    point's before its first point, so that a missing variable stops it before any runs."""
    out = []
    entries = scenario.client_entries()
    for prefix, (_, client) in zip(scenario.client_key_paths(), entries, strict=True):
        try:
            out.append(resolve_headers(client))
        except HeaderVariableMissing as missing:
            raise ConfigurationError(
                scenario.at_key((*prefix, "headers", missing.header), missing.message)
            ) from None
    return out


def spawn_simulator(
    scenario: Scenario, dry_run: bool = False, fork: bool = False
) -> SimulatorProcess | None:
    """The built-in simulator the run of ``scenario`` will use, spawned now and not waited for
    (None when the run has a target of its own, or sends nothing): hand it to
    ``TargetContext``, which waits for it and stops it. Spawned before the caller's own set-up
    (the engine's imports), its start-up runs beside that on the other core. ``fork``: a fork
    of this process (``veeksha.forked``) instead of a fresh interpreter."""
    if dry_run or scenario.server is not None or not simulated_models(scenario):
        return None
    simulator = _simulator_process(scenario, fork)
    simulator.spawn()
    return simulator


def dry_run_model(scenario: Scenario, client: AnyClient) -> str:
    """The model a dry run records for ``client``: the one the run would request (its own;
    without one, the managed server's or the built-in simulator's, whichever would serve it),
    so a dry run's rows are the run's; ``dry-run`` for an endpoint without a model, which a
    run refuses."""
    if client.model:
        return client.model
    if client_api_base(client) is not None:
        return "dry-run"
    if scenario.server is not None:
        from veeksha.server.managed import managed_model

        return managed_model(scenario)
    return scenario.simulator.model


def _simulator_process(scenario: Scenario, fork: bool = False) -> SimulatorProcess:
    from veeksha.simulator.process import SimulatorProcess

    # every model of the clients it serves, a client's max_model_len the window of its model
    # where the simulator's was left alone (``scenario.windows.served_simulator``)
    return SimulatorProcess(served_simulator(scenario), fork=fork)


def _pin_tree(pid: int | None, cpus: list[int], descendants: bool = True) -> None:
    """Pin a process and (unless told it has none) its descendants (the simulator's) to
    ``cpus``, best effort."""
    if pid is None:
        return
    for member in _process_tree(pid) if descendants else [pid]:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(member, cpus)


def _process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc's parent links (psutil's way, without its
    import: ~15 ms of every run's start-up)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    # (the command name may hold spaces and parentheses: split after the last)
                    parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry.name))
    tree = [pid]
    for member in tree:  # (grows while it is walked: breadth first)
        tree.extend(children.get(member, ()))
    return tree


def describe(target: Target) -> str:
    """The target as one JSON string for Parquet metadata."""
    return json.dumps(target.public_description(), sort_keys=True, default=str)
