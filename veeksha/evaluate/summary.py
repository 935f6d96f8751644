"""summary.json: every aggregate of a run under stable, documented keys.

Top-level keys (``docs/evaluation_outputs.md`` documents each field):

    schema_version  1
    run             run_info as given (t0 wall time, measured window, interrupted, stop reason,
                    CPU seconds, target), plus ``partial``
    requests        measured requests recorded, by status (``metrics.request_counts``)
    latency         ttfc, tbc, tpot, e2e, normalized_e2e, output_throughput, generator_delay,
                    dispatch_lag: {unit, count, mean, min, max, std, p50, p90, p95, p99, p99_9}
    chunk_reads     TBC gaps, and how many of them are 0 because both chunks came in one read
    throughput      measured window and requests/s, input/output/total tokens/s
    sessions        outcomes, sessions/s, duration / requests_per_session / think_time
    errors          error and cancellation rates, by error kind
    abandonment     with the scenario's abandonment: requests chosen, abandoned, answered
                    first, and how late each abandoned one was dropped after its time
    prefill         TTFC per prompt-length bucket
    goodput         requests and sessions meeting every SLO, per second
    health          verdict and each check's status
    slos            all_met and each SLO's observed value
    ramp            with traffic_scheduler.ramp: per window of session starts, the offered rate
                    against the achieved one and latency (``veeksha.evaluate.ramp_report``)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from veeksha.evaluate.carried import carried_over
from veeksha.evaluate.health import HealthReport
from veeksha.evaluate.metrics import (
    LATENCY_METRICS,
    Digest,
    abandonment,
    chunk_reads,
    digest,
    error_rates,
    latency_stats,
    measured_window,
    metric_sample,
    prefill_buckets,
    request_counts,
    throughput,
)
from veeksha.evaluate.peaks import peaks
from veeksha.evaluate.sessions import session_metrics
from veeksha.evaluate.slo import SloResult, all_met, goodput
from veeksha.evaluate.source import ColumnSource, release_memory
from veeksha.scenario.models import SLO

__all__ = ["SCHEMA_VERSION", "Aggregates", "compute_aggregates", "summary_document"]

SCHEMA_VERSION = 1


@dataclass(slots=True)
class Aggregates:
    """The metrics of the measured phase, and the digests of their samples (CSVs, SLOs, plots)."""

    digests: dict[str, Digest]
    window: tuple[float, float] | None
    sections: dict[str, Any]


def metric_digests(
    requests: pa.Table | ColumnSource, slos: list[SLO], cdf_metrics: tuple[str, ...] = ()
) -> dict[str, Digest]:
    """The digest of every latency metric, one sample at a time (each dropped before the next);
    with the CDF of ``cdf_metrics`` (``plots.CDF_POINTS`` points)."""
    from veeksha.evaluate.plots import CDF_POINTS

    digests = {}
    for metric in LATENCY_METRICS:
        fractions = tuple(dict.fromkeys(s.percentile for s in slos if s.metric == metric.name))
        points = CDF_POINTS if metric.name in cdf_metrics else None
        sample = metric_sample(requests, metric)
        digests[metric.name] = digest(sample, metric.unit, fractions, points)
        del sample
        release_memory()
    return digests


def compute_aggregates(
    requests: pa.Table | ColumnSource,
    sessions: pa.Table | ColumnSource,
    slos: list[SLO],
    cdf_metrics: tuple[str, ...] = (),
    recorded_sessions: pa.Table | ColumnSource | None = None,
    recorded_requests: pa.Table | ColumnSource | None = None,
) -> Aggregates:
    """Every metric section of summary.json from the measured rows. ``recorded_sessions``: the
    run's every session row (all phases; default ``sessions``), which tells a session without
    a row from one whose row is another phase's; ``recorded_requests`` and it: the rows of the
    requests and sessions carried into the window (``veeksha.evaluate.carried``; default: the
    measured rows, which carry none)."""
    digests = metric_digests(requests, slos, cdf_metrics)
    window = measured_window(requests)
    every_session = sessions if recorded_sessions is None else recorded_sessions
    every_request = requests if recorded_requests is None else recorded_requests
    carried = carried_over(every_request, every_session, sessions, window)
    sections: dict[str, Any] = {
        "requests": request_counts(requests),
        "latency": latency_stats(digests),
        "chunk_reads": chunk_reads(requests, digests["tbc"].count),
        "throughput": throughput(requests, window, carried.requests)
        | peaks(requests, window, carried.requests),
    }
    steps = (
        (
            "sessions",
            lambda: session_metrics(
                sessions, requests, window, recorded_sessions, carried.sessions.num_rows
            ),
        ),
        ("errors", lambda: error_rates(requests)),
        ("prefill", lambda: prefill_buckets(requests)),
        ("goodput", lambda: goodput(requests, sessions, slos, window, carried)),
    )
    for key, compute in steps:
        release_memory()
        sections[key] = compute()
    abandoned = abandonment(requests)
    if abandoned is not None:
        sections["abandonment"] = abandoned
    release_memory()
    return Aggregates(digests, window, sections)


def summary_document(
    aggregates: Aggregates,
    run_info: Mapping[str, Any],
    health: HealthReport,
    slos: list[SloResult],
) -> dict[str, Any]:
    """The content of summary.json."""
    return {
        "schema_version": SCHEMA_VERSION,
        "run": dict(run_info),
        **aggregates.sections,
        "health": {
            "verdict": health.verdict,
            "checks": {r.name: r.status for r in health.results},
        },
        "slos": {"all_met": all_met(slos), "results": [r.to_dict() for r in slos]},
    }
