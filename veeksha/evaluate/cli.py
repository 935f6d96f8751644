"""``veeksha report`` and ``veeksha compare``: evaluation of runs after the fact.

``report RUN_DIR`` recomputes summary.json, health.json/txt, slo.json, metrics/ and plots/ from the
run folder alone: its Parquet files (finalised, or the ``parts/`` a killed run left, read through
``veeksha.record.reader``) and its config.yaml. Run facts the tables do not hold (CPU seconds,
stop reason) are taken from the previous summary.json when there is one, else from the Parquet
metadata.

``compare RUN_A RUN_B ...`` prints the headline metrics side by side, with each run's change
relative to the first. It reads each run's summary.json, or evaluates the run in memory when it
has none (nothing is written).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

__all__ = ["compare", "report"]

_RUN_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


def _run_info(run_dir: Path) -> dict[str, Any]:
    from veeksha.evaluate.outputs import SUMMARY_FILE
    from veeksha.record.reader import read_metadata

    info: dict[str, Any] = {}
    previous = run_dir / SUMMARY_FILE
    if previous.exists():
        try:
            info = dict(json.loads(previous.read_text(encoding="utf-8")).get("run") or {})
        except (ValueError, AttributeError):
            info = {}
    meta = read_metadata(run_dir)
    for key in ("run_id", "t0_wall_time", "target"):
        if meta.get(key):
            info.setdefault(key, meta[key])
    partial = meta.get("partial") == "true"
    info["partial"] = partial
    if partial:  # (the run never wrote its end: what was in flight then has no row)
        info["unrecorded_requests"] = _unrecorded_requests(run_dir)
    else:
        info.pop("unrecorded_requests", None)
    if "interrupted" in meta:
        info["interrupted"] = meta["interrupted"] == "true" or partial
    else:
        info["interrupted"] = bool(info.get("interrupted")) or partial
    return info


def _unrecorded_requests(run_dir: Path) -> int | None:
    """How many requests of a partial run's trace.jsonl have no row (``pending_work``); None
    without a trace (``trace_recorder.enabled: false``): unknown."""
    from veeksha.record.reader import TRACE_FILE, pending_work

    if not (run_dir / TRACE_FILE).exists():
        return None
    in_flight, _ = pending_work(run_dir)
    return len(in_flight)


def _evaluate(run_dir: Path, *, write: bool, plots: bool = True) -> Any:
    from veeksha.errors import ConfigurationError
    from veeksha.evaluate.run import compute_evaluation, evaluate_run
    from veeksha.evaluate.source import requests_source, sessions_source
    from veeksha.record.run_folder import CONFIG_FILE
    from veeksha.scenario.loader import load_scenario

    config = run_dir / CONFIG_FILE
    if not config.exists():
        if (run_dir / "capacity.json").is_file():  # (a capacity search: its probes are runs)
            raise ConfigurationError(
                f"{run_dir} is a capacity search's folder: its result is capacity.json (and "
                "capacity.png); each probe under runs/ is a run folder veeksha report reads"
            )
        raise ConfigurationError(f"{run_dir} has no {CONFIG_FILE}; pass a veeksha run folder")
    scenario = load_scenario(config)
    info = _run_info(run_dir)  # first: it says when run_dir holds no results
    requests, sessions = requests_source(run_dir), sessions_source(run_dir)
    if write:
        return evaluate_run(run_dir, scenario, requests, sessions, info, plots=plots)
    from veeksha.evaluate.server_view import load_server_view

    return compute_evaluation(scenario, requests, sessions, info, server=load_server_view(run_dir))


@click.command()
@click.argument("run_dir", type=_RUN_DIR)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--quiet", "-q", is_flag=True, help="Write the files, print nothing.")
def report(run_dir: Path, no_plots: bool, quiet: bool) -> None:
    """Recompute the summary, health checks, SLOs and plots of RUN_DIR and print the report.

    Works on finished runs and on the partial results of a killed run. Exits 0, or 2 when
    RUN_DIR is not a run folder.
    """
    from rich.console import Console

    from veeksha.plural import counted

    evaluation = _evaluate(run_dir, write=True, plots=not no_plots)
    if not quiet:
        console = Console()
        evaluation.render(console)
        wrote = counted(len(evaluation.files), "file")
        console.print(f"wrote {wrote} into {run_dir}", soft_wrap=True)


def _summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary.json, or its evaluation in memory when it has none (a killed run) or
    one that is not an evaluation's (no ``schema_version``: a shard's own, a stray file)."""
    from veeksha.evaluate.outputs import SUMMARY_FILE

    path = run_dir / SUMMARY_FILE
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            data = None
        if isinstance(data, dict) and "schema_version" in data:
            return data
    summary: dict[str, Any] = _evaluate(run_dir, write=False).summary
    return summary


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=_RUN_DIR)
def compare(run_dirs: tuple[Path, ...]) -> None:
    """Headline metrics of RUN_DIRS side by side, with the change relative to the first.

    Also how each run ended, each SLO's verdict, each phase of runs with phases, and the keys
    in which a run's scenario differs from the first's. Exits 0, or 2 when a folder is not a
    run folder.
    """
    from rich.console import Console

    from veeksha.evaluate.compare import ComparedRun, read_scenario, render_compare

    runs = [ComparedRun(d.name, _summary(d), read_scenario(d)) for d in run_dirs]
    render_compare(Console(), runs)
