"""PNG plots of a run (plots/ in the run folder), drawn with matplotlib's Agg canvas.

matplotlib is imported only when a plot is drawn (``evaluate.png``), so importing veeksha stays
cheap; no pyplot global state is used (a ``Figure`` on a ``FigureCanvasAgg``), which is safe off
the main thread. Files:

- ``<metric>_cdf.png`` for ttfc, tbc, tpot, e2e: empirical CDF in ms (at most ``CDF_POINTS``
  points, taken at evenly spaced quantiles), the summary's p50 and p99 marked; one sample is
  drawn as its step and a note;
- ``timeline.png``: requests in flight (sent → completed) and the rate of sent requests over time
  (first send to last; sends all at one instant: a note);
- ``ramp.png`` (a ramped run): TTFC and E2E p50/p99 of each of summary.json's ramp windows
  against the window's offered rate;
- ``ttfc_vs_prompt.png``: TTFC against the whole prompt's tokens (at most ``SCATTER_POINTS``,
  an evenly strided subset).

A plot without data is skipped (no empty image).

Memory does not grow with the run beyond the two sorted time columns of the timeline: the columns
are read a batch at a time (``ColumnSource.batches``) and every line drawn has a bounded number of
points. The in-flight line is ``in_flight_envelope``: the exact count of requests in flight, its
lowest and highest value in each of ``TIMELINE_BINS`` time bins, drawn as a vertical stroke at the
bin's start. At 700 px wide a bin is a third of a pixel, so the image is the one the step line
through every send and completion would give, without matplotlib holding millions of vertices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.png import agg_figure, save_png
from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import Floats, column
from veeksha.plural import counted

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from numpy.typing import NDArray

    from veeksha.evaluate.metrics import Digest

__all__ = [
    "CDF_METRICS",
    "PLOTS_DIR",
    "RAMP_PLOT",
    "InFlight",
    "in_flight_envelope",
    "write_cdf_plots",
    "write_plots",
    "write_ramp_plot",
    "write_row_plots",
]

PLOTS_DIR = "plots"
RAMP_PLOT = "ramp.png"
CDF_METRICS = ("ttfc", "tbc", "tpot", "e2e")
CDF_POINTS = 2000
SCATTER_POINTS = 20_000
TIMELINE_BINS = 2000
#: Values computed at a time when walking a sorted column.
BLOCK = 65_536


#: Fixed margins in inches (left: two lines of y label and 7-digit ticks; top: a title), set
#: once per figure: the constrained layout engine measured every text twice per save and took
#: ~40 % of a plot's CPU (as it did for the sweep plots).
_LEFT_IN, _RIGHT_IN, _TOP_IN, _BOTTOM_IN, _GAP_IN = 1.0, 0.2, 0.45, 0.6, 0.3


def _figure(rows: int = 1) -> Figure:
    width, height = 7.0, 2.6 * rows + 1.4
    fig = agg_figure(figsize=(width, height), dpi=DPI)
    axes_height = (height - _TOP_IN - _BOTTOM_IN - _GAP_IN * (rows - 1)) / rows
    fig.subplots_adjust(
        left=_LEFT_IN / width,
        right=1 - _RIGHT_IN / width,
        top=1 - _TOP_IN / height,
        bottom=_BOTTOM_IN / height,
        hspace=_GAP_IN / axes_height,
    )
    return fig


#: The PNGs' resolution (pixels per inch): a 7-inch-wide figure is 700 pixels wide.
DPI = 100


def _note(ax: Any, text: str) -> None:
    """A note in the middle of the axes, for what a degenerate sample cannot show as a line."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=9)


#: The summary's percentiles marked on each CDF: (stats key, line style).
CDF_MARKS = (("p50", ":"), ("p99", "--"))


