"""``plots/pools.png``: each client's three pools over time, from the rows (docs/agents.md).

A request is *pending* from its session's start (its first ready time) to its own ready time,
*waiting* for a slot from its ready time for ``queue_wait``, and *in flight* from dispatch to
the processing of its result. Each pool's level at a time is the count of intervals holding
it (two binary searches in the sorted starts and ends), sampled at ``POINTS`` instants. Drawn
when the run has several clients or a request waited for a slot; tool rows are left out. The
legend is a row above the first panel, clear of the lines (as ``server_timeline.png``'s).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import Floats, column, integers, scalar
from veeksha.record import kernels as ak

__all__ = ["POINTS", "draw_pools", "pool_levels"]

POINTS = 1000


def pool_levels(starts: Floats, ends: Floats, times: Floats) -> Floats:
    """How many intervals [start, end) hold each of ``times`` (NaN intervals left out)."""
    keep = ~np.isnan(starts) & ~np.isnan(ends)
    a, b = np.sort(starts[keep]), np.sort(ends[keep])
    level: Floats = (
        np.searchsorted(a, times, side="right") - np.searchsorted(b, times, side="right")
    ).astype(np.float64)
    return level


def draw_pools(source: ColumnSource, path: Path) -> Path | None:
    """Draw the plot into ``path``; None (nothing written) when it does not apply."""
    names = set(source.schema.names)
    if not {"client", "queue_wait", "kind"} <= names or source.num_rows == 0:
        return None
    clients = [c for c in ak.unique(source.column("client")).to_pylist() if c is not None]
    queue = column(source, "queue_wait")
    if len(clients) < 2 and not np.nanmax(np.append(queue, 0.0)) > 0:
        return None
    kind = source.column("kind")
    llm = integers(ak.or_kleene(ak.is_null(kind), ak.not_equal(kind, scalar("tool")))) > 0
    session = integers(source.column("session_id"))
    ready = column(source, "ready_at")
    dispatched, processed = column(source, "dispatched_at"), column(source, "processed_at")
    start = _session_starts(session, ready)
    span = np.concatenate([ready[~np.isnan(ready)], processed[~np.isnan(processed)]])
    if span.size == 0:
        return None
    times = np.linspace(float(span.min()), float(span.max()), POINTS)
    from veeksha.evaluate.plots import _figure
    from veeksha.evaluate.png import save_png

    fig = _figure(rows=len(clients))
    axes = np.atleast_1d(fig.subplots(len(clients), 1, sharex=True))
    client_col = source.column("client")
    for ax, name in zip(axes, clients, strict=True):
        rows = llm & (integers(ak.equal(client_col, scalar(name))) > 0)
        waited = ready[rows] + np.nan_to_num(queue[rows])
        ax.plot(times, pool_levels(start[rows], ready[rows], times), label="pending")
        ax.plot(times, pool_levels(ready[rows], waited, times), label="waiting for a slot")
        ax.plot(times, pool_levels(dispatched[rows], processed[rows], times), label="in flight")
        ax.set_ylabel(f"{name}\nrequests")
        ax.grid(alpha=0.3)
    from veeksha.evaluate.server_plot import legend_above

    legend_above(axes[0])  # in a row above the panel: inside, it covered the pools' peaks
    axes[-1].set_xlabel("time since t0 (s)")
    return save_png(fig, path)


def _session_starts(session: np.ndarray, ready: Floats) -> Floats:
    """Each row's session start: the earliest ready time among its session's rows."""
    order = np.argsort(session, kind="stable")
    ids = session[order]
    first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    values = np.where(np.isnan(ready[order]), np.inf, ready[order])
    mins = np.minimum.reduceat(values, first) if values.size else values
    per_row = np.repeat(mins, np.diff(np.r_[first, values.size]))
    out = np.empty_like(ready)
    out[order] = per_row
    return out
