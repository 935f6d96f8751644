"""Per-phase evaluation of a multi-phase run: summary.json's ``phases`` section.

Each phase other than ``warmup`` is evaluated like a run of its own on its rows (a request's
phase is the phase it was released in, a session's the phase it started in): counts,
throughput over its own window, latency statistics, sessions, errors, goodput, the health
checks judged against the phase's own scheduler (so ``dispatch_rate`` and
``arrival_distribution`` hold each phase to its own rate and law), the SLOs, and, where the whole
run has them, the ``clients``, ``agents`` and ``rounds`` sections (``veeksha.evaluate.groups``) of
the phase's rows (every agent of the run listed, one without a turn in the phase at 0). The whole
run's headline stays the measured phases together; in a run with several phases its two
arrival checks are the phases' own, combined (a phase that fails fails the run; see
``combine_arrival_checks``), since no single configured rate describes the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from veeksha.evaluate.checks import run_health_checks
from veeksha.evaluate.groups import group_sections
from veeksha.evaluate.health import FAIL, PASS, SKIP, CheckResult, HealthInput, HealthReport
from veeksha.evaluate.slo import all_met, judge_slos
from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import measured_rows, rows_where, scalar
from veeksha.evaluate.summary import compute_aggregates
from veeksha.record import kernels as ak
from veeksha.scenario.models import SLO, Scenario
from veeksha.scenario.phases import WARMUP, phase_issues, resolve_phases

__all__ = ["ARRIVAL_CHECKS", "combine_arrival_checks", "measured_phases", "phase_sections"]

#: The checks judged per phase against each phase's own scheduler.
ARRIVAL_CHECKS = ("dispatch_rate", "arrival_distribution")


def measured_phases(scenario: Scenario, run_info: Mapping[str, Any]) -> list[str]:
    """The names of the run's phases other than warmup, in order (those the run began when
    ``run_info`` says; else the scenario's)."""
    windows = run_info.get("phases")
    if isinstance(windows, list) and windows:
        names = [str(w.get("name")) for w in windows if isinstance(w, Mapping)]
    else:
        names = [p.name for p in scenario.phases] or ["measured"]
    return [name for name in names if name != WARMUP]


def _rows(table: pa.Table | ColumnSource, name: str) -> pa.Table | ColumnSource:
    if table.num_rows == 0:
        return table
    return rows_where(table, ak.equal(table.column("phase"), scalar(name)))


def _phase_scenario(scenario: Scenario, name: str) -> Scenario:
    """``scenario`` with the phase's own scheduler (its arrival checks judge against it)."""
    if phase_issues(scenario):
        return scenario
    for spec in resolve_phases(scenario):
        if spec.name == name:
            return scenario.model_copy(update={"traffic_scheduler": spec.scheduler})
    return scenario


def phase_sections(
    scenario: Scenario,
    requests: pa.Table | ColumnSource,
    sessions: pa.Table | ColumnSource,
    slos: list[SLO],
    run_info: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, HealthReport]]:
    """summary.json's ``phases`` (one entry a measured phase) and each phase's health."""
    windows = {
        str(w.get("name")): w for w in run_info.get("phases") or [] if isinstance(w, Mapping)
    }
    sections: dict[str, Any] = {}
    reports: dict[str, HealthReport] = {}
    for name in measured_phases(scenario, run_info):
        rows, phase_sessions = _rows(requests, name), _rows(sessions, name)
        llm = measured_rows(rows)  # no tool row: out of every metric, as in the run
        aggregates = compute_aggregates(
            llm, phase_sessions, slos, recorded_sessions=sessions, recorded_requests=requests
        )
        results = judge_slos(slos, aggregates.digests, llm)
        own = _phase_scenario(scenario, name)
        health = run_health_checks(HealthInput(rows, llm, phase_sessions, own, run_info))
        reports[name] = health
        section: dict[str, Any] = {}
        window = windows.get(name)
        if window is not None:
            section["window"] = {k: v for k, v in window.items() if k != "name"}
        section |= aggregates.sections
        section["health"] = {
            "verdict": health.verdict,
            "checks": {r.name: r.status for r in health.results},
        }
        section["slos"] = {"all_met": all_met(results), "results": [r.to_dict() for r in results]}
        section |= group_sections(scenario, rows, run_info.get("target"), every_row=requests)
        sections[name] = section
    return sections, reports


def combine_arrival_checks(run: HealthReport, phases: Mapping[str, HealthReport]) -> HealthReport:
    """The run's report with its arrival checks replaced by the phases' own, combined: FAIL
    if a phase failed, PASS if one passed, else SKIP; the detail names each phase's."""
    results = []
    for result in run.results:
        if result.name not in ARRIVAL_CHECKS or not phases:
            results.append(result)
            continue
        own = {
            name: next(r for r in report.results if r.name == result.name)
            for name, report in phases.items()
        }
        statuses = [r.status for r in own.values()]
        status = FAIL if FAIL in statuses else PASS if PASS in statuses else SKIP
        detail = "; ".join(f"{name}: {r.status} {r.detail}" for name, r in own.items())
        statistics = {name: r.statistics for name, r in own.items()}
        results.append(
            CheckResult(
                result.name, result.description + " (per phase)", status, detail, statistics
            )
        )
    return HealthReport(tuple(results))
