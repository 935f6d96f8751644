"""Per-request latency metrics and the request-level aggregates of the measured phase.

A metric is a small self-describing object (name, unit, description, how to read its sample from
the requests table) and ``LATENCY_METRICS`` is the explicit tuple of them. The per-request values
come from the recorder's columns (``veeksha.record.rows`` defines them); this module only
aggregates. Latency columns are null for failed requests, so latency samples are over ``ok``
requests; failures are counted in ``request_counts`` and ``error_rates``, never dropped.

Definitions (SCENARIO_REFERENCE.md; ``sent_at`` = the worker wrote the request):

    ttfc = first_chunk_at - sent_at                  e2e = completed_at - sent_at
    tbc  = every gap between consecutive chunks      tpot = (e2e - ttfc) / (output_tokens - 1)
    normalized_e2e = e2e / output_tokens             output_throughput = output_tokens / e2e
    generator_delay = sent_at - ready_at             dispatch_lag = dispatched_at - ready_at

The measured window runs from the first ``sent_at`` to the last ``completed_at`` of the measured
requests; throughputs divide by its length the ok requests completed inside it: the measured ones,
and those sent before it opened (a warmup's, an earlier phase's) still being served then
(``veeksha.evaluate.carried``). Worked example: two ok requests sent at 1.0 and 2.0 s, completed
at 1.5 and 3.0 s, 10 and 30 output tokens: window 2.0 s, 1.0 request/s, 20 tokens/s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.sample import (
    ArraySample,
    Sample,
    StreamedSample,
    percentile_fractions,
    sample_of,
)
from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import (
    CSV_PERCENTILES,
    PERCENTILES,
    Floats,
    column,
    describe,
    distinct,
    flat_list,
    floats,
    int_column,
    rows_where,
    scalar,
    status_is,
)
from veeksha.record import kernels as ak

__all__ = [
    "LATENCY_METRICS",
    "MAX_HELD_VALUES",
    "STATUSES",
    "Digest",
    "Metric",
    "chunk_reads",
    "digest",
    "error_rates",
    "latency_stats",
    "measured_window",
    "metric_sample",
    "prefill_buckets",
    "request_counts",
    "throughput",
]

#: Request statuses of requests.parquet, in report order.
STATUSES = ("ok", "error", "timeout", "cancelled", "abandoned")


@dataclass(frozen=True, slots=True)
class Metric:
    """One per-request metric: its sample is read from the requests table of the measured phase."""

    name: str
    unit: str
    description: str
    sample: Callable[[pa.Table], Floats]
    is_list: bool = False


def _scalar(name: str) -> Callable[[pa.Table], Floats]:
    def read(table: pa.Table) -> Floats:
        values = column(table, name)
        return values[~np.isnan(values)]

    return read


def _gaps(table: pa.Table) -> Floats:
    return flat_list(table, "tbc")


LATENCY_METRICS: tuple[Metric, ...] = (
    Metric("ttfc", "s", "time to first chunk: first_chunk_at − sent_at", _scalar("ttfc")),
    Metric(
        "answer_ttfc",
        "s",
        "a reasoning model's time to its first answer chunk, after its thinking",
        _scalar("answer_ttfc"),
    ),
    Metric("tbc", "s", "every gap between consecutive chunks", _gaps, is_list=True),
    Metric("tpot", "s", "(e2e − ttfc) / (output_tokens − 1), ≥ 2 tokens", _scalar("tpot")),
    Metric("e2e", "s", "end to end latency: completed_at − sent_at", _scalar("e2e")),
    Metric("normalized_e2e", "s/token", "e2e / output_tokens", _scalar("normalized_e2e")),
    Metric(
        "output_throughput",
        "tokens/s",
        "output_tokens / e2e per request",
        _scalar("output_throughput"),
    ),
    Metric(
        "generator_delay",
        "s",
        "sent_at − ready_at: veeksha's own scheduling, dispatch and IPC delay",
        _scalar("generator_delay"),
    ),
    Metric(
        "dispatch_lag",
        "s",
        "dispatched_at − ready_at: the main loop's lateness",
        _scalar("dispatch_lag"),
    ),
)


#: A sample with more values than this is streamed from the Parquet file in passes
#: (``StreamedSample``: 3,000,000 requests' TBC gaps would take 168 MB), not held in memory.
MAX_HELD_VALUES = 4_000_000


def _batch_values(batch: pa.Array, is_list: bool) -> Floats:
    if is_list:
        batch = ak.list_flatten(batch)
    return floats(batch)


def metric_sample(
    requests: pa.Table | ColumnSource, metric: Metric, max_held: int | None = None
) -> Sample:
    """``metric``'s sample of the measured ``requests``: in memory up to ``max_held`` values,
    else streamed (the same aggregates either way, see ``veeksha.evaluate.sample``)."""
    source = ColumnSource.of(requests)
    name = metric.name
    if name not in source.schema.names:  # (a run recorded before the column existed)
        return ArraySample(np.empty(0))
    max_held = MAX_HELD_VALUES if max_held is None else max_held

    def chunks() -> Iterator[Floats]:
        return (_batch_values(batch, metric.is_list) for batch in source.batches(name))

    if not metric.is_list and source.num_rows <= max_held:
        return ArraySample.of(metric.sample(source))
    streamed = StreamedSample(chunks)
    if streamed.size > max_held:
        return streamed
    held = [values[~np.isnan(values)] for values in chunks()]
    return ArraySample(np.concatenate(held) if held else np.empty(0))


@dataclass(frozen=True, slots=True)
class Digest:
    """What the evaluation keeps of a metric's sample once the sample is dropped.

    ``stats``: ``describe``; ``csv``: the ``CSV_PERCENTILES`` quantiles (empty without data);
    ``quantiles``: fraction → quantile for the fractions asked (the SLOs'); ``cdf``: the
    quantiles at ``cdf_points`` evenly spaced fractions when asked (plots), ``median`` likewise.
    """

    unit: str
    stats: dict[str, Any]
    csv: list[float]
    quantiles: dict[float, float]
    cdf: Floats | None = None
    median: float | None = None

    @property
    def count(self) -> int:
        return int(self.stats["count"])


def digest(
    values: Floats | Sample,
    unit: str,
    fractions: tuple[float, ...] = (),
    cdf_points: int | None = None,
) -> Digest:
    """The ``Digest`` of a sample (an array is taken as a sample, NaN dropped)."""
    sample = sample_of(values)
    if sample.size == 0:
        return Digest(unit, sample.describe(), [], {})
    # every quantile in one call: a streamed sample selects them all in the same passes
    groups = [
        percentile_fractions(PERCENTILES),
        percentile_fractions(CSV_PERCENTILES),
        np.array(fractions, dtype=np.float64),
        np.linspace(0, 1, 0 if cdf_points is None else min(cdf_points, sample.size)),
    ]
    found = np.split(sample.quantiles(np.concatenate(groups)), np.cumsum([g.size for g in groups]))
    stats = sample.describe()  # its percentiles were among those selected
    csv = found[1].tolist()
    quantiles = {f: float(v) for f, v in zip(fractions, found[2].tolist(), strict=True)}
    if cdf_points is None:
        return Digest(unit, stats, csv, quantiles)
    return Digest(unit, stats, csv, quantiles, found[3], sample.median())


def latency_stats(digests: Mapping[str, Digest]) -> dict[str, dict[str, Any]]:
    """Every metric's statistics, with its unit: summary.json's ``latency``."""
    return {name: {"unit": d.unit, **d.stats} for name, d in digests.items()}


def measured_window(requests: pa.Table) -> tuple[float, float] | None:
    """(first sent_at, last completed_at) of the measured requests; None when nothing was sent."""
    sent = column(requests, "sent_at")
    done = column(requests, "completed_at")
    if np.isnan(sent).all() or np.isnan(done).all():
        return None
    start, end = float(np.nanmin(sent)), float(np.nanmax(done))
    return (start, end) if end > start else None


def request_counts(requests: pa.Table) -> dict[str, int]:
    """Measured requests recorded, by status (failed and cancelled ones included), and
    ``cancelled_in_flight``: the cancelled ones that had been dispatched (cut by the run's stop,
    not nodes it never sent); with the image channel, ``with_images`` (requests whose own
    message carried images) and ``images`` (how many in all)."""
    counts = {"total": requests.num_rows} | dict.fromkeys(STATUSES, 0)
    if requests.num_rows:
        for entry in ak.value_counts(requests.column("status")).to_pylist():
            counts[entry["values"]] = counts.get(entry["values"], 0) + int(entry["counts"])
    counts["cancelled_in_flight"] = 0
    if counts["cancelled"] and "dispatched_at" in requests.schema.names:
        dispatched = ~np.isnan(column(requests, "dispatched_at"))
        counts["cancelled_in_flight"] = int((status_is(requests, "cancelled") & dispatched).sum())
    if "images" in requests.schema.names:
        images = int_column(requests, "images")  # (the image channel's; nulls are 0)
        if images.any():
            counts["with_images"] = int((images > 0).sum())
            counts["images"] = int(images.sum())
    return counts


def _ok_sum(requests: pa.Table | ColumnSource, ok: np.ndarray, name: str) -> int:
    values = column(requests, name)[ok]
    return int(np.nansum(values))


def throughput(
    requests: pa.Table | ColumnSource,
    window: tuple[float, float] | None,
    carried: pa.Table | ColumnSource | None = None,
) -> dict[str, Any]:
    """System throughput over the measured window (None without a window): the ok measured
    requests and the ``carried`` ones (ok requests sent before the window opened and completed
    inside it, ``veeksha.evaluate.carried``), which the server served in the window too."""
    ok = status_is(requests, "ok")
    input_tokens = _ok_sum(requests, ok, "prompt_tokens_total")
    output_tokens = _ok_sum(requests, ok, "output_tokens")
    completed = int(ok.sum())
    carried_over = 0
    if carried is not None and carried.num_rows:
        every = np.ones(carried.num_rows, dtype=bool)  # (all ok: carried_over's own filter)
        carried_over = carried.num_rows
        input_tokens += _ok_sum(carried, every, "prompt_tokens_total")
        output_tokens += _ok_sum(carried, every, "output_tokens")
    completed += carried_over
    out: dict[str, Any] = {
        "window_start": None if window is None else window[0],
        "window_end": None if window is None else window[1],
        "window_s": None if window is None else window[1] - window[0],
        "completed_requests": completed,
        "carried_over_requests": carried_over,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
    }
    span = None if window is None else window[1] - window[0]
    out["requests_per_s"] = None if span is None else completed / span
    out["input_tokens_per_s"] = None if span is None else input_tokens / span
    out["output_tokens_per_s"] = None if span is None else output_tokens / span
    out["total_tokens_per_s"] = None if span is None else (input_tokens + output_tokens) / span
    return out


def chunk_reads(requests: pa.Table | ColumnSource, tbc_gaps: int) -> dict[str, Any]:
    """How many TBC gaps of the ok requests are 0 because the two chunks came in one socket
    read (``chunks_coalesced``): their count and share of ``tbc_gaps`` (None without gaps, or
    for rows recorded before the column existed)."""
    try:
        values = column(requests, "chunks_coalesced")[status_is(requests, "ok")]
    except (KeyError, IndexError, pa.ArrowInvalid):  # (a run recorded before the column)
        return {"gaps": tbc_gaps, "coalesced": None, "coalesced_share": None}
    coalesced = int(np.nansum(values))
    share = coalesced / tbc_gaps if tbc_gaps else None
    return {"gaps": tbc_gaps, "coalesced": coalesced, "coalesced_share": share}


def abandonment(requests: pa.Table | ColumnSource) -> dict[str, Any] | None:
    """summary.json's ``abandonment`` (the scenario's ``abandonment``; None when no measured
    request was to be abandoned, or for rows recorded before ``abandon_after`` existed): how
    many requests sent were to be (``chosen``), were ``abandoned``, and were answered before their
    time (``answered_first``), and how late the worker dropped each abandoned one after its
    time (``lateness``, s: ``completed_at − sent_at − abandon_after``, never negative)."""
    try:
        after = column(requests, "abandon_after")
    except (KeyError, IndexError, pa.ArrowInvalid):  # (a run recorded before the column)
        return None
    sent = column(requests, "sent_at")
    chosen = ~np.isnan(after) & ~np.isnan(sent)  # (a node cancelled before it was sent: not)
    if not chosen.any():
        return None
    abandoned = status_is(requests, "abandoned")
    held = column(requests, "completed_at") - sent
    return {
        "chosen": int(chosen.sum()),
        "abandoned": int(abandoned.sum()),
        "answered_first": int((chosen & status_is(requests, "ok")).sum()),
        "lateness": {"unit": "s", **describe((held - after)[abandoned])},
    }


def error_rates(requests: pa.Table) -> dict[str, Any]:
    """Failure and cancellation rates over all measured requests, overall and by error kind
    (``abandoned`` among the kinds: requests their user abandoned, not counted as failed)."""
    total = requests.num_rows
    counts = request_counts(requests)
    failed = counts["error"] + counts["timeout"]
    by_kind: dict[str, dict[str, Any]] = {}
    if total:
        bad = rows_where(requests, ak.not_equal(requests.column("status"), scalar("ok")))
        kinds = ak.coalesce(bad.column("error_kind"), scalar("unknown"))
        kinds = ak.if_else(ak.equal(kinds, scalar("")), scalar("unknown"), kinds)
        for entry in ak.value_counts(kinds).to_pylist():
            count = int(entry["counts"])
            by_kind[entry["values"]] = {"count": count, "rate": count / total}
        by_kind = dict(sorted(by_kind.items(), key=lambda kv: (-kv[1]["count"], kv[0])))
        for kind, example in _error_examples(bad, set(by_kind)).items():
            by_kind[kind]["example"] = example
    out = {
        "requests": total,
        "failed": failed,
        "cancelled": counts["cancelled"],
        "error_rate": failed / total if total else None,
        "cancellation_rate": counts["cancelled"] / total if total else None,
        "by_kind": by_kind,
    }
    if counts["abandoned"]:  # (the scenario's abandonment: its users', not failures)
        out["abandoned"] = counts["abandoned"]
        out["abandonment_rate"] = counts["abandoned"] / total
    return out


#: The longest ``example`` message of an error kind kept in summary.json (characters).
ERROR_EXAMPLE_CHARS = 300


def _error_examples(bad: pa.Table | ColumnSource, kinds: set[str]) -> dict[str, str]:
    """The first ``error_message`` of each of ``kinds`` among the rows ``bad`` (a kind's
    name as ``error_rates`` counts it), cut to ``ERROR_EXAMPLE_CHARS``: what the server or
    veeksha said, so a run whose requests failed says why without opening its rows. The rows
    are read a batch at a time until every kind has one (the first batch, as a rule); none
    without the column (a run recorded before it, or a table of ``EVALUATION_COLUMNS``)."""
    source = ColumnSource.of(bad)
    names = source.schema.names
    if "error_message" not in names or "error_kind" not in names or not kinds:
        return {}
    found: dict[str, str] = {}
    pending_kinds: list[Any] = []
    pending_messages: list[Any] = []
    messages = source.batches("error_message")
    for kind_batch in source.batches("error_kind"):
        pending_kinds.extend(kind_batch.to_pylist())
        while len(pending_messages) < len(pending_kinds):
            batch = next(messages, None)
            if batch is None:
                break
            pending_messages.extend(batch.to_pylist())
        for kind, message in zip(pending_kinds, pending_messages, strict=False):
            name = kind or "unknown"
            if name in kinds and name not in found and message:
                found[name] = _cut(str(message), ERROR_EXAMPLE_CHARS)
        taken = min(len(pending_kinds), len(pending_messages))
        del pending_kinds[:taken], pending_messages[:taken]
        if len(found) == len(kinds):
            break
    return found


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _bucket_bounds(tokens: int) -> tuple[int, int]:
    if tokens < 1:
        return 0, 1
    low = 1 << (int(tokens).bit_length() - 1)
    return low, 2 * low


def prefill_buckets(requests: pa.Table) -> list[dict[str, Any]]:
    """TTFC grouped by whole-prompt length (``prompt_tokens_total``) in power-of-two buckets.

    Bucket ``[lo, hi)`` holds the ok requests with lo ≤ prompt tokens < hi (lo a power of two, or
    0 for an empty prompt); only buckets with requests are listed, shortest first.
    """
    ttfc = column(requests, "ttfc")
    tokens = column(requests, "prompt_tokens_total")
    keep = ~np.isnan(ttfc) & ~np.isnan(tokens)
    if not keep.all():
        ttfc, tokens = ttfc[keep], tokens[keep]
    del keep
    tokens = tokens.astype(np.int64)
    bounds = sorted({_bucket_bounds(int(t)) for t in distinct(tokens)})
    bucket = np.full(tokens.size, -1, dtype=np.int16)  # the buckets do not overlap
    for i, (low, high) in enumerate(bounds):
        bucket[(tokens >= low) & (tokens < high)] = i
    del tokens
    out = []
    for i, (low, high) in enumerate(bounds):
        entry: dict[str, Any] = {"bucket": f"[{low}, {high})", "min_tokens": low}
        entry["max_tokens"] = high - 1
        out.append(entry | {"unit": "s", **describe(ttfc[bucket == i])})
    return out