class _CdfFigure:
    """The CDF plots' one figure: made once, then each metric's CDF drawn into it and saved.

    A new figure per metric built its axes and their ticks anew (~30 % of a CDF's CPU) and
    laid out the same tick labels again on a new renderer; the four CDFs differ only in their
    data, marks and texts, which ``draw`` sets, and each file is the one a figure of its own
    gives (a test compares them pixel for pixel). A metric with one sample is drawn in a figure
    of its own (``_one_sample_cdf``)."""

    def __init__(self) -> None:
        self._parts: tuple[Figure, Any, Any, list[Any]] | None = None

    def _make(self) -> tuple[Figure, Any, Any, list[Any]]:
        fig = _figure()
        ax = fig.add_subplot()
        (line,) = ax.plot([], [], drawstyle="steps-post", label="CDF")
        marks = [
            ax.axvline(0.0, color="grey", linestyle=style, linewidth=1) for _, style in CDF_MARKS
        ]
        ax.set_ylabel("fraction of samples")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        return fig, ax, line, marks

    def draw(self, digest: Digest, name: str, path: Path) -> Path:
        assert digest.cdf is not None
        assert digest.median is not None
        xs = digest.cdf * 1000
        if xs.size == 1:
            return _one_sample_cdf(digest, name, path)
        if self._parts is None:
            self._parts = self._make()
        fig, ax, line, marks = self._parts
        line.set_data(xs, np.linspace(0, 1, xs.size))
        # the x axis fits the CDF's line alone, as a new figure's does: there the marks come
        # after the line, inside its bounds, and leave the view as the line set it
        for mark in marks:
            mark.set_visible(False)
        ax.relim(visible_only=True)
        ax.autoscale_view()
        for mark, (key, _) in zip(marks, CDF_MARKS, strict=True):
            value = digest.stats.get(key)
            mark.set_visible(value is not None)
            mark.set_label("_" if value is None else f"{key} {value * 1000:.4g} ms")
            mark.set_xdata([0.0, 0.0] if value is None else [value * 1000] * 2)
        ax.set_xlabel(f"{name.upper()} (ms)")
        ax.set_title(_cdf_title(digest, name))
        ax.legend(loc="lower right", fontsize="small")
        return save_png(fig, path)


def _cdf_title(digest: Digest, name: str) -> str:
    assert digest.median is not None
    samples = counted(digest.count, "sample")
    return f"{name.upper()} CDF ({samples}, p50 {digest.median * 1000:.3g} ms)"


def _one_sample_cdf(digest: Digest, name: str, path: Path) -> Path:
    """One sample: the CDF is one step from 0 to 1 at it, and a note gives its value."""
    assert digest.cdf is not None
    x = float(digest.cdf[0] * 1000)
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot([x, x], [0.0, 1.0], marker="o", label="the only sample")
    _note(ax, f"one sample: {x:.4g} ms")
    ax.set_xlabel(f"{name.upper()} (ms)")
    ax.set_ylabel("fraction of samples")
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(_cdf_title(digest, name))
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(alpha=0.3)
    return save_png(fig, path)


def _cdf(digest: Digest, name: str, path: Path) -> Path:
    """One metric's CDF in a figure of its own (``write_plots`` draws them all in one)."""
    return _CdfFigure().draw(digest, name, path)


def _float_batches(source: ColumnSource, name: str) -> Iterator[Floats]:
    for batch in source.batches(name):
        yield column(pa.Table.from_arrays([batch], names=[name]), name)


def _finite(source: ColumnSource, name: str) -> Floats:
    """The non-NaN values of column ``name``, read a batch at a time into one array."""
    out = np.empty(source.num_rows)
    size = 0
    for batch in _float_batches(source, name):
        values = batch[~np.isnan(batch)]
        out[size : size + values.size] = values
        size += values.size
    return out[:size]


