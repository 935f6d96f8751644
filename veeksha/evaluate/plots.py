"""PNG plots of a run (plots/ in the run folder), drawn with matplotlib's Agg canvas.

matplotlib is imported only here, inside ``write_plots``, so importing veeksha stays cheap; no
pyplot global state is used (a ``Figure`` on a ``FigureCanvasAgg``), which is safe off the main
thread. Files:

- ``<metric>_cdf.png`` for ttfc, tbc, tpot, e2e: empirical CDF in ms (at most ``CDF_POINTS``
  points, taken at evenly spaced quantiles);
- ``timeline.png``: requests in flight (sent → completed) and the rate of sent requests over time;
- ``ttfc_vs_prompt.png``: TTFC against the whole prompt's tokens (at most ``SCATTER_POINTS``,
  an evenly strided subset).

A plot without data is skipped (no empty image).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from veeksha.evaluate.stats import column

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from veeksha.evaluate.metrics import Digest
    from veeksha.evaluate.source import ColumnSource

__all__ = ["CDF_METRICS", "PLOTS_DIR", "write_plots"]

PLOTS_DIR = "plots"
CDF_METRICS = ("ttfc", "tbc", "tpot", "e2e")
CDF_POINTS = 2000
SCATTER_POINTS = 20_000


def _figure(rows: int = 1) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 2.6 * rows + 1.4), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=100, format="png")
    return path


def _cdf(digest: Digest, name: str, path: Path) -> Path:
    assert digest.cdf is not None
    assert digest.median is not None
    probs = np.linspace(0, 1, min(CDF_POINTS, digest.count))
    xs = digest.cdf * 1000
    fig = _figure()
    ax = fig.add_subplot()
    ax.plot(xs, probs, drawstyle="steps-post")
    ax.set_xlabel(f"{name.upper()} (ms)")
    ax.set_ylabel("fraction of samples")
    ax.set_title(f"{name.upper()} CDF ({digest.count} samples, p50 {digest.median * 1000:.3g} ms)")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def _timeline(requests: pa.Table | ColumnSource, path: Path) -> Path | None:
    sent, done = column(requests, "sent_at"), column(requests, "completed_at")
    sent = sent[~np.isnan(sent)]
    if sent.size == 0:
        return None
    done = done[~np.isnan(done)]
    times = np.concatenate([sent, done])
    steps = np.concatenate([np.ones(sent.size), -np.ones(done.size)])
    order = np.lexsort((steps, times))  # at equal times, completions first
    fig = _figure(rows=2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.step(times[order], np.cumsum(steps[order]), where="post")
    top.set_ylabel("requests in flight")
    top.grid(alpha=0.3)
    span = max(float(times.max() - sent.min()), 1e-9)
    bins = int(min(100, max(1, np.ceil(span))))
    counts, edges = np.histogram(sent, bins=bins, range=(sent.min(), sent.min() + span))
    bottom.stairs(counts / (span / bins), edges)
    bottom.set_ylabel("requests sent per s")
    bottom.set_xlabel("time since t0 (s)")
    bottom.grid(alpha=0.3)
    return _save(fig, path)


def _ttfc_vs_prompt(requests: pa.Table | ColumnSource, path: Path) -> Path | None:
    ttfc, tokens = column(requests, "ttfc"), column(requests, "prompt_tokens_total")
    keep = ~np.isnan(ttfc) & ~np.isnan(tokens)
    if not keep.any():
        return None
    ttfc, tokens = ttfc[keep], tokens[keep]
    stride = max(1, ttfc.size // SCATTER_POINTS)
    fig = _figure()
    ax = fig.add_subplot()
    ax.scatter(tokens[::stride], ttfc[::stride] * 1000, s=4, alpha=0.5)
    ax.set_xlabel("prompt tokens (history included)")
    ax.set_ylabel("TTFC (ms)")
    ax.set_title("TTFC vs prompt length")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def write_plots(
    run_dir: Path, requests: pa.Table | ColumnSource, digests: dict[str, Digest]
) -> list[Path]:
    """Draw every plot with data into ``run_dir/plots``; returns the files written.

    ``digests``: the metrics' digests, with their CDF for ``CDF_METRICS``."""
    folder = run_dir / PLOTS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    written = [
        _cdf(digests[name], name, folder / f"{name}_cdf.png")
        for name in CDF_METRICS
        if digests[name].count
    ]
    for draw, name in ((_timeline, "timeline.png"), (_ttfc_vs_prompt, "ttfc_vs_prompt.png")):
        path = draw(requests, folder / name)
        if path is not None:
            written.append(path)
    return written
