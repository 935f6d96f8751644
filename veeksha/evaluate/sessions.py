"""Session metrics of the measured phase: outcomes, durations, requests and think time per session.

A session's row is written when it ends, so a killed run can have measured requests whose session
has no row: those sessions are counted as ``incomplete`` (``unrecorded`` says how many), never
dropped. A session whose row is another phase's (a warmup session whose later turn was released
in a measured phase, a session crossing a phase boundary) has a row: it counts in its own phase,
never as unrecorded in the phase of its later requests. ``sessions_per_s`` is the rate of
``ok`` sessions over the measured window of the requests (see ``veeksha.evaluate.metrics``): the
measured ones and those carried into the window (started before it, ended inside it:
``veeksha.evaluate.carried``), ``carried_over`` of them. ``duration`` is the ok sessions', as
latency is the ok requests': a session that failed or was cancelled ended early, when it failed
or the run stopped, and would read a failing server as a fast one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column, describe, int_column, rows_where, scalar
from veeksha.record import kernels as ak

__all__ = ["SESSION_STATUSES", "session_ids", "session_metrics"]

#: Session statuses of sessions.parquet, in report order.
SESSION_STATUSES = ("ok", "error", "abandoned", "cancelled", "incomplete")


def _unrecorded(sessions: pa.Table | ColumnSource, requests: pa.Table | ColumnSource) -> int:
    if requests.num_rows == 0:
        return 0
    seen = ak.unique(requests.column("session_id"))
    if sessions.num_rows == 0:
        return len(seen)
    recorded = ak.is_in(seen, value_set=ak.unique(sessions.column("session_id")))
    return int(len(seen) - ak.total(recorded).as_py())


def session_metrics(
    sessions: pa.Table | ColumnSource,
    requests: pa.Table | ColumnSource,
    window: tuple[float, float] | None,
    recorded: pa.Table | ColumnSource | None = None,
    carried: int = 0,
) -> dict[str, Any]:
    """summary.json's ``sessions``: counts by status, rates and per-session distributions.

    ``sessions`` and ``requests`` hold the measured rows; ``window`` is the measured window.
    ``recorded``: every session row of the run, whatever its phase (default ``sessions``): a
    session of the requests is unrecorded only when it has no row there. ``carried``: ok
    sessions of another phase that ended inside the window, counted in ``sessions_per_s``.
    """
    counts = dict.fromkeys(SESSION_STATUSES, 0)
    if sessions.num_rows:
        for entry in ak.value_counts(sessions.column("status")).to_pylist():
            counts[entry["values"]] = counts.get(entry["values"], 0) + int(entry["counts"])
    unrecorded = _unrecorded(sessions if recorded is None else recorded, requests)
    counts["incomplete"] += unrecorded
    total = sessions.num_rows + unrecorded
    span = None if window is None else window[1] - window[0]
    out: dict[str, Any] = {"total": total, **counts, "unrecorded": unrecorded}
    out["carried_over"] = carried
    out["sessions_per_s"] = None if not span else (counts["ok"] + carried) / span
    out["success_rate"] = counts["ok"] / total if total else None
    # (a failed or cancelled session ended when it failed or the run stopped: not its length)
    ok = rows_where(sessions, ak.equal(sessions.column("status"), scalar("ok")))
    out["duration"] = {"unit": "s", **describe(column(ok, "duration"))}
    out["requests_per_session"] = {"unit": "requests", **describe(column(sessions, "num_requests"))}
    out["think_time"] = {"unit": "s", **describe(column(sessions, "think_time_total"))}
    return out


def session_ids(sessions: pa.Table, status: str) -> np.ndarray:
    """Ids of the sessions with ``status``."""
    if sessions.num_rows == 0:
        return np.empty(0, dtype=np.int64)
    rows = rows_where(sessions, ak.equal(sessions.column("status"), scalar(status)))
    return int_column(rows, "session_id")
