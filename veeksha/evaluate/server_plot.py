"""``plots/server_timeline.png``: the server's view and veeksha's on one time axis.

Three panels sharing the x axis (seconds since t0): the server's running and waiting requests
(from its /metrics) over veeksha's requests in flight (sent → completed, ``in_flight_envelope``,
of the requests that may have reached the server: ``stats.reached_server``, of the clients it
serves when several clients go to several servers: ``server_view.scraped_clients``);
the server's KV-cache usage (and GPU utilisation, when sampled); the TTFC of each request at the
time it was sent (at most ``SCATTER_POINTS``, evenly strided). A queue that builds in the server
while TTFC climbs reads at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.plots import (
    PLOTS_DIR,
    SCATTER_POINTS,
    _figure,
    _strided,
    in_flight_envelope,
)
from veeksha.evaluate.png import save_png
from veeksha.evaluate.server_view import ServerView
from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column, reached_server

__all__ = ["SERVER_PLOT", "legend_above", "write_server_plot"]

SERVER_PLOT = "server_timeline.png"


def _reaching_server(
    source: ColumnSource, clients: Sequence[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The send times and the completion times (each sorted, no NaN) of the requests that may
    have reached the server, by the server checks' rule (``stats.reached_server``): a request
    refused a connection, or a tool call, was never in the server's queue, so it is no part
    of the in-flight line drawn over it; nor was a request of a client it does not serve
    (``clients``: those it serves; None, every client)."""
    reached = reached_server(source, clients)
    sent = column(source, "sent_at")[reached]
    done = column(source, "completed_at")[reached]
    sent.sort()
    done = done[~np.isnan(done)]
    done.sort()
    return sent, done


#: The legend's font sizes, tried in turn when even one column is wider than the panel.
LEGEND_FONTS = ("small", "x-small", "xx-small")
_LEGEND_PAD_PX = 3.0  # clear space kept between a legend and what is above it


def legend_above(ax: Any) -> None:
    """The panel's legend just above it, never over the lines it names, and whole: in one row
    when that fits the panel's width, else wrapped into as many columns as fit (as many rows as
    that takes; a smaller font when even one column is too wide), the figure made taller where
    the rows need room between this panel and what is above it (:func:`_make_room_above`)."""
    count = len(ax.get_legend_handles_labels()[1])
    if not count:
        return
    fig = ax.get_figure()
    renderer = fig.canvas.get_renderer()
    width = ax.bbox.width
    for fontsize in LEGEND_FONTS:
        for ncols in range(count, 0, -1):
            legend = ax.legend(
                loc="lower left",
                bbox_to_anchor=(0.0, 1.0),
                ncols=ncols,
                fontsize=fontsize,
                frameon=False,
                borderaxespad=0.1,
            )
            if legend.get_window_extent(renderer).width <= width:
                _make_room_above(ax, legend.get_window_extent(renderer).y1)
                return
    _make_room_above(ax, legend.get_window_extent(renderer).y1)  # (one column, smallest font)


def _make_room_above(ax: Any, top: float) -> None:
    """Make the figure taller so that something reaching up to ``top`` (display pixels) above
    ``ax`` clears the panels above it (their tick labels too) or the figure's top edge: the
    panels above move up by the shortfall, and every panel keeps its size."""
    fig = ax.get_figure()
    renderer = fig.canvas.get_renderer()
    boundary = ax.bbox.y1
    above = [other for other in fig.axes if other is not ax and other.bbox.y0 >= boundary - 0.5]
    ceiling = min(
        [fig.bbox.y1, *(other.get_tightbbox(renderer).y0 for other in above)],
    )
    shortfall = top + _LEGEND_PAD_PX - ceiling
    if shortfall <= 0:
        return
    old, grow = fig.get_figheight(), shortfall / fig.dpi
    placed = [(other, other.get_position()) for other in fig.axes]
    fig.set_figheight(old + grow)
    new = old + grow
    for other, box in placed:
        bottom = box.y0 * old + (grow if other in above else 0.0)
        other.set_position((box.x0, bottom / new, box.width, box.height * old / new))


#: The warmup's band: its rows are drawn (the server served them), so the span says it.
WARMUP_LABEL = "warmup"


def write_server_plot(
    run_dir: Path,
    requests: pa.Table | ColumnSource,
    view: ServerView,
    warmup: tuple[float, float] | None = None,
    clients: Sequence[str] | None = None,
) -> list[Path]:
    """Draw the aligned timeline (nothing when the server's metrics hold no queue series).
    With several servers scraped, the queue panel has their sums and each one's running line.

    Every request is drawn, the warmup's too (the server's queue held them); ``warmup``, the
    warmup phase's [start, end] (s since t0), is shaded grey on each panel and named in the
    queue panel's legend. ``clients``: the clients the scraped server serves (``summary.json``'s
    ``server.clients``), whose requests alone are drawn in flight over its queue; None: every
    client's."""
    if "running" not in view.series and "waiting" not in view.series:
        return []
    source = ColumnSource.of(requests)
    fig = _figure(rows=3)
    queue, usage, ttfc = fig.subplots(3, 1, sharex=True)
    if warmup is not None and warmup[1] > warmup[0]:
        for ax in (queue, usage, ttfc):
            label = WARMUP_LABEL if ax is queue else None
            ax.axvspan(*warmup, color="grey", alpha=0.15, linewidth=0, zorder=0, label=label)
    sent, done = _reaching_server(source, clients)
    if sent.size:
        queue.plot(*in_flight_envelope(sent, done).line(), label="veeksha: in flight", alpha=0.6)
    for name in ("running", "waiting"):
        if name in view.series:
            queue.step(*view.series[name], where="post", label=f"server: {name}")
    for number, own in view.per_server.items():  # (several servers: each one's, under the sum)
        if "running" in own.series:
            label = f"server {number}: running"
            queue.step(*own.series["running"], where="post", label=label, lw=0.8, ls="--")
    queue.set_ylabel("requests")
    legend_above(queue)
    queue.grid(alpha=0.3)
    if "kv_usage" in view.series:
        times, values = view.series["kv_usage"]
        usage.step(times, values * 100, where="post", label="server: KV cache")
    for key, (times, values) in sorted(view.gpu.items()):
        if key.startswith("utilization"):
            usage.step(times, values, where="post", label=f"{key.replace('_', ' ')}", alpha=0.6)
    usage.set_ylabel("usage (%)")
    if usage.get_lines():
        legend_above(usage)
    usage.grid(alpha=0.3)
    sent_at, first = _strided(source, ("sent_at", "ttfc"), SCATTER_POINTS)
    if sent_at.size:
        ttfc.scatter(sent_at, first * 1000, s=4, alpha=0.5)
    ttfc.set_ylabel("TTFC (ms)")
    ttfc.set_xlabel("time since t0 (s) of the request's send, or the server's scrape")
    ttfc.grid(alpha=0.3)
    if view.scrape_times.size:
        ttfc.set_xlim(min(float(np.min(view.scrape_times)), 0.0), None)
    folder = run_dir / PLOTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return [save_png(fig, folder / SERVER_PLOT)]
