"""summary.json's ``ramp`` section: latency against the offered rate, for a ramped rate.

A ramp (``traffic_scheduler.ramp``, ``veeksha.schedule.ramp``) is run to find where latency
knees, so the run is cut into ``WINDOWS`` equal windows of the measured sessions' start times
(the roots' ``ready_at``, from the first to the last, the last window closed), and each shows:

- ``offered_rate``: the session rate the ramp offered in it, (Λ(end) − Λ(start)) / width;
- ``sessions_per_s``: the sessions that started in it, per second (the schedule as run);
- ``requests_per_s``: the ok requests that became ready in it, per second, wherever they
  completed (what the server did with the load offered in it);
- ``ttfc_p50``/``ttfc_p99``/``e2e_p50``/``e2e_p99`` (s): of the same requests (null when none).

Every figure of a window counts the requests released in it, not those completing in it: the
windows end at the last session start, and a run stopped by ``max_sessions`` or
``benchmark_timeout`` finishes its last requests after that, so counting completions would
leave them out and make the last window's achieved rate look low against its offered rate.
A request the run cut (its status ``timeout`` or ``cancelled``) is not ok and counts nowhere.

Worked example: a ramp from 5 to 40/s over 4 s, measured sessions starting from 0 to 4 s: ten
windows of 0.4 s offering 6.75, 10.25, ... 38.25 sessions/s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column, integers, percentile, status_is
from veeksha.record import kernels as ak
from veeksha.scenario.models import RateScheduler, Scenario
from veeksha.schedule.ramp import ramp_of

__all__ = ["WINDOWS", "ramp_section"]

WINDOWS = 10


def _quantiles(values: np.ndarray) -> tuple[float | None, float | None]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None, None
    return percentile(values, 50), percentile(values, 99)


def ramp_section(scenario: Scenario, requests: pa.Table | ColumnSource) -> dict[str, Any] | None:
    """The ``ramp`` section of the measured ``requests`` (None: no ramp, or fewer than two
    distinct session starts to span)."""
    scheduler = scenario.traffic_scheduler
    ramp = ramp_of(scheduler) if isinstance(scheduler, RateScheduler) else None
    if ramp is None or requests.num_rows == 0:
        return None
    ready = column(requests, "ready_at")
    roots = integers(ak.list_value_length(requests.column("parents"))) == 0
    starts = ready[roots & ~np.isnan(ready)]
    if starts.size < 2 or starts.max() <= starts.min():
        return None
    first, last = float(starts.min()), float(starts.max())
    edges = np.linspace(first, last, WINDOWS + 1)
    offered = np.diff(ramp.cumulative(edges)) / np.diff(edges)

    def window_of(times: np.ndarray) -> np.ndarray:
        """Each time's window (−1: outside; the last window includes its end)."""
        index = np.searchsorted(edges, times, side="right") - 1
        index[times == last] = WINDOWS - 1
        index[(times < first) | (times > last) | np.isnan(times)] = -1
        return index

    ok = status_is(requests, "ok")
    started = window_of(starts)
    ready_in = window_of(np.where(ok, ready, np.nan))
    ttfc, e2e = column(requests, "ttfc"), column(requests, "e2e")
    windows = []
    for k in range(WINDOWS):
        width = float(edges[k + 1] - edges[k])
        ttfc_p50, ttfc_p99 = _quantiles(ttfc[ready_in == k])
        e2e_p50, e2e_p99 = _quantiles(e2e[ready_in == k])
        windows.append(
            {
                "start": float(edges[k]),
                "end": float(edges[k + 1]),
                "offered_rate": float(offered[k]),
                "sessions_per_s": int(np.sum(started == k)) / width,
                "requests_per_s": int(np.sum(ready_in == k)) / width,
                "ttfc_p50": ttfc_p50,
                "ttfc_p99": ttfc_p99,
                "e2e_p50": e2e_p50,
                "e2e_p99": e2e_p99,
            }
        )
    return {
        "shape": ramp.shape,
        "start_rate": ramp.start_rate,
        "end_rate": ramp.end_rate,
        "duration": ramp.duration_s,
        "windows": windows,
    }
