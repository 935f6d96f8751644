"""Service-level objectives (``evaluators[].slos``) and goodput.

An SLO says "the ``percentile`` quantile of ``metric`` is at most ``value`` seconds". It is judged
on the measured phase with the same quantile rule as the summary (numpy linear interpolation),
TBC over all gaps. An SLO with no data (nothing measured) is not met.

**Requests that never finished count against it.** A request asked of the server that failed
(``error``, ``timeout``) has no E2E, TPOT, normalized E2E or TBC; it is in the SLO's sample as
a value above every bound (+inf: MLPerf counts such queries against the latency bound), one per
request. For TTFC only when it got no first chunk: one that did has its observed
``first_chunk_at − sent_at`` in the sample (the ``ttfc`` column is the ok requests' only). A
request cut off in flight by the run's own stop (``cancelled`` with a ``sent_at``: the end of
``post_timeout_grace_seconds``, a stopped run) is censored, not failed: for TTFC (no first
chunk) and E2E it counts the same way only when it had been in flight longer than the SLO's
``value`` (it cannot have met it), and is otherwise left out, as it is for TPOT, TBC and
normalized E2E (:func:`never_produced`). So is a request whose shard was lost with it in flight
(``error_kind`` ``shard_lost``, a distributed run: veeksha lost its outcome, the server did not
fail it), in flight from its dispatch to the last time it was known in flight, and a request
whose worker process died with it in flight (``worker_lost``). A request
cancelled before it was sent was never asked and is not in the sample. So an
overloaded run whose slowest requests time out cannot meet a p99 on the others: the quantile is
+inf, and not met, as soon as it falls among the unfinished requests (``observed`` null,
``beyond_finished`` true), and is otherwise taken among the finished values at the rank the
unfinished ones push it to.

Worked example: 8 ok requests with E2E 1..8 s and 2 timeouts, SLO p90 E2E ≤ 10 s: the sample is
1..8, +inf, +inf; the p90's virtual index 0.9 · 9 = 8.1 falls between 8 s and +inf: not met (the
ok requests alone would give 7.3 s, met).

Goodput counts the work that met every SLO. A request meets an SLO when its own value is within
the threshold (``ttfc``, ``tpot``, ``e2e``, ``normalized_e2e``; a value that is undefined, such as
the TPOT of a one-token answer, breaks nothing), and for ``tbc`` when at least ``percentile`` of
its gaps are within the threshold (a request with no gaps meets it). Goodput is the number of ok
requests meeting all SLOs, and of ok sessions whose measured requests all meet them, per second of
the measured window. Without SLOs every ok request and session counts.

Worked example: SLO p90 TBC ≤ 20 ms; a request with gaps 10, 15, 30 ms has 2/3 of its gaps within
20 ms, below 90%, so it does not count toward goodput.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from veeksha.dispatch.messages import SHARD_LOST, WORKER_LOST
from veeksha.evaluate.carried import CarriedOver
from veeksha.evaluate.metrics import LATENCY_METRICS, Digest, metric_sample
from veeksha.evaluate.sample import ArraySample, Sample
from veeksha.evaluate.sessions import session_ids
from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import (
    Floats,
    column,
    distinct,
    error_kind_is,
    floats,
    int_column,
    integers,
    status_is,
)
from veeksha.record import kernels as ak
from veeksha.scenario.models import SLO, Scenario

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "SloResult",
    "all_met",
    "finished_values",
    "goodput",
    "judge_slos",
    "never_produced",
    "request_meets",
    "scenario_slos",
    "slo_quantile",
    "unfinished_rows",
]


@dataclass(frozen=True, slots=True)
class SloResult:
    """One judged SLO: the observed quantile against the threshold.

    ``samples``: the values judged, ``unfinished`` (requests that never produced the metric,
    each one value above every bound) included; ``observed``: the quantile, None without data
    or when it falls among the unfinished requests (``beyond_finished``: not met).
    """

    name: str
    metric: str
    percentile: float
    threshold: float
    observed: float | None
    samples: int
    met: bool
    unfinished: int = 0
    beyond_finished: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"unit": "s"}


def scenario_slos(scenario: Scenario) -> list[SLO]:
    """Every SLO of every evaluator of ``scenario``."""
    return [slo for evaluator in scenario.evaluators for slo in evaluator.slos]


def unfinished_rows(requests: pa.Table | ColumnSource) -> NDArray[np.bool_]:
    """Per row: a request asked of the server that never finished: failed (``error``,
    ``timeout``; a ``shard_lost`` row too, judged as cut off by :func:`never_produced`) or cut
    off in flight (``cancelled`` after it was sent, ``abandoned`` by its user)."""
    failed = status_is(requests, "error") | status_is(requests, "timeout")
    if not requests.num_rows:
        return failed
    sent = ~np.isnan(column(requests, "sent_at"))
    return failed | (status_is(requests, "cancelled") & sent) | status_is(requests, "abandoned")


def never_produced(
    requests: pa.Table | ColumnSource,
    metric: str,
    unfinished: NDArray[np.bool_],
    bound: float,
) -> NDArray[np.bool_]:
    """Per row: an ``unfinished`` request counted above every bound of an SLO on ``metric``
    whose threshold is ``bound`` (s). A failed one (``error``, ``timeout``) always, but for
    ``ttfc`` only when it got no first chunk. One cut off in flight by the run's own stop
    (``cancelled`` after it was sent) is censored, not failed: all that is known is that its
    TTFC (without a first chunk) or E2E exceeds the time it was in flight, ``completed_at −
    sent_at``; it counts only when that time is over ``bound`` (it cannot have met the SLO),
    and is otherwise left out, like every cut-off for ``tpot``, ``tbc`` and
    ``normalized_e2e``, which say nothing of a request cut off mid-answer; one its user
    abandoned (``abandoned``) is cut off in the same way. A ``shard_lost``
    row (a distributed run's shard lost with it in flight: its outcome unknown, its
    ``completed_at`` the last time it was known in flight) is cut off in the same way, in
    flight from its ``dispatched_at`` (its send is unknown), and so is a ``worker_lost`` row
    (a worker process of this host died with it in flight: veeksha lost it, the server did
    not fail it). For ``answer_ttfc``, an ok answer that thought and never answered counts too
    (:func:`never_answered`)."""
    if not requests.num_rows:
        return unfinished
    counted = unfinished
    lost = error_kind_is(requests, SHARD_LOST) | error_kind_is(requests, WORKER_LOST)
    cut = unfinished & (status_is(requests, "cancelled") | status_is(requests, "abandoned") | lost)
    if cut.any():
        if metric in ("ttfc", "e2e"):
            since = column(requests, "sent_at")
            unsent = cut & np.isnan(since)  # (shard_lost rows: their send is unknown)
            if unsent.any():
                since = np.where(unsent, column(requests, "dispatched_at"), since)
            in_flight = column(requests, "completed_at") - since
            counted = unfinished & ~(cut & ~(in_flight > bound))
        else:
            counted = unfinished & ~cut
    if metric == "ttfc":
        counted = counted & np.isnan(column(requests, "first_chunk_at"))
    elif metric == "answer_ttfc":  # (and an ok answer that thought, then never answered)
        counted = counted | never_answered(requests)
    return counted


def never_answered(requests: pa.Table | ColumnSource) -> NDArray[np.bool_]:
    """Per row: an ok request whose reasoning model thought and never answered (its output
    ran out while thinking): no ``answer_ttfc``, counted above every bound of an SLO on it."""
    if "reasoning_chunks" not in requests.schema.names:  # (recorded before the column existed)
        return np.zeros(requests.num_rows, dtype=bool)
    thought = int_column(requests, "reasoning_chunks") > 0
    return thought & np.isnan(column(requests, "answer_ttfc")) & status_is(requests, "ok")


def finished_values(
    requests: pa.Table | ColumnSource, metric: str, unfinished: NDArray[np.bool_]
) -> Floats:
    """The values of a per-request ``metric`` (not ``tbc``) an SLO judges besides the unfinished
    requests: the ok requests' column, and for ``ttfc`` also ``first_chunk_at − sent_at`` of the
    unfinished requests that got a first chunk."""
    if metric not in requests.schema.names:  # (a run recorded before the column existed)
        return np.empty(0)
    values = column(requests, metric)
    if metric == "ttfc" and unfinished.any():
        first = column(requests, "first_chunk_at")
        sent = column(requests, "sent_at")
        values = np.where(unfinished, first - sent, values)
    out: Floats = values[~np.isnan(values)]
    return out


def slo_quantile(sample: Sample, percentile: float, unfinished: int) -> float | None:
    """The ``percentile`` quantile (numpy's linear method) of ``sample`` with ``unfinished``
    values above all of them (+inf): +inf when it falls among those, None without any value."""
    finished = sample.size
    total = finished + unfinished
    if total == 0:
        return None
    if unfinished == 0:
        return float(sample.quantiles(np.array([percentile]))[0])
    virtual = percentile * (total - 1)  # the index into the finished values, then the +inf ones
    if finished == 0 or virtual > finished - 1:
        return math.inf  # (at finished − 1 exactly the +inf above has weight 0)
    fraction = virtual / (finished - 1) if finished > 1 else 0.0
    return float(sample.quantiles(np.array([min(fraction, 1.0)]))[0])


def _tbc_sample(requests: pa.Table | ColumnSource) -> Sample:
    return metric_sample(requests, next(m for m in LATENCY_METRICS if m.name == "tbc"))


def judge_slos(
    slos: list[SLO],
    digests: Mapping[str, Digest],
    requests: pa.Table | ColumnSource,
) -> list[SloResult]:
    """Judge each SLO on the measured phase: its quantile over the finished values with the
    unfinished requests above every bound (see the module docstring). ``digests``
    (``summary.metric_digests``) hold the quantiles of the ok requests' samples, used as they
    are when no measured request (``requests``, the measured rows) is unfinished."""
    unfinished = unfinished_rows(requests)
    results = []
    for slo in slos:
        found = digests[slo.metric]
        observed = found.quantiles[slo.percentile] if found.count else None
        finished, missing = found.count, 0
        if unfinished.any() or slo.metric == "answer_ttfc":
            missing = int(never_produced(requests, slo.metric, unfinished, slo.value).sum())
            if slo.metric == "tbc":  # (the gaps' sample may be streamed: read it again)
                sample = _tbc_sample(requests)
            else:
                sample = ArraySample(finished_values(requests, slo.metric, unfinished))
            finished = sample.size
            observed = slo_quantile(sample, slo.percentile, missing)
        beyond = observed is not None and math.isinf(observed)
        met = observed is not None and not beyond and observed <= slo.value
        results.append(
            SloResult(
                slo.name,
                slo.metric,
                slo.percentile,
                slo.value,
                None if beyond else observed,
                finished + missing,
                met,
                missing,
                beyond,
            )
        )
    return results


def all_met(results: list[SloResult]) -> bool | None:
    """True when every SLO is met; None when there are none."""
    return all(r.met for r in results) if results else None


def _tbc_meets(requests: pa.Table | ColumnSource, slo: SLO) -> NDArray[np.bool_]:
    parts = [np.empty(0, dtype=bool)]
    for gaps in ColumnSource.of(requests).batches("tbc"):  # a batch of rows at a time
        flat = floats(ak.list_flatten(gaps))
        owner = integers(ak.list_parent_indices(gaps))
        n = len(gaps)
        total = np.bincount(owner, minlength=n)
        within = np.bincount(owner, weights=(flat <= slo.value).astype(float), minlength=n)
        share = np.divide(within, total, out=np.ones(n), where=total > 0)
        parts.append(np.asarray(share >= slo.percentile - 1e-12, dtype=bool))
    return np.concatenate(parts)


def request_meets(requests: pa.Table | ColumnSource, slos: list[SLO]) -> NDArray[np.bool_]:
    """Per row: an ok request meeting every SLO (see the module docstring)."""
    meets = status_is(requests, "ok")
    for slo in slos:
        if slo.metric == "tbc":
            meets &= _tbc_meets(requests, slo)
        elif slo.metric in requests.schema.names:
            values = column(requests, slo.metric)
            meets &= np.isnan(values) | (values <= slo.value)
            if slo.metric == "answer_ttfc":
                meets &= ~never_answered(requests)
    return meets


def _good_sessions(
    requests: pa.Table | ColumnSource,
    meets: NDArray[np.bool_],
    sessions: pa.Table | ColumnSource,
) -> int:
    ok_sessions = session_ids(sessions, "ok")
    if not requests.num_rows:
        return int(ok_sessions.size)
    bad = distinct(int_column(requests, "session_id")[~meets])
    return int((~np.isin(ok_sessions, bad)).sum())


def goodput(
    requests: pa.Table | ColumnSource,
    sessions: pa.Table | ColumnSource,
    slos: list[SLO],
    window: tuple[float, float] | None,
    carried: CarriedOver | None = None,
) -> dict[str, Any]:
    """summary.json's ``goodput``: requests and sessions meeting every SLO, and their rates;
    those ``carried`` into the window (``veeksha.evaluate.carried``) count as the throughput
    counts them, ``request_fraction`` is of the measured requests alone."""
    meets = request_meets(requests, slos)
    good_requests = int(meets.sum())
    good_sessions = _good_sessions(requests, meets, sessions)
    counted_requests, counted_sessions = good_requests, good_sessions
    if carried is not None:
        counted_requests += int(request_meets(carried.requests, slos).sum())
        if carried.sessions.num_rows:
            own = carried.session_requests
            counted_sessions += _good_sessions(own, request_meets(own, slos), carried.sessions)
    span = None if window is None else window[1] - window[0]
    return {
        "slo_count": len(slos),
        "requests": counted_requests,
        "sessions": counted_sessions,
        "requests_per_s": None if not span else counted_requests / span,
        "sessions_per_s": None if not span else counted_sessions / span,
        "request_fraction": good_requests / requests.num_rows if requests.num_rows else None,
    }