def _aligned(source: ColumnSource, names: tuple[str, str]) -> Iterator[tuple[Floats, Floats]]:
    """The two columns ``names`` batch by batch, cut to the same rows (their chunks may differ)."""
    first, second = (_float_batches(source, name) for name in names)
    a: Floats = np.empty(0)
    b: Floats = np.empty(0)
    while True:
        while a.size == 0:
            a = next(first, None)  # type: ignore[arg-type]
            if a is None:
                return
        while b.size == 0:
            b = next(second, None)  # type: ignore[arg-type]
            if b is None:
                return
        n = min(a.size, b.size)
        yield a[:n], b[:n]
        a, b = a[n:], b[n:]


@dataclass
class InFlight:
    """Requests in flight over time, per time bin: ``edges`` (bins + 1 times), and for each bin
    the lowest (``low``) and highest (``high``) count in it and the count at its end (``end``).

    A request is in flight from its send to its completion, ``[sent, completed)``: at a time when
    several requests are sent or complete, only the count once all of them are counted is a
    count, so a request sent and completed at the same instant (a dry run's) is never in flight.
    """

    edges: Floats
    low: NDArray[np.int64]
    high: NDArray[np.int64]
    end: NDArray[np.int64]

    def line(self) -> tuple[Floats, NDArray[np.int64]]:
        """The points of the in-flight line: per bin, a vertical stroke at its start through the
        count it starts from, its low, its high and its end, then level to the next bin."""
        bins = self.low.size
        start = np.concatenate([self.low[:1], self.end[:-1]])
        ys = np.column_stack([start, self.low, self.high, self.end]).ravel()
        xs = np.repeat(self.edges[:-1], 4)
        return np.append(xs, self.edges[-1]), np.append(ys, self.end[bins - 1])


def in_flight_envelope(sent: Floats, done: Floats, bins: int = TIMELINE_BINS) -> InFlight:
    """The in-flight counts of requests sent at ``sent`` and completed at ``done`` (both sorted,
    no NaN; ``sent`` not empty), in ``bins`` equal time bins from the first event to the last
    (one bin when they are at the same time).

    At each event time t the count is ``#(sent ≤ t) - #(done ≤ t)``; the work is done
    ``BLOCK`` events at a time, so it needs no memory beyond the two columns.

    >>> flight = in_flight_envelope(np.array([0.0, 1.0, 1.0]), np.array([2.0, 3.0]), bins=3)
    >>> flight.low.tolist(), flight.high.tolist(), flight.end.tolist()
    ([1, 1, 1], [1, 3, 3], [1, 3, 1])
    """
    first = min(sent[0], done[0]) if done.size else sent[0]
    last = max(sent[-1], done[-1]) if done.size else sent[-1]
    span = float(last - first)
    bins = bins if span > 0 else 1
    low = np.full(bins, np.iinfo(np.int64).max)
    high = np.full(bins, np.iinfo(np.int64).min)
    moved = np.zeros(bins, dtype=np.int64)  # sends minus completions in each bin
    for times, sign in ((sent, 1), (done, -1)):
        for at in range(0, times.size, BLOCK):
            block = times[at : at + BLOCK]
            counts = np.searchsorted(sent, block, side="right") - np.searchsorted(
                done, block, side="right"
            )
            where = _bin_of(block, first, span, bins)
            moved += sign * np.bincount(where, minlength=bins)
            starts = np.flatnonzero(np.diff(where, prepend=-1))
            np.minimum.at(low, where[starts], np.minimum.reduceat(counts, starts))
            np.maximum.at(high, where[starts], np.maximum.reduceat(counts, starts))
    end = np.cumsum(moved)
    # The line enters each bin at the count the previous bin ended with.
    low[1:] = np.minimum(low[1:], end[:-1])
    high[1:] = np.maximum(high[1:], end[:-1])
    edges = np.linspace(first, last, bins + 1) if span > 0 else np.array([first, last])
    return InFlight(edges, low, high, end)


def _bin_of(times: Floats, first: float, span: float, bins: int) -> NDArray[np.intp]:
    if bins == 1:
        return np.zeros(times.size, dtype=np.intp)
    where = ((times - first) * (bins / span)).astype(np.intp)
    return np.minimum(where, bins - 1, out=where)


