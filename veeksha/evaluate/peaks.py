"""The throughput section's peaks: the busiest second of output tokens, and the most requests
in flight at once.

``peak_output_tokens_per_s``: the most output tokens of any one-second interval inside the
window (first ``sent_at`` of the measured requests to their last ``completed_at``), wherever it
starts (to 10 ms: the window is cut into 10-ms bins and every run of 100 consecutive bins is
summed; a window longer than ``MAX_BINS`` such bins, 5.5 hours, into that many longer ones).
Each ok request's output tokens are spread over its chunks (``output_tokens / chunks`` a chunk,
at the chunk's instant: ``first_chunk_at`` and the ``tbc`` gaps after it; a non-streamed
answer's all at its one chunk), the requests carried into the window included
(``veeksha.evaluate.carried``: their chunks before the window are not counted). A window
shorter than a second has no such interval: None. ``vllm bench serve``'s "Peak output token
throughput" counts one token a chunk in fixed seconds from its first request's start, so it
reads at most this (a burst that straddles two of its seconds is split between them).

``peak_concurrent_requests``: the most requests in flight at one instant, a request being in
flight from its ``sent_at`` to its ``completed_at`` (half open: one that ends as another starts
is not counted twice), over every measured request that was sent, whatever its status, and the
carried ones. ``vllm bench serve``'s "Peak concurrent requests" counts its successful requests,
each in every whole second it touched, so it reads higher than this for short requests.

Worked example: a window from 10.0 to 11.3 s; request A (ok, 4 tokens) with chunks at 10.2,
10.4, 11.1, 11.3 s, sent at 10.0; B (ok, 2 tokens, not streamed) sent at 10.5 and answered at
10.9: the second from 10.2 to 11.2 holds A's first three chunks and B's answer, 3 + 2 = 5
tokens: peak 5 tokens/s; A and B overlap from 10.5 to 10.9: peak 2 requests.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column, floats, integers, status_is
from veeksha.record import kernels as ak

__all__ = ["BIN_S", "FINE_S", "MAX_BINS", "peaks"]

BIN_S = 1.0  # the interval of the output tokens' peak, seconds
FINE_S = 0.01  # the resolution it is found to
MAX_BINS = 2_000_000  # at most (16 MB): a longer window's bins are longer


def peaks(
    requests: pa.Table | ColumnSource,
    window: tuple[float, float] | None,
    carried: pa.Table | ColumnSource | None = None,
) -> dict[str, Any]:
    """``peak_output_tokens_per_s`` and ``peak_concurrent_requests`` (see the module doc);
    None without a window (and the first, with a window shorter than ``BIN_S``)."""
    if window is None:
        return {"peak_output_tokens_per_s": None, "peak_concurrent_requests": None}
    sources = [ColumnSource.of(requests)]
    if carried is not None and carried.num_rows:
        sources.append(ColumnSource.of(carried))
    start, end = window
    fine = max(FINE_S, (end - start) / MAX_BINS)
    bins = np.zeros(int(np.ceil((end - start) / fine)) or 1)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for source in sources:
        _add_tokens(source, start, fine, bins)
        sent, done = column(source, "sent_at"), column(source, "completed_at")
        went = ~np.isnan(sent) & ~np.isnan(done)
        starts.append(sent[went])
        ends.append(done[went])
    span = max(1, round(BIN_S / fine))
    peak = None
    if end - start >= BIN_S and bins.size >= span:
        sums = np.concatenate([[0.0], np.cumsum(bins)])
        peak = float((sums[span:] - sums[:-span]).max()) / (span * fine)
    return {
        "peak_output_tokens_per_s": peak,
        "peak_concurrent_requests": _most_at_once(np.concatenate(starts), np.concatenate(ends)),
    }


def _add_tokens(source: ColumnSource, start: float, fine: float, bins: np.ndarray) -> None:
    """Add the ok requests' output tokens of ``source`` to ``bins`` (from ``start``), a batch
    of rows at a time (a long run's chunk times are not held at once). A chunk's time is the
    first chunk's plus the row's gaps before it (``tbc``: the evaluation reads no
    ``chunk_times``)."""
    ok = status_is(source, "ok")
    first = column(source, "first_chunk_at")
    tokens = column(source, "output_tokens")
    row = 0
    for batch in source.batches("tbc"):
        n = len(batch)
        gaps = integers(ak.list_value_length(batch))  # (a null list, a failure's: 0)
        took = ok[row : row + n] & ~np.isnan(first[row : row + n])
        took &= ~np.isnan(tokens[row : row + n])
        share = np.zeros(n)
        share[took] = tokens[row : row + n][took] / (gaps[took] + 1)
        firsts = first[row : row + n]
        _bin(firsts[took], share[took], start, fine, bins)
        if gaps.any():
            flat = floats(ak.list_flatten(batch))
            sums = np.cumsum(flat)
            before = np.concatenate([[0.0], sums])[np.cumsum(gaps) - gaps]  # (each row's start)
            owner = np.repeat(np.arange(n), gaps)
            times = firsts[owner] + sums - before[owner]
            _bin(times, share[owner], start, fine, bins)  # (share 0 where not taken)
        row += n


def _bin(
    times: np.ndarray, weights: np.ndarray, start: float, fine: float, bins: np.ndarray
) -> None:
    at = np.floor((times - start) / fine)
    at[at == bins.size] = bins.size - 1  # (the window's last instant: its last bin)
    inside = (at >= 0) & (at < bins.size)
    bins += np.bincount(at[inside].astype(np.int64), weights[inside], minlength=bins.size)


def _most_at_once(starts: np.ndarray, ends: np.ndarray) -> int:
    """The most intervals [start, end) that hold one instant."""
    if not starts.size:
        return 0
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(starts.size), -np.ones(ends.size)])
    order = np.lexsort((steps, times))  # (at one instant, the ends before the starts)
    return int(np.cumsum(steps[order]).max())
