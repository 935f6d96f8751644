"""Health checks of veeksha's own timing: lifecycle delays and generator saturation.

``lifecycle_delays``: distributions of ready → dispatched (the main loop), dispatched → sent (IPC
and the worker), completed → processed (the result's way back) and the set-up of the new
connections requests waited for (``connect_time``, of those that opened one); FAIL when any recorded
request's timestamps break their documented order (``veeksha.evaluate.timestamp_order``). WARN
(when in order) if any read's kernel stamp was clamped (``chunk_stamps_clamped``, every phase):
the rows stay ordered, but those times were substituted, and the detail says how many.

``generator_saturation``: FAIL when the load generator, not the server, limited the offered load,
so that an open-loop result never silently becomes a closed-loop one: when this machine refused
any request a connection (``client_limit``, every phase: no open file or local port left,
``veeksha.open_files``), or by its lag. Its lag is
``generator_delay = sent_at − ready_at`` of the measured requests, less their ``queue_wait`` (the
time a request waited for its client's ``max_in_flight`` slot is the configured cap's, not the
generator's) and their ``connect_time`` (the set-up of a new connection its worker opened for it
before writing it: a network round trip, a TLS handshake, a SYN retransmitted by a server whose
accept queue overflowed, which the network and the server take, not the generator; null, 0,
for a request sent on a kept-alive connection). A run recorded before the column existed has
none taken away. How many measured requests opened a connection, and the set-up's p50 and p99,
are reported (``connections_opened``, ``connect_p50_ms``, ``connect_p99_ms``). FAIL when

- its p99 exceeds ``max_dispatch_lag_p99_ms``, or
- it grows over the run (a backlog building up): the requests are split by ready time into
  ``WINDOWS`` equal windows, and the least-squares slope of the windows' median lag over their
  centre times, times the span, exceeds ``max_dispatch_lag_p99_ms``.

With the run's worker CPU seconds (``run_info["worker_cpu_s"]``) the workers' mean CPU
utilisation is reported (cpu seconds / (workers × measured window)); a utilisation near 1 names
the likely cause of a failure. With the seconds the workers waited for a CPU while runnable
(``run_info["worker_cpu_wait_s"]``, see ``veeksha.engine.cpu_wait``) their share of the same
time is reported as ``worker_cpu_wait_share`` and, in a failure's detail, named as a cause from
``CPU_WAIT_NOTE`` (1 %) up: other processes held the workers' CPUs; the main process' wait
(``run_info["main_cpu_wait_s"]``) likewise as ``main_cpu_wait_share``. A failure's detail also
says where the lag arose: its p99 before the hand-over (ready → dispatched, the main process)
and after it (dispatched → sent less the connection set-up, the worker). (The share sums every wait;
many waits of ~25 µs behind a server on the same machine make 3-5 % with a lag p99 of 0.12 ms,
so a passing run is not flagged for it.) A dry run (``num_workers`` 0) has no workers and no
server: a failure says so instead of naming either.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from veeksha.dispatch.messages import CLIENT_LIMIT
from veeksha.evaluate.health import FAIL, PASS, SKIP, WARN, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.stats import (
    Floats,
    column,
    describe,
    distinct,
    error_kind_is,
    int_column,
    median,
    percentile,
)
from veeksha.evaluate.timestamp_order import order_violations
from veeksha.plural import counted

__all__ = ["CPU_WAIT_NOTE", "GENERATOR_SATURATION", "LIFECYCLE_DELAYS", "WINDOWS", "lag_trend"]

WINDOWS = 10
CPU_WAIT_NOTE = 0.01
_MIN_PER_WINDOW = 5
_SLICE = 1 << 20


_SPAN_NAMES = {"connect": "connection set-up"}


def _ms(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v * 1000 if isinstance(v, float) else v for k, v in stats.items()} | {"unit": "ms"}


def _lifecycle(data: HealthInput) -> Outcome:
    spans = {
        "ready_to_dispatch": ("dispatched_at", "ready_at"),
        "dispatch_to_sent": ("sent_at", "dispatched_at"),
        "completed_to_processed": ("processed_at", "completed_at"),
    }
    statistics: dict[str, Any] = {
        name: _ms(describe(_span(data, *ends))) for name, ends in spans.items()
    }
    # the set-up of the new connections requests waited for (a reused one set up nothing)
    statistics["connect"] = _ms(describe(_connect_times(data.measured)))
    delays = dict(statistics)
    violations = order_violations(data.requests)  # every phase: order is a correctness property
    statistics["order_violations"] = violations
    clamped = _clamped(data)
    statistics["chunk_stamps_clamped"] = clamped
    note = (
        f"; {counted(clamped, 'chunk read time')} from the kernel clamped into [sent_at, read time]"
        " (the wall clock stepped): substituted, see chunk_stamps_clamped"
        if clamped
        else ""
    )
    broken = [f"{n} with {pair.replace('<=', ' after ')}" for pair, n in violations.items() if n]
    if broken:
        detail = "timestamps out of their documented order: " + "; ".join(broken)
        return Outcome(FAIL, detail + note, statistics)
    deferred = data.run_info.get("deferred_results")
    parts = [
        f"{_SPAN_NAMES.get(name, name.replace('_', ' '))} p99 {s['p99']:.3f} ms"
        # (why completed → processed may reach the bulk links' read interval, 20 ms)
        + (
            f" ({counted(deferred, 'Result')} nobody waited for, read on the main process' cadence)"
            if name == "completed_to_processed" and deferred
            else ""
        )
        + (f" ({counted(s['count'], 'request')} opened one)" if name == "connect" else "")
        for name, s in delays.items()
        if s["count"]
    ]
    if not parts:
        detail = "no measured request was dispatched"
        return Outcome(WARN if clamped else SKIP, detail + note, statistics)
    detail = "; ".join(parts) + "; timestamps in order" + note
    return Outcome(WARN if clamped else PASS, detail, statistics)


def _connect_times(t: Any) -> Floats:
    """The ``connect_time`` of the rows of ``t`` that opened a connection (none for a run
    recorded without the column)."""
    if "connect_time" not in t.schema.names:
        return np.zeros(0)
    values = column(t, "connect_time")
    return values[~np.isnan(values)]


def _less(t: Any, values: Floats, name: str) -> Floats:
    """``values`` (one per row of ``t``) less each row's ``name`` column (null: 0; a run
    recorded without the column: nothing taken away)."""
    if name not in t.schema.names:
        return values
    return values - np.nan_to_num(column(t, name))


def _clamped(data: HealthInput) -> int:
    """Reads whose kernel stamp was clamped, over every row (0 for a run recorded without
    the column)."""
    if "chunk_stamps_clamped" not in data.requests.schema.names:
        return 0
    return int(int_column(data.requests, "chunk_stamps_clamped").sum())


def _span(data: HealthInput, end: str, start: str) -> Floats:
    """``end − start`` of the measured requests, one span's columns in memory at a time."""
    values = column(data.measured, end)
    values -= column(data.measured, start)
    return values


