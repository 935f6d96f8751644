"""The server's own account of its latency, from the histograms of its ``/metrics``.

vLLM (and SGLang, TGI for some) observe each finished request's time to first token, end-to-end
latency and, vLLM, the parts of it: time queued for a slot, prefill (slot to first token) and
decode (first token to last). Their Prometheus histograms are counters, so what the run added
is their increase from the first scrape (just before t0) to the last (after the drain), series
by series, a reset read as Prometheus reads one (``server_view.increase``), summed over the
label sets of a name (models, engines) for each bucket bound ``le``.

For each of ``ttft``, ``e2e``, ``queue``, ``prefill``, ``decode``, ``itl`` (the first of its names
a scrape holds, in the order of :data:`HISTOGRAMS`): ``metric``, ``count`` (requests observed),
``mean`` (the increase of ``_sum`` over that of ``_count``: exact), and ``p50``, ``p90``,
``p99`` estimated as Prometheus' ``histogram_quantile`` estimates them (linearly inside the
bucket that holds the rank; in the +Inf bucket, the largest finite bound) with
``p50_bucket`` ... ``[low, high]``, that bucket's bounds: all that is known of the quantile.
So the means are the figures to hold against veeksha's own; the quantiles are as fine as the
server's buckets (vLLM's TTFT: 1, 5, 10, 20, 40, 60, 80, 100, 250, 500 ms, ...; its queue,
prefill and decode times: 0.3, 0.5, 0.8, 1 s, ...: a p50 "150 ms" there says below 300 ms).

The server's clock starts when it has read the request and stops when it has handed the last
token to its HTTP layer: the difference between veeksha's mean TTFC and the server's mean TTFT
is what the network, the server's HTTP layer and veeksha's own reading add (the report shows it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["HISTOGRAMS", "histogram_latency", "histogram_metrics", "histogram_quantile"]

#: what → the histogram names that give it, in order of preference
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "e2e": (
        "vllm:e2e_request_latency_seconds",
        "sglang:e2e_request_latency_seconds",
        "tgi_request_duration",
    ),
    "queue": ("vllm:request_queue_time_seconds", "tgi_request_queue_duration"),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
    "itl": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ),
}
_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def histogram_quantile(
    q: float, buckets: Iterable[tuple[float, float]]
) -> tuple[float, float, float] | None:
    """The ``q`` quantile of a cumulative histogram (``(le, count)`` pairs, +Inf included), as
    Prometheus estimates it, and the bounds of the bucket that holds it (all that is known of
    it): ``(estimate, low, high)``; None without observations."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    rank = q * ordered[-1][1]
    below_bound, below_count = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if np.isinf(bound):  # (in the +Inf bucket: the largest finite bound is all known)
                return below_bound, below_bound, bound
            share = (rank - below_count) / (count - below_count) if count > below_count else 1.0
            return below_bound + (bound - below_bound) * share, below_bound, bound
        below_bound, below_count = bound, count
    return below_bound, below_bound, float("inf")


def histogram_metrics() -> list[str]:
    """Every row name the histograms of :data:`HISTOGRAMS` have (``_bucket``, ``_sum``,
    ``_count``): what to read of server_metrics.parquet."""
    return [
        f"{name}{suffix}"
        for names in HISTOGRAMS.values()
        for name in names
        for suffix in ("_bucket", "_sum", "_count")
    ]


def histogram_latency(
    rows: Iterable[Mapping[str, Any]], first_t: float, increase: Any
) -> dict[str, dict[str, Any]]:
    """``{what: {metric, count, mean, p50, p90, p99}}`` of the histograms in ``rows`` (the
    server_metrics.parquet rows of ``metric`` names ``NAME_bucket``, ``NAME_sum``,
    ``NAME_count``); ``first_t``: the first scrape's time (a series that first appears later
    counts from 0); ``increase``: ``server_view.increase``."""
    wanted = {metric: metric.rpartition("_")[0] for metric in histogram_metrics()}
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row in rows:
        if row["metric"] in wanted:
            series.setdefault((row["metric"], row["labels"]), []).append((row["t"], row["value"]))
    grown: dict[str, dict[str, float]] = {}  # histogram name → "sum" / "count" / le → increase
    for (metric, labels), samples in series.items():
        samples.sort()
        values = np.array([value for _, value in samples])
        rise = increase(values, start=None if samples[0][0] == first_t else 0.0)
        name = wanted[metric]
        part = metric.removeprefix(name)
        key = part.removeprefix("_") if part != "_bucket" else json.loads(labels).get("le", "")
        totals = grown.setdefault(name, {})
        totals[key] = totals.get(key, 0.0) + rise
    out: dict[str, dict[str, Any]] = {}
    for what, names in HISTOGRAMS.items():
        found = next((n for n in names if grown.get(n, {}).get("count")), None)
        if found is None:
            continue
        totals = grown[found]
        buckets = [(float(le), n) for le, n in totals.items() if le not in ("sum", "count")]
        entry: dict[str, Any] = {
            "metric": found,
            "count": round(totals["count"]),
            "mean": totals.get("sum", 0.0) / totals["count"],
        }
        for label, q in _QUANTILES:
            found_q = histogram_quantile(q, buckets)
            entry[label] = None if found_q is None else found_q[0]
            entry[f"{label}_bucket"] = None if found_q is None else list(found_q[1:])
        out[what] = entry
    return out
