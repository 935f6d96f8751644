"""The arrival checks of ``traffic_scheduler: {type: trace}``: achieved arrivals against the
trace's own (scaled) timestamps, never against a fitted distribution.

The expected arrival of session ``i`` is read again from the trace (``TraceTimeline.offsets``,
the same cache the run replayed), independently of what the run recorded as planned:

* ``dispatch_rate``: the observed session rate (first requests sent) against the trace's rate over
  the same sessions, within ``dispatch_rate_tolerance`` (the timeline is fixed: no sampling noise);
* ``arrival_distribution`` (here: the timeline): every measured session's planned start
  (``sessions.started_at``) must equal the trace's offset (to 1 µs; in a distributed run, once
  its shard's recorded shift onto the driver's clock, ``run.distributed.per_shard[].shift_s``,
  is taken back: the merge moved it by exactly that), and the p99 of
  |first request sent − trace offset| must stay within ``max_dispatch_lag_p99_ms``.

With ``turn_timing: timestamps`` the later requests are timed by the trace too (their
``not_before``, the row's own time mapped onto the run): none may be sent before it (1 µs), and
the turns it held (ready at it, not at their parents' answer plus think time: non-roots whose
``ready_at`` is their ``not_before``) are judged as the session starts are, p99 of sent −
``not_before`` within ``max_dispatch_lag_p99_ms``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.errors import VeekshaError
from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthInput, Outcome
from veeksha.evaluate.stats import Floats, column, integers, percentile
from veeksha.plural import counted
from veeksha.record import kernels as ak

__all__ = ["trace_arrival_timeline", "trace_dispatch_rate"]

_MIN_SESSIONS = 6
_PLANNED_TOLERANCE_S = 1e-6


def _root_sent(requests: pa.Table) -> tuple[np.ndarray, Floats]:
    """Per session id, the earliest sent_at of its roots (ids sorted)."""
    roots = integers(ak.list_value_length(requests["parents"])) == 0
    ids, inverse = np.unique(integers(requests["session_id"])[roots], return_inverse=True)
    values = np.full(len(ids), np.nan)
    np.fmin.at(values, inverse, column(requests, "sent_at")[roots])
    return ids, values


def _expected(data: HealthInput, ids: np.ndarray) -> Floats | None:
    from veeksha.generate.traces import open_trace

    try:
        trace = open_trace(data.scenario)
    except VeekshaError:
        return None
    offsets = trace.timeline().offsets(int(ids.max()) + 1)
    expected: Floats = offsets[ids]
    return expected


def trace_dispatch_rate(data: HealthInput) -> Outcome:
    ids, sent = _root_sent(data.measured)
    keep = ~np.isnan(sent)
    ids, sent = ids[keep], sent[keep]
    if ids.size < _MIN_SESSIONS:
        return Outcome(SKIP, f"{counted(ids.size, 'measured session')}, need {_MIN_SESSIONS}", {})
    expected = _expected(data, ids)
    if expected is None:
        return Outcome(SKIP, "the trace can no longer be read", {})
    span_expected = float(expected.max() - expected.min())
    span_sent = float(sent.max() - sent.min())
    if span_expected <= 0 or span_sent <= 0:
        return Outcome(SKIP, "the trace releases these sessions at one instant", {})
    trace_rate = (ids.size - 1) / span_expected
    observed = (ids.size - 1) / span_sent
    error = abs(observed - trace_rate) / trace_rate
    tol = data.thresholds.dispatch_rate_tolerance
    statistics: dict[str, Any] = {
        "trace_rate": trace_rate,
        "sent_rate": observed,
        "relative_error": error,
        "tolerance": tol,
        "sessions": int(ids.size),
    }
    detail = f"observed {observed:.4g}/s vs the trace's {trace_rate:.4g}/s ({error:.1%} off"
    detail += f", allowed {tol:.1%})"
    return Outcome(FAIL if error > tol else PASS, detail, statistics)


def trace_arrival_timeline(data: HealthInput) -> Outcome:
    ids, sent = _root_sent(data.measured)
    keep = ~np.isnan(sent)
    ids, sent = ids[keep], sent[keep]
    if ids.size < 1:
        return Outcome(SKIP, "no measured session sent a request", {})
    expected = _expected(data, ids)
    if expected is None:
        return Outcome(SKIP, "the trace can no longer be read", {})
    sent_dev = np.abs(sent - expected)
    planned_dev = 0.0
    if data.sessions.num_rows:
        sids = integers(data.sessions["session_id"])
        started = column(data.sessions, "started_at")
        ok = ~np.isnan(started)
        started = started - _shard_shifts(data)
        if ok.any():
            planned = _expected(data, sids[ok])
            if planned is not None:
                planned_dev = float(np.abs(started[ok] - planned).max())
    limit = data.thresholds.max_dispatch_lag_p99_ms / 1000
    p99 = percentile(sent_dev, 99)
    statistics: dict[str, Any] = {
        "sessions": int(ids.size),
        "max_planned_deviation_s": planned_dev,
        "p99_sent_deviation_s": p99,
        "max_sent_deviation_s": float(sent_dev.max()),
        "limit_s": limit,
    }
    ok_all = planned_dev <= _PLANNED_TOLERANCE_S and p99 <= limit
    detail = (
        f"first requests sent {p99 * 1000:.3f} ms (p99) from the trace's times (limit"
        f" {limit * 1000:g} ms); planned starts off by at most {planned_dev * 1e6:.3f} µs"
    )
    turns = _timed_turns(data.measured)
    if turns is not None:
        statistics |= turns
        held_p99 = turns["p99_held_turn_deviation_s"]
        early = turns["turns_sent_before_their_time"]
        ok_all = ok_all and early == 0 and (held_p99 is None or held_p99 <= limit)
        timed = turns["turns_timed"]
        detail += f"; {early} of {counted(timed, 'timed turn')} sent before their own time"
        if held_p99 is not None:
            detail += (
                f", the {turns['turns_held_by_their_time']} held by it sent"
                f" {held_p99 * 1000:.3f} ms (p99) after it"
            )
    return Outcome(PASS if ok_all else FAIL, detail, statistics)


def _shard_shifts(data: HealthInput) -> Floats:
    """Per sessions row, the shift the merge moved its shard's times by onto the driver's clock
    (0 on a single host, or for a shard whose shift is not recorded)."""
    shifts = np.zeros(data.sessions.num_rows)
    distributed = data.run_info.get("distributed")
    if not isinstance(distributed, dict) or "shard" not in data.sessions.schema.names:
        return shifts
    by_index = {
        int(info["index"]): float(info.get("shift_s") or 0.0)
        for info in distributed.get("per_shard") or []
    }
    shard = column(data.sessions, "shard")
    for index, shift in by_index.items():
        shifts[shard == index] = shift
    return shifts


def _timed_turns(requests: Any) -> dict[str, Any] | None:
    """The requests with a ``not_before`` (``turn_timing: timestamps``) that were sent: how
    many, how many left before it (must be none), and of the later turns their time held (ready
    at it), how long after it they were sent (p99). None without such requests."""
    if "not_before" not in requests.schema.names:
        return None
    not_before = column(requests, "not_before")
    sent = column(requests, "sent_at")
    timed = ~np.isnan(not_before) & ~np.isnan(sent)
    if not timed.any():
        return None
    early = int((sent[timed] < not_before[timed] - _PLANNED_TOLERANCE_S).sum())
    later = integers(ak.list_value_length(requests["parents"])) > 0
    held = timed & later
    held &= np.abs(column(requests, "ready_at") - not_before) <= _PLANNED_TOLERANCE_S
    deviation = sent[held] - not_before[held]
    return {
        "turns_timed": int(timed.sum()),
        "turns_sent_before_their_time": early,
        "turns_held_by_their_time": int(held.sum()),
        "p99_held_turn_deviation_s": percentile(deviation, 99) if deviation.size else None,
    }