Boundaries = Sequence[tuple[str, float]]


def _mark(ax: Any, boundaries: Boundaries, label: bool = False) -> None:
    """A dashed line at each phase start (named on the top axes)."""
    for name, start in boundaries:
        ax.axvline(start, color="grey", linestyle="--", linewidth=0.8)
        if label:
            ax.annotate(
                name,
                (start, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(2, -2),
                textcoords="offset points",
                va="top",
                fontsize=7,
                color="grey",
            )


def _latency_over_time(requests: ColumnSource, path: Path, boundaries: Boundaries) -> Path | None:
    fig = _figure(rows=2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    drawn = False
    for ax, metric in ((top, "ttfc"), (bottom, "e2e")):
        sent, value = _strided(requests, ("sent_at", metric), SCATTER_POINTS)
        if sent.size:
            drawn = True
            ax.scatter(sent, value * 1000, s=4, alpha=0.5)
        ax.set_ylabel(f"{metric.upper()} (ms)")
        ax.grid(alpha=0.3)
        _mark(ax, boundaries, label=ax is top)
    bottom.set_xlabel("sent at, time since t0 (s)")
    return save_png(fig, path) if drawn else None


def _timeline(requests: ColumnSource, path: Path, boundaries: Boundaries = ()) -> Path | None:
    sent = _finite(requests, "sent_at")
    if sent.size == 0:
        return None
    sent.sort()
    done = _finite(requests, "completed_at")
    done.sort()
    flight = in_flight_envelope(sent, done)
    fig = _figure(rows=2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(*flight.line())
    top.set_title(f"requests in flight and sent ({counted(sent.size, 'request')})")
    top.set_ylabel("requests in flight")
    top.grid(alpha=0.3)
    _send_rate(bottom, sent)
    bottom.set_ylabel("requests sent per s")
    bottom.set_xlabel("time since t0 (s)")
    bottom.grid(alpha=0.3)
    _mark(top, boundaries, label=True)
    _mark(bottom, boundaries)
    return save_png(fig, path)


def _send_rate(ax: Any, sent: Floats) -> None:
    """Requests sent per second, in bins of about a second from the first send to the last
    (at most 100 bins): not to the last completion, whose drain would dilute the last bin into
    a fall of the rate that never was. Sends all at one instant have no rate: a note says so."""
    span = float(sent[-1] - sent[0])
    if span <= 0:
        _note(ax, f"{counted(sent.size, 'request')} sent at one instant ({sent[0]:.3f} s): no rate")
        return
    bins = int(min(100, max(1, np.ceil(span))))
    counts, edges = np.histogram(sent, bins=bins, range=(sent[0], sent[-1]))
    ax.stairs(counts / (span / bins), edges)


def _strided(source: ColumnSource, names: tuple[str, str], limit: int) -> tuple[Floats, Floats]:
    """The rows where both columns ``names`` have a value, every ``kept // limit``-th of them
    (``values[keep][::stride]`` on whole columns), found in two passes of batches."""
    kept = sum(
        int(np.count_nonzero(~np.isnan(a) & ~np.isnan(b))) for a, b in _aligned(source, names)
    )
    stride = max(1, kept // limit)
    firsts, seconds = [np.empty(0)], [np.empty(0)]
    rank = 0  # rows kept before this batch
    for a, b in _aligned(source, names):
        keep = np.flatnonzero(~np.isnan(a) & ~np.isnan(b))
        chosen = keep[(-rank) % stride :: stride]
        rank += keep.size
        firsts.append(a[chosen])
        seconds.append(b[chosen])
    return np.concatenate(firsts), np.concatenate(seconds)


def _ttfc_vs_prompt(requests: ColumnSource, path: Path) -> Path | None:
    ttfc, tokens = _strided(requests, ("ttfc", "prompt_tokens_total"), SCATTER_POINTS)
    if ttfc.size == 0:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    ax.scatter(tokens, ttfc * 1000, s=4, alpha=0.5)
    ax.set_xlabel("prompt tokens (history included)")
    ax.set_ylabel("TTFC (ms)")
    ax.set_title("TTFC vs prompt length")
    ax.grid(alpha=0.3)
    return save_png(fig, path)


def write_plots(
    run_dir: Path,
    requests: pa.Table | ColumnSource,
    digests: dict[str, Digest],
    boundaries: Boundaries = (),
) -> list[Path]:
    """Draw every plot with data into ``run_dir/plots``; returns the files written:
    ``write_cdf_plots`` then ``write_row_plots`` (the evaluation draws the two beside each
    other: ``veeksha.evaluate.run``).

    ``digests``: the metrics' digests, with their CDF for ``CDF_METRICS``; ``boundaries``:
    (phase name, start in seconds since t0) of a multi-phase run's phases, marked on the
    timeline and on ``latency_over_time.png`` (drawn only then)."""
    return write_cdf_plots(run_dir, digests) + write_row_plots(run_dir, requests, boundaries)


def write_cdf_plots(run_dir: Path, digests: dict[str, Digest]) -> list[Path]:
    """``<metric>_cdf.png`` of each of ``CDF_METRICS`` with data, in one figure
    (``_CdfFigure``)."""
    folder = run_dir / PLOTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    cdfs = _CdfFigure()
    return [
        cdfs.draw(digests[name], name, folder / f"{name}_cdf.png")
        for name in CDF_METRICS
        if digests[name].count
    ]


def write_row_plots(
    run_dir: Path, requests: pa.Table | ColumnSource, boundaries: Boundaries = ()
) -> list[Path]:
    """The plots of the rows: ``timeline.png``, ``ttfc_vs_prompt.png``,
    ``latency_over_time.png`` (with ``boundaries``) and ``pools.png``, those with data."""
    folder = run_dir / PLOTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    source = ColumnSource.of(requests)
    paths = [_timeline(source, folder / "timeline.png", boundaries)]
    paths.append(_ttfc_vs_prompt(source, folder / "ttfc_vs_prompt.png"))
    if boundaries:
        paths.append(_latency_over_time(source, folder / "latency_over_time.png", boundaries))
    from veeksha.evaluate.pool_plot import draw_pools

    paths.append(draw_pools(source, folder / "pools.png"))
    return [path for path in paths if path is not None]


def write_ramp_plot(run_dir: Path, ramp: dict[str, Any] | None) -> list[Path]:
    """``plots/ramp.png``: per window of summary.json's ``ramp`` table, TTFC and E2E p50 and p99
    (ms) against the rate the ramp offered in it, where latency knees; nothing without a ramp
    or without a window holding latency."""
    windows = [w for w in (ramp or {}).get("windows") or [] if w.get("offered_rate") is not None]
    if not any(w.get(f"{m}_p50") is not None for w in windows for m in ("ttfc", "e2e")):
        return []
    assert ramp is not None
    fig = _figure(rows=2)
    axes = fig.subplots(2, 1, sharex=True)
    for ax, metric in zip(axes, ("ttfc", "e2e"), strict=True):
        for stat, style in (("p50", "-o"), ("p99", "--s")):
            points = [
                (w["offered_rate"], w[f"{metric}_{stat}"] * 1000)
                for w in windows
                if w.get(f"{metric}_{stat}") is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, markersize=4, label=f"{metric.upper()} {stat}")
        ax.set_ylabel(f"{metric.upper()} (ms)")
        ax.legend(loc="upper left", fontsize="small")
        ax.grid(alpha=0.3)
    axes[0].set_title(
        f"latency per ramp window ({ramp.get('shape')} {ramp.get('start_rate'):g} → "
        f"{ramp.get('end_rate'):g} sessions/s over {ramp.get('duration'):g} s)"
    )
    axes[1].set_xlabel("offered rate in the window (sessions/s)")
    folder = run_dir / PLOTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    return [save_png(fig, folder / RAMP_PLOT)]