def lag_trend(ready: Floats, lag: Floats) -> tuple[float | None, list[dict[str, Any]]]:
    """Slope (s of lag per s of run) of the windowed median lag, and the windows' statistics."""
    if ready.size < WINDOWS * _MIN_PER_WINDOW or ready.max() <= ready.min():
        return None, []
    edges = np.linspace(ready.min(), ready.max(), WINDOWS + 1)
    which = np.empty(ready.size, dtype=np.int8)  # not searchsorted's intp for every request
    for start in range(0, ready.size, _SLICE):
        part = np.searchsorted(edges, ready[start : start + _SLICE], side="right") - 1
        which[start : start + _SLICE] = np.clip(part, 0, WINDOWS - 1)
    centres, medians, windows = [], [], []
    for w in range(WINDOWS):
        inside = lag[which == w]
        if inside.size < _MIN_PER_WINDOW:
            continue
        centre = float((edges[w] + edges[w + 1]) / 2)
        centres.append(centre)
        medians.append(median(inside))
        windows.append(
            {"start": float(edges[w]), "end": float(edges[w + 1]), "requests": int(inside.size)}
            | {"p50_ms": medians[-1] * 1000, "p99_ms": percentile(inside, 99) * 1000}
        )
    if len(centres) < 3:
        return None, windows
    slope = float(np.polyfit(np.array(centres), np.array(medians), 1)[0])
    return slope, windows


def _client_limited(data: HealthInput) -> int:
    """Requests of every phase that this machine refused a connection (``client_limit``)."""
    if data.requests.num_rows == 0 or "error_kind" not in data.requests.schema.names:
        return 0
    return int(error_kind_is(data.requests, CLIENT_LIMIT).sum())


