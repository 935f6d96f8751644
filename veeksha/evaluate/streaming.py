"""Periodic progress metrics while a run goes (``evaluators[].stream_metrics``).

The engine feeds ``StreamingMetrics.add`` every request row as it is recorded (O(1): a counter and
two list appends) and, every ``stream_metrics_interval`` seconds, prints ``snapshot()``: the last
interval's completed-request rate and TTFC / E2E p50 and p99 of its ok requests, e.g.::

    last 5.0s: 48 req (9.6 req/s, 1 failed)  TTFC p50 52.1 ms p99 61.0 ms  E2E p50 0.41 s p99 0.55 s

A reasoning model's answers add the time to the answer after the thinking (``answer_ttfc``)
after TTFC: ``answer p50 0.53 s p99 0.61 s``.

Cancelled rows (nodes never sent when the run stopped, requests cut by the stop) are not
completed requests: they are counted apart (``..., 1 failed, 223 cancelled)``), never in the rate.

Each snapshot starts a new interval; rows of every phase count (a warmup shows progress too).

A snapshot runs on the event loop during the traffic, so its percentiles are
``veeksha.evaluate.stats.percentiles``: numpy's default (``linear``) percentiles, the same
values, from one ``partition`` of the interval's values (no full sort) and without
``np.percentile``, which imports ``numpy.ma`` on its first call (16-30 ms on the event loop, in
the middle of the traffic).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from veeksha.evaluate.stats import percentiles

__all__ = ["StreamingMetrics"]

_QS = (50, 99)


class StreamingMetrics:
    """Metrics of the requests recorded since the previous snapshot."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since = clock()
        self._ttfc: list[float] = []
        self._answer: list[float] = []  # (a reasoning model's answer_ttfc)
        self._e2e: list[float] = []
        self._count = 0
        self._failed = 0
        self._abandoned = 0
        self._cancelled = 0

    def add(self, row: Mapping[str, Any]) -> None:
        """Count one request row (a ``veeksha.record.rows.request_row`` dict)."""
        status = row.get("status")
        if status == "cancelled":  # (never sent, or cut by the stop: not a completed request)
            self._cancelled += 1
            return
        self._count += 1
        if status != "ok":
            if status == "abandoned":  # (its user gave up: not a failure)
                self._abandoned += 1
            else:
                self._failed += 1
            return
        ttfc, e2e, answer = row.get("ttfc"), row.get("e2e"), row.get("answer_ttfc")
        if ttfc is not None:
            self._ttfc.append(ttfc)
        if answer is not None:
            self._answer.append(answer)
        if e2e is not None:
            self._e2e.append(e2e)

    def snapshot(self) -> str:
        """One line about the interval since the last snapshot; starts a new interval."""
        now = self._clock()
        elapsed = max(now - self._since, 1e-9)
        line = f"last {elapsed:.1f}s: {self._count} req ({self._count / elapsed:.1f} req/s"
        line += f", {self._failed} failed"
        line += f", {self._abandoned} abandoned" if self._abandoned else ""
        line += f", {self._cancelled} cancelled)" if self._cancelled else ")"
        if self._ttfc:
            p50, p99 = percentiles(np.asarray(self._ttfc), _QS).tolist()
            line += f"  TTFC p50 {p50 * 1000:.1f} ms p99 {p99 * 1000:.1f} ms"
        if self._answer:
            p50, p99 = percentiles(np.asarray(self._answer), _QS).tolist()
            line += f"  answer p50 {p50:.3g} s p99 {p99:.3g} s"
        if self._e2e:
            p50, p99 = percentiles(np.asarray(self._e2e), _QS).tolist()
            line += f"  E2E p50 {p50:.3g} s p99 {p99:.3g} s"
        self._since, self._count, self._failed, self._cancelled = now, 0, 0, 0
        self._abandoned = 0
        self._ttfc, self._answer, self._e2e = [], [], []
        return line
