"""Integration fixtures: the built-in simulator as a real process on a loopback port.

``start_simulator(**settings)`` starts a ``SimulatorProcess`` with ``SimulatorConfig(**settings)``
and returns it (``.base_url`` is ``http://127.0.0.1:PORT/v1``, ``.root_url`` drops ``/v1``); every
simulator a test started is stopped after it. ``fast_simulator`` is one shared fast-preset server
for the whole session (its prefix cache is shared too: use prompts of your own).

A simulator a test starts itself is forked from the test's process (``fork=True``, as
``veeksha run`` forks the one it starts), not a fresh interpreter: the server code is the same
(``veeksha.simulator.__main__.main``, imported in the fork), and its start costs ~0.2 CPU-s and
~0.3 s less (tests/integration/simulator, 16 starts: 10.4 CPU-s and 16.8 s -> 6.9 and 13.3).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess

StartSimulator = Callable[..., SimulatorProcess]


@pytest.fixture
def start_simulator() -> Iterator[StartSimulator]:
    """A factory: ``start_simulator(preset="fast", ttft_ms=50, ...)`` → a started simulator."""
    started: list[SimulatorProcess] = []

    def start(**settings: Any) -> SimulatorProcess:
        sim = SimulatorProcess(SimulatorConfig(**settings), fork=True)
        started.append(sim)
        sim.start(timeout=30)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture(scope="session")
def fast_simulator() -> Iterator[SimulatorProcess]:
    """One fast-preset simulator shared by the whole session."""
    with SimulatorProcess(SimulatorConfig(), fork=True) as sim:
        yield sim