def _saturation(data: HealthInput) -> Outcome:
    refused = _client_limited(data)
    limited = (
        f"{counted(refused, 'request')} never sent: this machine refused a connection for"
        " them (error_kind client_limit: no open file or local port left, see error_message;"
        " raise the open-file limit, ulimit -Hn, or use more runtime.num_workers)"
    )
    t = data.measured
    ready, lag = column(t, "ready_at"), column(t, "generator_delay")
    lag = _less(t, lag, "queue_wait")  # waiting for a client's slot is the cap, not veeksha
    lag = _less(t, lag, "connect_time")  # a new connection's set-up: the network's, the server's
    keep = ~np.isnan(ready) & ~np.isnan(lag)
    if not keep.all():
        ready, lag = ready[keep], lag[keep]
    del keep
    if lag.size == 0:
        if refused:
            return Outcome(FAIL, limited, {"client_limit": refused})
        return Outcome(SKIP, "no measured request was sent", {})
    limit_ms = data.thresholds.max_dispatch_lag_p99_ms
    p99_ms = percentile(lag, 99) * 1000
    slope, windows = lag_trend(ready, lag)
    span = float(ready.max() - ready.min())
    del ready
    growth_ms = None if slope is None else slope * span * 1000
    statistics: dict[str, Any] = {"limit_ms": limit_ms, "p99_ms": p99_ms, "client_limit": refused}
    connect = _connect_times(t)
    statistics["connections_opened"] = int(connect.size)
    statistics["connect_p50_ms"] = percentile(connect, 50) * 1000 if connect.size else None
    statistics["connect_p99_ms"] = percentile(connect, 99) * 1000 if connect.size else None
    opened = (
        f"; {counted(connect.size, 'request')} opened a connection first (set-up p99"
        f" {statistics['connect_p99_ms']:.3f} ms: not the generator's lag)"
        if connect.size
        else ""
    )
    del connect
    statistics |= {"lag": _ms(describe(lag)), "slope_ms_per_s": None, "growth_ms": growth_ms}
    del lag
    if slope is not None:
        statistics["slope_ms_per_s"] = slope * 1000
    statistics["windows"] = windows
    cpu = data.run_info.get("worker_cpu_s")
    dry_run = data.run_info.get("num_workers") == 0  # answered in the main process
    workers = 0 if dry_run else data.run_info.get("num_workers") or _worker_count(data)
    window = data.run_info.get("measured_window")
    duration = (window[1] - window[0]) if window else span
    if cpu is not None and workers and duration > 0:
        statistics["worker_cpu_utilisation"] = float(cpu) / (workers * duration)
    waited = data.run_info.get("worker_cpu_wait_s")
    if waited is not None and workers and duration > 0:
        statistics["worker_cpu_wait_share"] = float(waited) / (workers * duration)
    main_waited = data.run_info.get("main_cpu_wait_s")
    if main_waited is not None and duration > 0:
        statistics["main_cpu_wait_share"] = float(main_waited) / duration
    reasons = [limited] if refused else []
    if p99_ms > limit_ms:
        reasons.append(f"lag p99 {p99_ms:.3f} ms > {limit_ms:g} ms")
    if growth_ms is not None and growth_ms > limit_ms:
        reasons.append(f"lag grew by {growth_ms:.3f} ms over the run")
    if not reasons:
        detail = f"lag p99 {p99_ms:.3f} ms ≤ {limit_ms:g} ms" + opened
        return Outcome(PASS, detail, statistics)
    if dry_run:
        detail = "; ".join(reasons) + ": a dry run, answered in the main process at its own pace"
        return Outcome(FAIL, detail, statistics)
    utilisation = statistics.get("worker_cpu_utilisation")
    detail = "; ".join(reasons) + ": the generator, not the server, limited the load"
    if utilisation is not None:
        detail += f" (workers at {utilisation:.0%} CPU)"
    detail += opened
    statistics |= _lag_parts(t)
    if "main_part_p99_ms" in statistics:
        detail += (
            f"; p99 before the hand-over to a worker (the main process)"
            f" {statistics['main_part_p99_ms']:.3f} ms, after it (the worker)"
            f" {statistics['worker_part_p99_ms']:.3f} ms"
        )
    waited_share = statistics.get("worker_cpu_wait_share")
    if waited_share is not None and waited_share >= CPU_WAIT_NOTE:
        detail += (
            f"; the workers waited for a CPU {waited_share:.1%} of the time: other processes"
            " held their CPUs"
        )
    main_share = statistics.get("main_cpu_wait_share")
    if main_share is not None and main_share >= CPU_WAIT_NOTE:
        detail += (
            f"; the main process waited for a CPU {main_share:.1%} of the time: other"
            " processes held its CPU"
        )
    return Outcome(FAIL, detail, statistics)


def _lag_parts(t: Any) -> dict[str, float]:
    """A failing lag's two parts, p99 in ms: ready → dispatched (the main process' hand-over,
    less the time waited for a client's slot) and dispatched → sent (the worker, less the set-up
    of a new connection it opened for the request)."""
    names = t.schema.names
    if not {"ready_at", "dispatched_at", "sent_at"} <= set(names):
        return {}
    ready, dispatched = column(t, "ready_at"), column(t, "dispatched_at")
    main = _less(t, dispatched - ready, "queue_wait")
    worker = _less(t, column(t, "sent_at") - dispatched, "connect_time")
    main, worker = main[~np.isnan(main)], worker[~np.isnan(worker)]
    if main.size == 0 or worker.size == 0:
        return {}
    return {
        "main_part_p99_ms": percentile(main, 99) * 1000,
        "worker_part_p99_ms": percentile(worker, 99) * 1000,
    }


def _worker_count(data: HealthInput) -> int:
    workers = column(data.measured, "worker_id")
    return int(distinct(workers[~np.isnan(workers)]).size)


LIFECYCLE_DELAYS = HealthCheck(
    "lifecycle_delays",
    "ready→dispatch, dispatch→sent, completed→processed and connection set-up (informative)",
    _lifecycle,
)
GENERATOR_SATURATION = HealthCheck(
    "generator_saturation",
    "the load generator kept up: p99 and trend of sent − ready (less slot waits and connection"
    " set-up), worker CPU",
    _saturation,
)
