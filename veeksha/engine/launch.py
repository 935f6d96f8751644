"""A run's worker processes started before the engine is imported (``veeksha run``): their
interpreters start up while the main process imports the engine, resolves the target and
makes the sessions' source, instead of after it (``veeksha.dispatch.launch``)."""

from __future__ import annotations

from veeksha.dispatch.affinity import default_num_workers
from veeksha.dispatch.launch import WorkerLaunch
from veeksha.scenario.models import Scenario

__all__ = ["HELPER_MODULES", "launch_workers", "worker_count"]

#: What a run's helper processes (the built-in simulator, the workers, the server watch) import
#: before they can start: ``veeksha run`` imports them once and forks the helpers
#: (``veeksha.forked.prepare``).
HELPER_MODULES = (
    "asyncio",
    "uvloop",
    "msgspec",
    "veeksha.dispatch.worker",
    "veeksha.simulator.__main__",
    "veeksha.simulator.runner",
    "veeksha.server.watch_process",
    "veeksha.server.scraper",
)


def worker_count(scenario: Scenario) -> int:
    """The number of workers a run of ``scenario`` starts (``runtime.num_workers``)."""
    setting = scenario.runtime.num_workers
    return default_num_workers() if setting == "auto" else setting


def launch_workers(scenario: Scenario, dry_run: bool, fork: bool = False) -> WorkerLaunch | None:
    """The run's workers, launched now (forked from this process with ``fork``: see
    ``veeksha.forked``) and adopted by its pool; None for a dry run (none)."""
    if dry_run:
        return None
    return WorkerLaunch(worker_count(scenario), fork)
