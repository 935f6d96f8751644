"""Work carried into the measured window: requests and sessions begun before it opened (the
warmup's, an earlier phase's) that completed inside it.

The window runs from the first measured ``sent_at`` to the last measured ``completed_at``. A
warmup is not drained, and neither is a phase: when the window opens, the requests sent before
it are still being served, and the first measured requests queue behind them. The server's time
in the window went to them too, so the window's rates count them (docs/metrics.md, "System
metrics"); counting the measured requests alone over the same window under-reads a saturated
server by the work of everything in flight when the window opened (about ``concurrency − 1``
requests for a closed loop), however long the run.

A carried-over request: an ok LLM request (no tool call) with ``sent_at`` before the window's
start and ``completed_at`` inside the window. Every measured request was sent at or after the
start, and every request of a later phase after it, so no request is counted twice. A
carried-over session: an ok session that is not one of the measured ones, started before the
window's start and ended inside it.

Worked example: a closed loop of 16 on a server of 4 slots at 0.24 s a request (16.7/s), 1 s of
warmup, 10 s of traffic. When the window opens, 15 warmup requests are still queued or running:
0.9 s of the server's time. 168 measured requests over the 10.9 s window read 15.4/s; with the
14 carried-over ones, 182 / 10.9 s = 16.7/s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import (
    column,
    distinct,
    from_numpy,
    int_column,
    llm_requests,
    rows_where,
    status_is,
)

__all__ = ["CarriedOver", "carried_over"]


@dataclass(frozen=True, slots=True)
class CarriedOver:
    """What the window's rates count besides the measured rows (see the module docstring).

    ``requests``: the carried-over requests' rows; ``sessions``: the carried-over sessions'
    rows; ``session_requests``: every LLM request row of those sessions (whatever its phase),
    which decide whether a session met every SLO.
    """

    requests: pa.Table | ColumnSource
    sessions: pa.Table | ColumnSource
    session_requests: pa.Table | ColumnSource


def _rows(table: pa.Table | ColumnSource, mask: np.ndarray) -> pa.Table | ColumnSource:
    return rows_where(table, from_numpy(mask) if isinstance(table, pa.Table) else mask)


def carried_over(
    requests: pa.Table | ColumnSource,
    sessions: pa.Table | ColumnSource,
    measured_sessions: pa.Table | ColumnSource,
    window: tuple[float, float] | None,
) -> CarriedOver:
    """The requests and sessions of the run (``requests``, ``sessions``: every phase) carried
    into ``window``, the measured window (none without one)."""
    none = np.zeros(requests.num_rows, dtype=bool)
    if window is None or requests.num_rows == 0:
        empty = _rows(requests, none)
        return CarriedOver(empty, _rows(sessions, np.zeros(sessions.num_rows, dtype=bool)), empty)
    start, end = window
    sent = column(requests, "sent_at")
    done = column(requests, "completed_at")
    inside = (sent < start) & (done >= start) & (done <= end)  # (NaN compares false)
    carried = _rows(requests, inside & status_is(requests, "ok") & llm_requests(requests))
    keep = np.zeros(sessions.num_rows, dtype=bool)
    if sessions.num_rows:
        ended = column(sessions, "ended_at")
        keep = (column(sessions, "started_at") < start) & (ended >= start) & (ended <= end)
        keep &= status_is(sessions, "ok")
        if measured_sessions.num_rows:
            measured = int_column(measured_sessions, "session_id")
            keep &= ~np.isin(int_column(sessions, "session_id"), measured)
    ids = distinct(int_column(sessions, "session_id")[keep]) if keep.any() else np.empty(0)
    own = np.isin(int_column(requests, "session_id"), ids) & llm_requests(requests)
    return CarriedOver(carried, _rows(sessions, keep), _rows(requests, own))
