"""One built-in simulator for a whole experiment: started once, every point's client aimed at it.

An experiment of many points (a microbenchmark, a capacity search) would otherwise start and stop
a simulator per point, paying its start-up each time and losing its state (prefix cache, process
warm-up) between points. :func:`shared_simulator` starts the simulator the scenario would use
(``scenario.simulator``, serving every model its clients name), yields the scenario rewritten
to point at it, and stops it on the way out. A scenario with a target of its own
(``client.api_base`` or ``OPENAI_API_BASE``; with ``clients:``, every client's) is yielded
unchanged and nothing is started.

>>> with shared_simulator(scenario) as (aimed, server):  # doctest: +SKIP
...     for point in points:
...         run_point(point_of(aimed))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from veeksha.scenario.models import Scenario

__all__ = ["SharedServer", "aim_at", "aim_clients", "shared_simulator"]


@dataclass(frozen=True)
class SharedServer:
    """The experiment's target: where it is and what it is (for the experiment's results)."""

    api_base: str | None
    model: str | None
    description: dict[str, Any] = field(default_factory=dict)
    # stops the simulator ahead of the context's exit (a no-op for an endpoint; idempotent)
    stop: Callable[[], None] = field(default=lambda: None, compare=False, repr=False)

    @property
    def target(self) -> tuple[str, str] | None:
        """(api_base, model) of a started simulator, None for an endpoint of the scenario's."""
        if not self.is_simulator or self.api_base is None or self.model is None:
            return None
        return self.api_base, self.model

    @property
    def is_simulator(self) -> bool:
        return self.description.get("kind") == "simulator"


def aim_at(scenario: Scenario, server: SharedServer) -> Scenario:
    """``scenario`` with its client pointed at ``server`` (unchanged for an endpoint)."""
    if not server.is_simulator or server.api_base is None or server.model is None:
        return scenario
    return aim_clients(scenario, server.api_base, server.model)


def aim_clients(scenario: Scenario, api_base: str, model: str) -> Scenario:
    """``scenario`` with the clients the shared simulator serves pointed at it (``api_base``):
    the one ``client:`` (asking for ``model``, the simulator's), or each of ``clients:``
    without an endpoint of its own, each asking for its own model (the simulator serves every
    one, ``scenario.windows.served_simulator``), else ``simulator.model``."""
    from veeksha.scenario.windows import client_api_base

    if not scenario.clients:
        client = scenario.client.model_copy(update={"api_base": api_base, "model": model})
        return scenario.model_copy(update={"client": client})
    clients = [
        client
        if client_api_base(client) is not None
        else client.model_copy(
            update={"api_base": api_base, "model": client.model or scenario.simulator.model}
        )
        for client in scenario.clients
    ]
    return scenario.model_copy(update={"clients": clients})


@contextmanager
def shared_simulator(scenario: Scenario) -> Iterator[tuple[Scenario, SharedServer]]:
    """Start the built-in simulator ``scenario`` would use (unless it has a target of its own),
    yield the scenario aimed at it and the server's description; stop it on exit."""
    from veeksha.engine.target import client_api_base, spawn_simulator

    simulator = spawn_simulator(scenario)
    if simulator is None:
        first = scenario.client_entries()[0][1]  # (the first client's, as a run's target)
        api_base = client_api_base(first)
        server = SharedServer(api_base, first.model, {"kind": "endpoint", "api_base": api_base})
        yield scenario, server
        return
    try:
        base = simulator.wait_ready()
        server = SharedServer(
            base,
            simulator.config.model,
            {"kind": "simulator", **simulator.config_dict()},
            simulator.stop,
        )
        yield aim_at(scenario, server), server
    finally:
        simulator.stop()
