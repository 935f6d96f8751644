"""Where a client's endpoint is, and the context windows the built-in simulator takes from its
clients: pure functions of a loaded scenario, used by the run's target (``engine.target``) and
by a managed ``veeksha_sim`` server (``server.managed``) alike, so both serve the same windows
and a managed server's identity tells apart sweep points whose client windows differ."""

from __future__ import annotations

import os
from typing import Any

from veeksha.errors import ConfigurationError
from veeksha.scenario.clients import SCENARIO_KEY_HOME, api_base_problem
from veeksha.scenario.models import AnyClient, Scenario
from veeksha.scenario.simulator import SimulatorConfig, SimulatorModel

__all__ = [
    "client_api_base",
    "context_limits",
    "served_simulator",
    "simulated_models",
    "with_context_limits",
]


def client_api_base(client: AnyClient, key_home: str = SCENARIO_KEY_HOME) -> str | None:
    """The client's endpoint: its ``api_base``, else ``OPENAI_API_BASE`` (checked as the
    scenario's is, a problem named as that variable: the user wrote no key), else None (the
    built-in simulator or a managed server serves it). ``key_home``: where the message of a
    URL holding credentials says the key goes (``api_base_problem``)."""
    if client.api_base:
        return client.api_base
    from_env = os.environ.get("OPENAI_API_BASE") or None
    problem = None if from_env is None else api_base_problem(from_env, key_home)
    if problem is not None:  # (the scenario's own api_base was checked as it was loaded)
        raise ConfigurationError(f"OPENAI_API_BASE (environment variable): {problem}")
    return from_env


def context_limits(scenario: Scenario) -> tuple[dict[str, int], list[str]]:
    """The context windows the built-in simulator takes from its clients: model → the
    ``client.max_model_len`` adopted for it (the largest of its clients', so that no request a
    client holds to fit is refused), for every model whose own ``max_model_len`` was left to
    its default (``simulator.max_model_len``, or the ``simulator.models`` entry's); and one
    line per model with a client limit saying which window it serves with and why."""
    config = scenario.simulator
    wanted: dict[str, int] = {}
    for _, client in scenario.client_entries():
        if client.max_model_len is None or client_api_base(client) is not None:
            continue
        model = client.model or config.model
        wanted[model] = max(wanted.get(model, 0), client.max_model_len)
    section_set = "max_model_len" in config.model_fields_set
    adopted: dict[str, int] = {}
    lines: list[str] = []
    for model, limit in wanted.items():
        entry = config.models.get(model)
        if entry is not None and entry.max_model_len is not None:
            own, key = entry.max_model_len, f"simulator.models.{model}.max_model_len"
        elif section_set:
            own, key = config.max_model_len, "simulator.max_model_len"
        else:
            adopted[model] = limit
            lines.append(f"{model}: max_model_len {limit} from client.max_model_len")
            continue
        note = "" if own == limit else f" (client.max_model_len {limit} differs)"
        lines.append(f"{model}: max_model_len {own} from {key}{note}")
    return adopted, lines


def with_context_limits(scenario: Scenario, config: SimulatorConfig) -> SimulatorConfig:
    """``config``, the built-in simulator's settings for ``scenario`` (its ``model`` and
    ``models`` as it serves them), with the window of each model it serves taken from its
    clients where its own was left out (:func:`context_limits`): the simulator ``veeksha run``
    starts and a ``server: {type: veeksha_sim}`` alike, so that the managed one's identity
    (``server_identity``) tells apart sweep points whose client windows differ."""
    models = dict(config.models)
    update: dict[str, Any] = {}
    for name, limit in context_limits(scenario)[0].items():
        if name == config.model:
            update["max_model_len"] = limit
        elif name in models:
            models[name] = models[name].model_copy(update={"max_model_len": limit})
            update["models"] = models
    return config.model_copy(update=update) if update else config


def simulated_models(scenario: Scenario) -> list[str]:
    """The models a simulator serving the scenario's clients must serve, in order (empty:
    every client has its endpoint): each client without an endpoint names its model, or takes
    ``simulator.model``."""
    models = [
        client.model or scenario.simulator.model
        for _, client in scenario.client_entries()
        if client_api_base(client) is None
    ]
    return list(dict.fromkeys(models))


def served_simulator(scenario: Scenario) -> SimulatorConfig:
    """The simulator's settings as it serves the scenario's clients: the one ``veeksha run``
    starts and a ``server: {type: veeksha_sim}`` alike. It serves whatever models the clients
    without an endpoint name: the first as its ``model`` (unless ``simulator.models``
    describes it), the others as ``models`` entries (their own settings if
    ``simulator.models`` has them, else the section's); each model's window is its clients'
    ``max_model_len`` where the simulator's was left out (:func:`with_context_limits`)."""
    config = scenario.simulator
    models = simulated_models(scenario) or [config.model]
    primary = config.model if models[0] in config.models else models[0]
    extra = dict(config.models)
    for name in models:
        if name != primary:
            extra.setdefault(name, SimulatorModel())
    served = config.model_copy(update={"model": primary, "models": extra})
    return with_context_limits(scenario, served)
