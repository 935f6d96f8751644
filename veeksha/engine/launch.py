"""A run's helper processes started before the engine is imported (``veeksha run``, and each
point of an experiment): the built-in simulator, the workers and the server watch start up while
the main process imports the engine, resolves the target and makes the sessions' source, instead
of after it (``veeksha.dispatch.launch``). They are forked from the main process where it can
fork (``veeksha.forked``), else fresh interpreters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from veeksha.dispatch.affinity import default_num_workers
from veeksha.dispatch.launch import WorkerLaunch
from veeksha.engine.server_watch import (
    WatchProcess,
    discard_watch_process,
    start_watch_process,
    watched,
)
from veeksha.engine.target import spawn_simulator
from veeksha.forked import prepare
from veeksha.scenario.models import Scenario

if TYPE_CHECKING:
    from veeksha.simulator.process import SimulatorProcess

__all__ = ["HELPER_MODULES", "Helpers", "launch_helpers", "worker_count"]

#: What the main process imports before it forks a run's helpers (``veeksha.forked.prepare``):
#: what they all need, and what several workers would each import. What only the simulator or
#: only the server watch uses (their servers, the scraper, prometheus_client's parser) each
#: imports after the fork, on the other core, while this process imports the engine.
HELPER_MODULES = ("asyncio", "uvloop", "msgspec", "http.client", "veeksha.dispatch.worker")


def worker_count(scenario: Scenario) -> int:
    """The number of workers a run of ``scenario`` starts (``runtime.num_workers``)."""
    setting = scenario.runtime.num_workers
    return default_num_workers() if setting == "auto" else setting


@dataclass
class Helpers:
    """A run's helper processes, launched ahead of it by :func:`launch_helpers`: hand them to
    ``run_scenario`` (``simulator``, ``workers``, ``watch_process``), which adopts them, then
    :meth:`close` them whatever happened."""

    simulator: SimulatorProcess | None  # (None: the run has a target of its own, or dry)
    workers: WorkerLaunch | None  # (None: a dry run)
    watch: WatchProcess | None  # (None: no server watch, or a dry run)

    def close(self) -> None:
        """Kill the workers and stop the watch the run did not adopt (a run that failed before
        it did), and stop the simulator (the run stopped it already, unless it failed before
        its start)."""
        if self.workers is not None:
            self.workers.close()
        if self.watch is not None:
            discard_watch_process(self.watch)
        if self.simulator is not None:
            self.simulator.stop()


def launch_helpers(scenario: Scenario, dry_run: bool) -> Helpers:
    """Start the helpers a run of ``scenario`` needs: forked from this process once it has
    imported :data:`HELPER_MODULES` when it has one thread (``veeksha.forked.prepare``), else
    fresh interpreters. Each gets its settings once the run has resolved its target."""
    fork = prepare(HELPER_MODULES)
    helpers = Helpers(spawn_simulator(scenario, dry_run, fork), None, None)
    try:
        if not dry_run:  # (a dry run answers in this process: no workers, no server)
            helpers.workers = WorkerLaunch(worker_count(scenario), fork)
        if watched(scenario, dry_run):
            helpers.watch = start_watch_process(fork)
    except BaseException:
        helpers.close()
        raise
    return helpers
