"""One point of an experiment: a normal run, in a normal run folder, started the way
``veeksha run`` starts one.

Sweeps, capacity probes and microbenchmark points all run through :func:`run_point`, so each is
a run folder that ``veeksha report`` reads like any other, and the experiment layer learns about
it only from the outputs it wrote (summary.json), never from inside the engine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (a sweep's report reads points without building the scenario models)
    from veeksha.scenario.models import Scenario
    from veeksha.server.managed import ManagedServer

__all__ = ["PointResult", "read_summary", "run_point"]


@dataclass(frozen=True)
class PointResult:
    """What one point left: its run folder, the exit code ``veeksha run`` would give, and the
    summary.json the evaluation wrote (empty when the run wrote none)."""

    run_dir: Path
    exit_code: int
    interrupted: bool
    summary: dict[str, Any] = field(default_factory=dict)


def run_point(
    scenario: Scenario,
    output_dir: str | Path | None = None,
    *,
    quiet: bool = True,
    plots: bool = True,
    dry_run: bool = False,
    run_dir: str | Path | None = None,
    server: ManagedServer | None = None,
) -> PointResult:
    """Run ``scenario`` into a new run folder below ``output_dir`` (default: the scenario's
    ``output_dir``) and return what it left; ``run_dir``: this folder instead (made if needed;
    a sweep names its points' folders). The built-in simulator, when the scenario uses it,
    is started for this run and stopped after it; it, the workers and the server watch start
    up while the run is set up (``veeksha.engine.launch``). ``server``: the
    scenario's managed server, already running and shared by the points whose
    ``server_identity`` is the same (``veeksha.server.managed``); without it a ``server:``
    section starts one for this run."""
    from veeksha.engine.launch import launch_helpers
    from veeksha.engine.run import exit_code_for, run_scenario
    from veeksha.record.run_folder import create_run_folder, write_config

    if run_dir is None:
        run_dir = create_run_folder(output_dir or scenario.output_dir, scenario)
    else:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
    write_config(run_dir, scenario)
    # Forked from this process while it has one thread, as `veeksha run` forks a single run's:
    # a point reads its files in this thread alone (record.parquet.open_parquet), so a sweep's
    # later points fork too (trace replays and managed servers, whose supervisor writes their
    # log, included). Where a thread stays, fresh interpreters, as run.log's "workers ready"
    # line says.
    helpers = launch_helpers(scenario, dry_run)
    try:
        outcome = run_scenario(
            scenario,
            run_dir,
            quiet=quiet,
            dry_run=dry_run,
            plots=plots,
            simulator=helpers.simulator,
            server=server,
            workers=helpers.workers,
            watch_process=helpers.watch,
        )
    finally:
        helpers.close()
    return PointResult(
        run_dir, exit_code_for(outcome, scenario), outcome.interrupted, read_summary(run_dir)
    )


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """The summary.json of a run folder, or ``{}`` when the run wrote none (it failed early)."""
    from veeksha.evaluate.outputs import SUMMARY_FILE

    try:
        loaded = json.loads((Path(run_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
