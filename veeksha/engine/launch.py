"""A run's worker processes started before the engine is imported (``veeksha run``): their
interpreters start up while the main process imports the engine, resolves the target and
makes the sessions' source, instead of after it (``veeksha.dispatch.launch``)."""

from __future__ import annotations

from veeksha.dispatch.affinity import default_num_workers
from veeksha.dispatch.launch import WorkerLaunch
from veeksha.scenario.models import Scenario

__all__ = ["HELPER_MODULES", "launch_workers", "worker_count"]

#: What the main process imports before it forks a run's helpers (``veeksha.forked.prepare``):
#: what they all need, and what several workers would each import. What only the simulator or
#: only the server watch uses (their servers, the scraper, prometheus_client's parser) each
#: imports after the fork, on the other core, while this process imports the engine.
HELPER_MODULES = ("asyncio", "uvloop", "msgspec", "http.client", "veeksha.dispatch.worker")


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
