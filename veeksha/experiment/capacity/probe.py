"""One probe run: the scenario at a knob value, run as a normal run folder, read back.

The probe's scenario is the searched scenario with

- the knob set to the value (``knob``);
- the client pointed at the search's one server (the built-in simulator the search started, or
  the scenario's own ``api_base``), so every probe measures the same server process;
- a warmup of ``warmup_seconds`` (with a concurrent scheduler at least its ``rampup_seconds``:
  the measured phase runs at the full concurrency) when the scenario sets no warmup of its own
  (the first seconds' sessions are untracked: the server reaches the load's steady state first);
- for the k-th extension of an undecided value: ``seed + k`` (new sessions, so the pooled runs
  are independent samples) and ``max_sessions`` and ``benchmark_timeout`` times 2^k (those that
  are set).

It runs through :func:`veeksha.experiment.point.run_point` and is read only from its folder: the
health verdict of summary.json and, per SLO, the measured phase's values of the SLO's metric in
requests.parquet, the sample the run's own SLO evaluation judges (``veeksha.evaluate.slo``): the
finished values (TBC every gap), and every request that never finished (failed, timed out or cut
off in flight; for TTFC one without a first chunk) as one infinitely slow value, so a server that
sheds load by failing requests does not pass a capacity probe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from veeksha.errors import RunAbortedError
from veeksha.evaluate.slo import finished_values, never_produced, unfinished_rows
from veeksha.experiment.capacity.knob import Knob
from veeksha.experiment.capacity.measure import ProbeRun, RunRequest
from veeksha.experiment.point import run_point
from veeksha.record.parquet import read_table
from veeksha.scenario.models import SLO, ConcurrentScheduler, Scenario
from veeksha.scenario.phases import WARMUP

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from veeksha.server.managed import ManagedServer

__all__ = [
    "ProbeRunner",
    "ProbeSample",
    "probe_scenario",
    "read_probe_sample",
    "read_slo_samples",
]

REQUESTS_FILE = "requests.parquet"


def probe_scenario(
    scenario: Scenario,
    knob: Knob,
    request: RunRequest,
    warmup_seconds: float,
    target: tuple[str, str] | None = None,
) -> Scenario:
    """The scenario of one probe run (see the module docstring); ``target`` is (api_base,
    model) of the shared server."""
    probe = knob.apply(scenario, request.value)
    runtime = probe.runtime
    runtime_update: dict[str, object] = {}
    traffic = probe.traffic_scheduler
    if isinstance(traffic, ConcurrentScheduler):  # measure at full concurrency, after ramp-up
        warmup_seconds = max(warmup_seconds, traffic.rampup_seconds)
    if runtime.warmup_sessions == 0 and runtime.warmup_seconds == 0 and warmup_seconds > 0:
        runtime_update["warmup_seconds"] = warmup_seconds
    if request.extension:
        factor = 2**request.extension
        if runtime.max_sessions > 0:
            runtime_update["max_sessions"] = runtime.max_sessions * factor
        if runtime.benchmark_timeout > 0:
            runtime_update["benchmark_timeout"] = runtime.benchmark_timeout * factor
    update: dict[str, object] = {"runtime": runtime.model_copy(update=runtime_update)}
    if request.extension:
        update["seed"] = probe.seed + request.extension
    probe = probe.model_copy(update=update)
    if target is not None:  # (every client the shared simulator serves: ``aim_clients``)
        from veeksha.experiment.shared_server import aim_clients

        probe = aim_clients(probe, *target)
    return probe


@dataclass(frozen=True, slots=True)
class ProbeSample:
    """What a probe run's requests.parquet holds for the judge: per SLO the values (see
    ``read_slo_samples``), the measured LLM requests and how many of them failed."""

    values: tuple[NDArray[np.float64], ...]
    requests: int = 0
    failed: int = 0  # requests that never finished (``evaluate.slo.unfinished_rows``)


def read_slo_samples(run_dir: Path, slos: Sequence[SLO]) -> tuple[NDArray[np.float64], ...]:
    """Per SLO, the measured phase's values of its metric (NaN dropped, TBC flattened), plus one
    +inf per measured request counted above the SLO's bound (``evaluate.slo.never_produced``):
    a failed request met no latency objective; one cut off in flight by the run's stop counts
    only when it was in flight longer than the bound. Empty arrays when the run left no
    requests file."""
    return read_probe_sample(run_dir, slos).values


def read_probe_sample(run_dir: Path, slos: Sequence[SLO]) -> ProbeSample:
    """``read_slo_samples``' values, with the counts of measured and failed requests."""
    metrics = sorted({slo.metric for slo in slos})
    path = run_dir / REQUESTS_FILE
    try:
        kind = ["kind"] if "kind" in pq.read_schema(path).names else []
        columns = ["phase", "status", "sent_at", "first_chunk_at", "completed_at", *kind, *metrics]
        table = read_table(path, columns=list(dict.fromkeys(columns)))  # (this thread alone)
    except (OSError, ValueError, KeyError):  # (KeyError: a column the file lacks)
        return ProbeSample(tuple(np.empty(0) for _ in slos))
    # the rows the run's own SLOs judge (evaluate.stats.measured_rows): every phase but the
    # warmup, and no tool call (its call time is no LLM latency)
    keep = pc.not_equal(table["phase"], WARMUP)
    if kind:
        keep = pc.and_(keep, pc.fill_null(pc.not_equal(table["kind"], "tool"), True))
    measured = table.filter(keep)
    unfinished = unfinished_rows(measured)
    finished: dict[str, NDArray[np.float64]] = {}
    for metric in metrics:
        if metric == "tbc":
            array = pc.list_flatten(measured[metric]).to_numpy(zero_copy_only=False)
            values = np.asarray(array, dtype=np.float64)
            finished[metric] = values[~np.isnan(values)]
        else:
            finished[metric] = finished_values(measured, metric, unfinished)
    samples = []
    for slo in slos:  # (a cut-off counts or not by the SLO's own bound: never_produced)
        missing = int(never_produced(measured, slo.metric, unfinished, slo.value).sum())
        samples.append(np.concatenate((finished[slo.metric], np.full(missing, np.inf))))
    failed = int(unfinished.sum())
    return ProbeSample(tuple(samples), measured.num_rows, failed)


