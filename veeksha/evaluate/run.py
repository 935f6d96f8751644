"""The evaluation of one run: the entry point the engine calls after a run, and ``veeksha report``.

``evaluate_run(run_dir, scenario, requests, sessions, run_info)`` computes the metrics of the
measured phase, runs the health checks, judges the SLOs, writes every evaluation file into
``run_dir`` (summary.json, health.json, health.txt, slo.json, metrics/, plots/) and returns an
``Evaluation``. ``compute_evaluation`` does the same without writing (``veeksha compare``).

``run_info`` keys (all optional; stored under summary.json's ``run``):

    run_id          str    the run folder's name
    t0_wall_time    str    ISO 8601 UTC wall-clock time of t0
    measured_window [start, end] seconds since t0 of the measured phase (engine's boundaries)
    interrupted     bool   the run stopped early (signal, abort)
    stop_reason     str    why the run stopped (e.g. max_sessions, timeout, SIGINT)
    worker_cpu_s    float  CPU seconds of all worker processes together
    main_cpu_s      float  CPU seconds of the main process
    worker_cpu_wait_s float  seconds the workers' main threads waited for a CPU (run queue)
                           during the traffic, summed; None where the kernel does not tell
    main_cpu_wait_s float  the same for the main process
    num_workers     int    worker processes
    chunk_timestamps str   how chunk times were taken: kernel (the kernel's receipt of a read's
                           bytes), read (the worker's read) or mixed (kernel on plain http, read
                           on https); runtime.chunk_timestamps
    chunk_stamps_clamped int  reads whose kernel time fell outside [sent_at, the read's own
                           time] (a wall-clock step) and was clamped into it: substituted
                           times (the sum of requests.parquet's chunk_stamps_clamped)
    target          str    what was benchmarked (api base and model, or the simulator)
    server_tokenizer dict  the calibrated server tokenizer and the check of a sample of prompts
                           (``veeksha.engine.prompt_check``), judged by ``prompt_length``
    partial         bool   (``veeksha report``) the folder's end was never written: a killed run
    unrecorded_requests int  (a partial run) its trace's dispatched requests without a row, not
                           counted by any figure (None: no trace); health.txt and the report say so

It works on partial runs (a killed run: rows without some timestamps, no session rows) and on runs
with no measured request (checks SKIP, aggregates are null, nothing crashes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from veeksha.evaluate.checks import run_health_checks
from veeksha.evaluate.exit_codes import ExitCode, run_exit_code
from veeksha.evaluate.gpus import gpu_section
from veeksha.evaluate.groups import group_sections
from veeksha.evaluate.health import (
    FAIL,
    HealthInput,
    HealthReport,
    Status,
    lost_shards_note,
    partial_note,
)
from veeksha.evaluate.jsonio import jsonable
from veeksha.evaluate.metrics import Digest
from veeksha.evaluate.outputs import (
    write_metric_csvs,
    write_slo,
    write_summary,
    write_timeslices_csv,
)
from veeksha.evaluate.phases import combine_arrival_checks, phase_sections
from veeksha.evaluate.plots import CDF_METRICS, write_plots, write_ramp_plot
from veeksha.evaluate.ramp_report import ramp_section
from veeksha.evaluate.server_plot import write_server_plot
from veeksha.evaluate.server_view import ServerView, load_server_view, scraped_clients
from veeksha.evaluate.slo import SloResult, all_met, judge_slos, scenario_slos
from veeksha.evaluate.source import ColumnSource, release_memory
from veeksha.evaluate.stats import WARMUP, measured_rows
from veeksha.evaluate.summary import compute_aggregates, summary_document
from veeksha.evaluate.timeslices import timeslices
from veeksha.record.columns import REQUESTS_SCHEMA, SERVER_TIMING_COLUMNS
from veeksha.scenario.models import Scenario

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "EVALUATION_COLUMNS",
    "Evaluation",
    "collector_paused",
    "compute_evaluation",
    "evaluate_run",
]

#: The requests.parquet columns evaluation reads: a table of only these evaluates exactly like the
#: whole table. A run's evaluation reads them from the files one at a time (``ColumnSource``).
EVALUATION_COLUMNS: tuple[str, ...] = tuple(
    name
    for name in REQUESTS_SCHEMA.names
    if name
    not in {
        "request_id",
        "model",
        "chunk_times",
        "output_text",
        "shared_prefix_tokens",
        "cached_tokens",
        "tbc_mean",
        "http_status",
        "retries",
        "server_output_tokens",
        "shard",
        *SERVER_TIMING_COLUMNS,
    }
)


@dataclass(slots=True)
class Evaluation:
    """The outcome of evaluating a run.

    ``verdict`` is the health verdict (PASS unless a check failed), ``all_slos_met`` None when the
    scenario has no SLO, ``summary`` the content of summary.json, ``digests`` what was kept of each
    latency metric's sample (CSVs, plots), ``files`` what was written.
    """

    summary: dict[str, Any]
    health: HealthReport
    slos: list[SloResult]
    digests: dict[str, Digest]
    strict: bool = False
    files: list[Path] = field(default_factory=list)

    @property
    def verdict(self) -> Status:
        return self.health.verdict

    @property
    def all_slos_met(self) -> bool | None:
        return all_met(self.slos)

    @property
    def interrupted(self) -> bool:
        return bool(self.summary["run"].get("interrupted"))

    @property
    def exit_code(self) -> ExitCode:
        """The exit code of ``veeksha run`` for this result (see ``exit_codes``)."""
        return run_exit_code(
            interrupted=self.interrupted,
            health_failed=self.verdict == FAIL,
            strict=self.strict,
            all_slos_met=self.all_slos_met,
        )

    def render(self, console: Console) -> None:
        """Print the terminal report: headline numbers, latency, health, SLOs."""
        from veeksha.evaluate.report import render_summary  # (rich: only a report loads it)

        render_summary(console, self.summary, self.health.to_dict())


def compute_evaluation(
    scenario: Scenario,
    requests: pa.Table | ColumnSource,
    sessions: pa.Table | ColumnSource,
    run_info: Mapping[str, Any] | None = None,
    *,
    cdf_metrics: tuple[str, ...] = (),
    server: ServerView | None = None,
) -> Evaluation:
    """Metrics, health checks and SLOs of a run, without writing anything.

    ``requests`` and ``sessions`` are tables in memory or ``ColumnSource``s over the run's files
    (the evaluation then reads a column at a time, its memory bounded whatever the run's size).
    ``cdf_metrics``: the metrics whose CDF the digests keep (for the plots). ``server``: the
    server's own metrics (``load_server_view``), for summary.json's ``server`` section and the
    ``server_agreement`` check.
    """
    info = jsonable(dict(run_info or {}))
    # clients that did not stream: their TTFC is the whole answer's, and they have no TBC/TPOT
    unstreamed = [name for name, client in scenario.client_entries() if not client.stream]
    if unstreamed:
        info["not_streamed"] = unstreamed
    else:
        info.pop("not_streamed", None)
    measured = measured_rows(requests)
    measured_sessions = measured_rows(sessions)
    slos = scenario_slos(scenario)
    aggregates = compute_aggregates(
        measured, measured_sessions, slos, cdf_metrics, sessions, requests
    )
    slo_results = judge_slos(slos, aggregates.digests, measured)
    health = run_health_checks(
        HealthInput(requests, measured, measured_sessions, scenario, info, server)
    )
    phases: dict[str, Any] = {}
    if scenario.phases:  # each phase on its own, the run's arrival checks the phases' own
        phases, reports = phase_sections(scenario, requests, sessions, slos, info)
        health = combine_arrival_checks(health, reports)
    notes = tuple(note for note in (partial_note(info), lost_shards_note(info)) if note)
    if notes:
        health = dataclasses.replace(health, notes=notes)
    summary = summary_document(aggregates, info, health, slo_results)
    if phases:
        summary["phases"] = phases
    ramp = ramp_section(scenario, measured)  # latency against the offered rate
    if ramp is not None:
        summary["ramp"] = ramp
    sliced = [e.timeslice_seconds for e in scenario.evaluators if e.timeslice_seconds]
    if sliced:  # throughput and latency through the run
        section = timeslices(measured, aggregates.window, sliced[0])
        if section is not None:
            summary["timeslices"] = section
    # several clients, agents (evaluate/groups)
    summary |= group_sections(scenario, requests, info.get("target"))
    if server is not None:
        summary["server"] = jsonable(server.section())
        scraper = info.get("server_metrics")
        if isinstance(scraper, Mapping) and scraper.get("servers"):  # (their sums: the fleet)
            urls = [a.get("url") for a in scraper["servers"]]
            summary["server"]["servers"] = urls
            for entry in summary["server"].get("per_server") or []:
                number = int(entry["server"])
                entry["url"] = urls[number] if number < len(urls) else None
        gpus = gpu_section(server, summary["throughput"])  # (energy per output token)
        if gpus is not None:
            summary["gpus"] = jsonable(gpus)
        clients = scraped_clients(scenario, info)  # (several clients on several servers)
        if clients is not None:
            summary["server"]["clients"] = list(clients)
    return Evaluation(
        summary, health, slo_results, aggregates.digests, scenario.health_checks.strict
    )


def plot_boundaries(windows: list[Any]) -> list[tuple[str, float]]:
    """(name, start) of the phases marked on the plots of the measured rows (timeline.png,
    latency_over_time.png): every phase but the warmup, whose rows they do not draw (a band
    marked "warmup" with nothing in it would read as a warmup that sent nothing)."""
    return [
        (str(w["name"]), float(w["start"]))
        for w in windows
        if isinstance(w, dict) and w.get("start") is not None and w.get("name") != WARMUP
    ]


def warmup_window(windows: list[Any]) -> tuple[float, float] | None:
    """[start, end] of the run's warmup phase (summary.json's ``run.phases``), or None."""
    for w in windows:
        if isinstance(w, dict) and w.get("name") == WARMUP and w.get("start") is not None:
            end = w.get("end")
            return float(w["start"]), float(w["start"] if end is None else end)
    return None


def evaluate_run(
    run_dir: Path,
    scenario: Scenario,
    requests: pa.Table | ColumnSource,
    sessions: pa.Table | ColumnSource,
    run_info: Mapping[str, Any] | None = None,
    *,
    plots: bool = True,
) -> Evaluation:
    """Evaluate a run and write its evaluation files into ``run_dir`` (see the module docstring).

    ``requests`` and ``sessions`` are the run's whole tables (every phase; typed by
    ``veeksha.record.columns``), in memory or as ``ColumnSource``s over the run's files (the
    engine's and ``veeksha report``'s way: bounded memory); ``plots=False`` skips the PNGs.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cdf_metrics = CDF_METRICS if plots else ()
    server = load_server_view(run_dir)
    evaluation = compute_evaluation(
        scenario, requests, sessions, run_info, cdf_metrics=cdf_metrics, server=server
    )
    files = [write_summary(run_dir, evaluation.summary), write_slo(run_dir, evaluation.slos)]
    evaluation.health.write(run_dir)
    files += [run_dir / "health.json", run_dir / "health.txt"]
    files += write_metric_csvs(run_dir, evaluation.digests)
    if "timeslices" in evaluation.summary:
        files.append(write_timeslices_csv(run_dir, evaluation.summary["timeslices"]))
    if plots:
        release_memory()
        windows = evaluation.summary["run"].get("phases") or []
        boundaries = plot_boundaries(windows) if scenario.phases else []
        with collector_paused():
            files += write_plots(run_dir, measured_rows(requests), evaluation.digests, boundaries)
            files += write_ramp_plot(run_dir, evaluation.summary.get("ramp"))
            if server is not None:
                scraped = evaluation.summary.get("server", {}).get("clients")
                views = warmup_window(windows)
                files += write_server_plot(run_dir, requests, server, views, scraped)
        from veeksha.evaluate.html_report import write_html_report

        files.append(
            write_html_report(run_dir, evaluation, [f for f in files if f.suffix == ".png"])
        )
    evaluation.files = files
    return evaluation


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The garbage collector off inside (as it was, after). matplotlib's import makes ~46,000
    objects that live as long as the process, and each figure a few thousand in cycles: the
    collector's passes over them while the plots are drawn took 50-90 ms of a short run's CPU.
    The figures' cycles are collected once it is back on."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
