"""A whole capacity search: one server, the probes, capacity.json and the plot.

``<output_dir>/capacity-<UTC time>-<hash>/`` holds ``capacity_config.yaml`` (the search keys and
the resolved scenario, secrets redacted), ``runs/`` (one normal run folder per probe run),
``capacity.json`` (rewritten after every value, so an interrupted search keeps its history),
``capacity.png`` and ``best``, a link to the best passing run's folder.

The built-in simulator, when the scenario uses it, is started once and every probe's client is
pointed at it; a scenario with ``client.api_base`` measures that server. A scenario with a
``server:`` section: its managed server is started once (logging into the search folder's
server.log) and every probe runs against it (a knob that changes the server itself makes each
probe start its own).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import math
import os
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veeksha.errors import ConfigurationError, RunAbortedError
from veeksha.experiment.capacity.config import CapacityConfig
from veeksha.experiment.capacity.judge import Judgement, judge
from veeksha.experiment.capacity.knob import Knob
from veeksha.experiment.capacity.measure import ProbeRun, ValueResult, measure_value
from veeksha.experiment.capacity.plot import PLOT_FILE, write_capacity_plot
from veeksha.experiment.capacity.probe import ProbeRunner
from veeksha.experiment.capacity.search import (
    PASS,
    UNHEALTHY,
    SearchOutcome,
    SearchStep,
    Verdict,
    search_capacity,
    summarise,
)
from veeksha.experiment.shared_server import SharedServer, shared_simulator
from veeksha.plural import counted, noun
from veeksha.scenario.loader import block_yaml, resolved_dict, scenario_hash

__all__ = ["CAPACITY_FILE", "CapacityResult", "run_capacity_search"]

CAPACITY_FILE = "capacity.json"
SCHEMA_VERSION = 1


@dataclass
class CapacityResult:
    """What a search left: its folder, the search's outcome and the per-value results."""

    folder: Path
    outcome: SearchOutcome
    values: list[ValueResult] = field(default_factory=list)
    interrupted: bool = False
    document: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 a capacity was found, 3 interrupted; nothing passed: 4 when the first value was
        unhealthy (no server result), else 5 (the SLOs were not met, or not provably)."""
        if self.interrupted:
            return RunAbortedError.exit_code
        if self.outcome.best is not None:
            return 0
        return 4 if self.outcome.ceiling_verdict == UNHEALTHY else 5


def _create_folder(config: CapacityConfig, now: dt.datetime | None = None) -> Path:
    """A new folder ``<output_dir>/capacity-<UTC time>-<hash>/`` (``-2``, ``-3``... when
    another search, started in the same second, has the name)."""
    keys = json.dumps(config.search_keys(), sort_keys=True, default=str)
    digest = hashlib.sha256(f"{scenario_hash(config.scenario)}{keys}".encode()).hexdigest()[:10]
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    name = f"capacity-{moment:%Y%m%dT%H%M%SZ}-{digest}"
    base = Path(config.output_dir)
    try:
        base.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            folder = base / (name if attempt == 1 else f"{name}-{attempt}")
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            return folder
    except OSError as exc:
        raise ConfigurationError(
            f"cannot create a capacity search folder in {str(base)!r}: {exc.strerror or exc}; "
            "choose a writable output_dir (or --output-dir DIR)"
        ) from None
    raise ConfigurationError(f"too many capacity searches named {name!r} in {str(base)!r}")


def _write_config(folder: Path, config: CapacityConfig) -> None:
    yaml = block_yaml()
    with (folder / "capacity_config.yaml").open("w", encoding="utf-8") as stream:
        stream.write("# The capacity search as resolved; secrets are redacted.\n")
        yaml.dump(
            {**config.search_keys(), "benchmark_config": resolved_dict(config.scenario)}, stream
        )


def _relative(path: Path | None, folder: Path) -> str | None:
    return None if path is None else os.path.relpath(path, folder)


def _value_entry(result: ValueResult, phase: str, folder: Path) -> dict[str, Any]:
    judgement = result.judgement
    healthy = result.healthy_runs
    return {
        "value": result.value,
        "phase": phase,
        "verdict": result.verdict,
        "all_slos_met": None if result.verdict not in ("pass", "fail") else result.verdict == PASS,
        "run_dir": _relative(healthy[-1].run_dir if healthy else result.runs[-1].run_dir, folder),
        "runs": [
            {
                "run_dir": _relative(run.run_dir, folder),
                "extension": run.request.extension,
                "retry": run.request.retry,
                "healthy": run.healthy,
                "health": run.health_detail,
            }
            for run in result.runs
        ],
        "requests": result.requests,
        "failed_requests": result.failed,
        "slo_results": [] if judgement is None else [j.to_dict() for j in judgement.slos],
    }


def _document(
    config: CapacityConfig,
    folder: Path,
    outcome: SearchOutcome,
    entries: list[dict[str, Any]],
    server: dict[str, Any],
    interrupted: bool,
    interrupted_value: float | None = None,
) -> dict[str, Any]:
    best = outcome.best
    best_entry = next(
        (e for e in reversed(entries) if e["value"] == best and e["verdict"] == PASS), None
    )
    return {
        "schema_version": SCHEMA_VERSION,
        "source": config.source,
        "benchmark_config": config.benchmark_config,
        "traffic_scheduler_type": config.knob.scheduler,
        "searched_knob": config.knob.path,
        "unit": "sessions" if config.knob.integer else "sessions/s",
        "knob_title": config.knob.title,
        **config.search_keys(),
        "resolution": config.settings.step,
        "server": server,
        "slos": [
            {
                "name": slo.name,
                "metric": slo.metric,
                "percentile": slo.percentile,
                "threshold": slo.value,
                "confidence": config.confidence,
            }
            for slo in config.slos
        ],
        "iterations_run": len(entries),
        "best_value": best,
        "best_run_dir": None if best_entry is None else best_entry["run_dir"],
        "ceiling": None
        if outcome.ceiling is None
        else {"value": outcome.ceiling, "verdict": outcome.ceiling_verdict},
        "converged": outcome.converged,
        "reached_max_value": outcome.reached_max,
        "interrupted": interrupted,
        "interrupted_value": interrupted_value,
        "undecided_values": [e["value"] for e in entries if e["verdict"] == "undecided"],
        "unhealthy_values": [e["value"] for e in entries if e["verdict"] == "unhealthy"],
        "history": entries,
        "plot": PLOT_FILE,
    }


def run_capacity_search(
    config: CapacityConfig,
    *,
    plots: bool = True,
    echo: Callable[[str], None] | None = None,
) -> CapacityResult:
    """Run the search of ``config`` (see the module docstring); ``plots``: the probe runs' own
    plots (capacity.png is always drawn); ``echo`` receives one line per value."""
    from veeksha.engine.target import resolved_headers

    say = echo or (lambda _line: None)
    # an unset ${NAME} of the client's headers: exit 2 before anything starts, not at probe 1
    resolved_headers(config.scenario)
    # the server first, before any folder: a simulator that cannot start leaves no half-made search
    with shared_simulator(config.scenario) as (_aimed, shared):
        return _search(config, shared, plots, say)


def _search(
    config: CapacityConfig,
    shared: SharedServer,
    plots: bool,
    say: Callable[[str], None],
) -> CapacityResult:
    server = dict(shared.description)
    folder = _create_folder(config)
    _write_config(folder, config)
    slos = config.slos
    say(f"capacity search: {config.knob.title} from {config.start_value:g} to {config.max_value:g}")
    say(f"folder: {folder}")
    with contextlib.ExitStack() as stack:
        managed = None
        if config.scenario.server is not None:  # one server lifecycle for every probe
            from veeksha.server.managed import SERVER_LOG, ManagedServer

            managed = ManagedServer.for_scenario(config.scenario, folder / SERVER_LOG)
            stack.enter_context(managed)
            server = {"kind": "managed", **managed.describe(), "log": SERVER_LOG}
        runner = ProbeRunner(
            config.scenario,
            config.knob,
            slos,
            folder / "runs",
            config.warmup_seconds,
            shared.target,
            plots,
            managed,
        )
        return _probe_all(config, folder, shared.stop, runner, server, say)


def _probe_all(
    config: CapacityConfig,
    folder: Path,
    stop_simulator: Callable[[], None],
    runner: ProbeRunner,
    server: dict[str, Any],
    say: Callable[[str], None],
) -> CapacityResult:
    slos = config.slos
    results: list[ValueResult] = []
    entries: list[dict[str, Any]] = []
    steps: list[SearchStep] = []
    in_progress: list[float] = []  # the value being measured, until its verdict

    def judge_runs(runs: Sequence[ProbeRun]) -> Judgement:
        return judge(slos, [run.samples for run in runs], config.confidence)

    def write(outcome: SearchOutcome, interrupted: bool) -> dict[str, Any]:
        stopped_at = in_progress[0] if interrupted and in_progress else None
        document = _document(config, folder, outcome, entries, server, interrupted, stopped_at)
        (folder / CAPACITY_FILE).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        return document

    def probe(value: float) -> Verdict:
        in_progress[:] = [value]
        result = measure_value(value, runner, judge_runs, config.max_extensions)
        results.append(result)
        in_progress.clear()
        return result.verdict

    def observe(step: SearchStep) -> None:
        steps.append(step)
        entries.append(_value_entry(results[-1], step.phase, folder))
        write(summarise(config.settings, steps), False)  # (a search killed now keeps this)
        say(_describe(len(entries), config.knob, results[-1]))

    interrupted = False
    try:
        outcome = search_capacity(config.settings, probe, observe)
    except (RunAbortedError, KeyboardInterrupt):
        interrupted = True
        # the bracket the finished probes support: the highest pass, the lowest other verdict
        outcome = summarise(config.settings, steps)
    stop_simulator()  # before the plot: the server's CPU back to the machine
    if runner.server is not None:
        runner.server.stop()  # (likewise; the search's exit stops it again: a no-op)
    document = write(outcome, interrupted)
    write_capacity_plot(document, folder / PLOT_FILE)
    best_dir = document["best_run_dir"]
    if best_dir is not None:
        # a file system without links: capacity.json's best_run_dir says it
        with contextlib.suppress(OSError):
            (folder / "best").symlink_to(best_dir, target_is_directory=True)
    say(_conclusion(document))
    return CapacityResult(folder, outcome, results, interrupted, document)


def _ms(seconds: float) -> str:
    """Milliseconds, ``+inf``/``-inf`` (failed requests, an unbounded end), ``-`` (no data)."""
    if math.isnan(seconds):
        return "-"
    return f"{1000 * seconds:.1f}" if math.isfinite(seconds) else f"{seconds:+}"


def _describe(index: int, knob: Knob, result: ValueResult) -> str:
    """A probe's lines: its value, verdict, runs and failed requests, then each SLO's estimate
    and interval (or why no run was healthy) on a line of its own, wrapped at 80 columns."""
    parts = []
    for judged in result.judgement.slos if result.judgement else ():
        interval = judged.interval
        parts.append(
            f"{judged.slo.name}: {_ms(interval.estimate)} ms [{_ms(interval.low)}, "
            f"{_ms(interval.high)}] vs {1000 * judged.slo.value:g} ms (n={interval.samples})"
        )
    runs = counted(len(result.runs), "run")
    if result.failed:  # each an infinitely slow value: say so, or "+inf ms" looks like latency
        runs += f"; {result.failed} of {counted(result.requests, 'request')} failed"
    lines = [f"probe {index}: {knob.describe(result.value)} {result.verdict.upper()} ({runs})"]
    for part in parts or [result.runs[-1].health_detail]:
        lines += textwrap.wrap(part, 80, initial_indent="  ", subsequent_indent="    ")
    return "\n".join(lines)


def _failures(document: dict[str, Any], value: float) -> str:
    """`` (K of N requests failed)`` for a value whose judged requests had failures."""
    entry = next((e for e in document["history"] if e["value"] == value), None)
    if entry is None or not entry.get("failed_requests"):
        return ""
    return f" ({entry['failed_requests']} of {counted(entry['requests'], 'request')} failed)"


def _amount(value: float, unit: str) -> str:
    """``9 sessions/s``, ``1 session/s``, ``1 session``: a value in its unit (``sessions`` or
    ``sessions/s``), singular for one."""
    return f"{value:g} {unit.replace('sessions', noun(value, 'session'), 1)}"


def _conclusion(document: dict[str, Any]) -> str:
    best = document["best_value"]
    ceiling = document["ceiling"]
    stopped = document["interrupted_value"]
    if document["interrupted"]:
        during = f" while probing {stopped:g}" if stopped is not None else ""
        note = f" (interrupted{during}: the search did not finish)"
    else:
        note = ""
    if best is None:
        if ceiling is None:
            return "no value was judged" + note
        first = ceiling["value"]
        text = f"no value met the SLOs: the first, {first:g}, was {ceiling['verdict']}"
        text += _failures(document, first)
        if first > document["resolution"] * 1.5:  # a lower value exists on the grid
            text += f"; the capacity, if any, is below {first:g}: lower start_value"
        return text + note
    text = f"capacity: {_amount(best, document['unit'])}"
    if document["reached_max_value"]:
        return text + " (max_value passed: the capacity may be higher)"
    if ceiling is not None:
        text += f"; {ceiling['value']:g} is {ceiling['verdict']}"
        text += _failures(document, ceiling["value"])
    if document["interrupted"]:
        text += note
    elif not document["converged"]:
        text += " (not converged: max_iterations ran out)"
    return text
