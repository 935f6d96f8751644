"""Health check that the run measured something: ``answered``.

A run whose every request failed (a server that answers each one 404, 400 for a prompt too
long for its model, 500; nothing listening) has rows, an error rate of 100 % and no latency:
the measurement is of failures only. Failures are measured, not hidden (docs/reliability.md),
but a run without a single answer says nothing of the server's speed, and its report must not
read healthy. FAIL when at least one measured request was dispatched to a server (tool calls
reach none) and none of them was answered (``ok``, or ``abandoned``: the client gave up on an
answer that was coming); the detail names the most frequent failures. SKIP when none was
dispatched.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.stats import column, from_numpy, llm_requests, status_is
from veeksha.net import NOT_READY_STATUSES
from veeksha.plural import counted
from veeksha.record import kernels as ak

__all__ = ["ANSWERED"]

_SHOWN = 3


def _answered(data: HealthInput) -> Outcome:
    measured = data.measured
    tried = llm_requests(measured) & ~np.isnan(column(measured, "dispatched_at"))
    count = int(tried.sum())
    if count == 0:
        return Outcome(SKIP, "no measured request was dispatched to a server", {})
    answered = tried & (status_is(measured, "ok") | status_is(measured, "abandoned"))
    statistics: dict[str, Any] = {"requests": count, "answered": int(answered.sum())}
    if answered.any():
        detail = f"{statistics['answered']} of {counted(count, 'measured request')} answered"
        return Outcome(PASS, detail, statistics)
    mask = from_numpy(tried)
    failed = [
        ak.filter_rows(measured.column(name), mask).to_pylist()
        for name in ("status", "error_kind", "http_status")
    ]
    kinds = Counter(_failure(*failure) for failure in zip(*failed, strict=True))
    statistics["failures"] = dict(kinds.most_common())
    shown = ", ".join(f"{n} {what}" for what, n in kinds.most_common(_SHOWN))
    more = f" and {len(kinds) - _SHOWN} more kinds" if len(kinds) > _SHOWN else ""
    detail = (
        f"none of {counted(count, 'measured request')} was answered ({shown}{more}): nothing "
        "was measured but failures; is the target the server and model meant (error_message "
        "has what it said)?"
    )
    codes = Counter(code for code in failed[2] if code is not None)
    if codes and codes.most_common(1)[0][0] in NOT_READY_STATUSES:
        detail += (
            f" A {codes.most_common(1)[0][0]} is a server still starting (llama.cpp's while it"
            " loads its model) or one over its capacity: client.ready_timeout waits for one that"
            " is starting"
        )
    return Outcome(FAIL, detail, statistics)


def _failure(status: str | None, kind: str | None, code: int | None) -> str:
    """One failure's kind as the detail names it: ``http_4xx (HTTP 404)``, ``timeout``."""
    named = kind or status or "unknown"
    return f"{named} (HTTP {code})" if code else named


ANSWERED = HealthCheck(
    "answered",
    "at least one measured request was answered (a run of failures only measured nothing)",
    _answered,
)
