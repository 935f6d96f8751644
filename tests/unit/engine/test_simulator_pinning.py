"""The built-in simulator is pinned to the workers' CPUs: its children too when it has any, and
without a walk over /proc when it is one process (the default: ~2-4 ms of the start-up)."""

from __future__ import annotations

from typing import Any

import pytest

import veeksha.engine.target as target_module
from veeksha.engine.target import TargetContext
from veeksha.scenario.models import Scenario
from veeksha.scenario.simulator import SimulatorConfig


class FakeSimulator:
    """A started simulator as ``TargetContext`` uses it."""

    def __init__(self, processes: int) -> None:
        self.config = SimulatorConfig(processes=processes)
        self.pid = 4242

    def wait_ready(self) -> str:
        return "http://127.0.0.1:1/v1"

    def config_dict(self) -> dict[str, Any]:
        return {"target": "simulator"}

    def stop(self) -> None:
        pass


@pytest.mark.parametrize(("processes", "walked"), [(1, False), (3, True)])
def test_the_simulator_s_children_are_looked_for_only_when_it_has_some(
    monkeypatch: pytest.MonkeyPatch, processes: int, walked: bool
) -> None:
    pinned: list[tuple[int, list[int]]] = []
    walks: list[int] = []

    def tree(pid: int) -> list[int]:
        walks.append(pid)
        return [pid, pid + 1, pid + 2]

    monkeypatch.setattr(target_module, "_process_tree", tree)
    monkeypatch.setattr(target_module.os, "sched_setaffinity", lambda p, c: pinned.append((p, c)))
    simulator = FakeSimulator(processes)
    context = TargetContext(Scenario(), simulator_cpus=[1], simulator=simulator)  # type: ignore[arg-type]
    with context as target:
        assert target.kind == "simulator"
    assert bool(walks) is walked
    members = [4242, 4243, 4244] if walked else [4242]
    assert pinned == [(pid, [1]) for pid in members]