@dataclass
class ProbeRunner:
    """Runs probes of one search into ``runs_dir`` (a callable for ``measure_value``)."""

    scenario: Scenario
    knob: Knob
    slos: Sequence[SLO]
    runs_dir: Path
    warmup_seconds: float
    target: tuple[str, str] | None = None
    plots: bool = True
    server: ManagedServer | None = None  # the search's managed server, shared by its probes

    def __call__(self, request: RunRequest) -> ProbeRun:
        from veeksha.server.managed import server_identity

        scenario = probe_scenario(
            self.scenario, self.knob, request, self.warmup_seconds, self.target
        )
        server = self.server
        if server is not None and server_identity(scenario) != server_identity(self.scenario):
            server = None  # (the knob changes the server itself: the probe starts its own)
        point = run_point(scenario, self.runs_dir, quiet=True, plots=self.plots, server=server)
        run = point.summary.get("run")
        stopped = run.get("stop_reason") if isinstance(run, dict) else None
        if point.interrupted and stopped != "errors":  # (its failures over runtime.max_errors
            # or max_error_rate: the value's own result, judged on what it had, not a stop)
            raise RunAbortedError(f"interrupted during the probe at {request.value:g}")
        health = point.summary.get("health", {})
        verdict = health.get("verdict") if isinstance(health, dict) else None
        if verdict is None:
            detail = f"the run wrote no summary.json (exit code {point.exit_code})"
            return ProbeRun(request, point.run_dir, False, detail)
        if verdict == "FAIL":
            checks = health.get("checks", {})
            failed = sorted(name for name, status in checks.items() if status == "FAIL")
            return ProbeRun(request, point.run_dir, False, "health FAIL: " + ", ".join(failed))
        sample = read_probe_sample(point.run_dir, self.slos)
        return ProbeRun(
            request,
            point.run_dir,
            True,
            f"health {verdict}",
            sample.values,
            sample.requests,
            sample.failed,
        )
