"""summary.json's ``timeslices``: the measured window cut into slices of equal time, each with
its throughput and latency (``evaluators[].timeslice_seconds``), to see a run drift (a cache
that fills, a server that slows as it runs, a warmup that lasted longer than planned).

The slices cover the throughput window (``throughput.window_start`` to ``window_end``: the
first measured ``sent_at`` to the last ``completed_at``), from its start, each
``timeslice_seconds`` wide but the last, which ends at the window's end: it is ½ to 1½
slices wide (a remainder under half a slice joins the slice before it rather than make a
sliver whose rates would be the noise of a few requests).
A request belongs to the slice in which it **completed**, so each slice's requests/s and
tokens/s are what the server finished in it, and its latencies are those of the requests it
finished. Per slice: ``start``, ``end`` (s since t0), ``ok`` and ``failed`` (``error`` and
``timeout``) requests, ``requests_per_s`` and ``output_tokens_per_s`` (of the ok ones), and
the p50 and p99 of ``ttfc``, ``tpot`` and ``e2e`` (s; null without a value). At most
:data:`MAX_SLICES` slices: a shorter slice on a long run is widened to fit, and
``slice_seconds`` says the width used.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column, percentile, status_is

__all__ = ["MAX_SLICES", "TIMESLICE_METRICS", "timeslices"]

MAX_SLICES = 1000
TIMESLICE_METRICS = ("ttfc", "tpot", "e2e")


def _p50_p99(values: np.ndarray) -> tuple[float | None, float | None]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return None, None
    return percentile(values, 50), percentile(values, 99)


def timeslices(
    requests: pa.Table | ColumnSource, window: tuple[float, float] | None, seconds: float
) -> dict[str, Any] | None:
    """The ``timeslices`` section of the measured ``requests`` over ``window`` (None without
    a window: no measured request completed)."""
    if window is None:
        return None
    start, end = window
    width = max(seconds, (end - start) / MAX_SLICES)
    count = max(1, math.floor((end - start) / width + 0.5))  # (the last: ½ to 1½ widths)
    completed = column(requests, "completed_at")
    index = np.floor((completed - start) / width)
    index = np.where(np.isnan(index), -1, np.clip(index, -1, count - 1)).astype(np.int64)
    index[(completed < start) | (completed > end)] = -1
    ok = status_is(requests, "ok")
    failed = status_is(requests, "error") | status_is(requests, "timeout")
    tokens = np.nan_to_num(column(requests, "output_tokens"))
    latencies = {name: column(requests, name) for name in TIMESLICE_METRICS}
    slices = []
    for k in range(count):
        lo, hi = start + k * width, end if k == count - 1 else start + (k + 1) * width
        span = hi - lo
        here = index == k
        done = here & ok
        entry: dict[str, Any] = {
            "start": lo,
            "end": hi,
            "ok": int(done.sum()),
            "failed": int((here & failed).sum()),
            "requests_per_s": int(done.sum()) / span if span > 0 else None,
            "output_tokens_per_s": float(tokens[done].sum()) / span if span > 0 else None,
        }
        for name, values in latencies.items():
            entry[f"{name}_p50"], entry[f"{name}_p99"] = _p50_p99(values[done])
        slices.append(entry)
    return {"slice_seconds": width, "slices": slices}
