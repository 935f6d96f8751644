"""The health check of a distributed run's one clock: ``clock_sync``.

Each shard's times are moved onto the driver's timeline with its measured clock offset
(``veeksha.distributed.clock``, ``veeksha.distributed.merge``). What that offset may be wrong
by is its *error*: the larger of the estimates' uncertainty (half the best round trip, before
and after the run) and the drift (how far the offset moved between the two estimates). Times
compared across shards (arrival rate, dispatch order, the merged timeline) are then off by up
to that much, while latencies (measured within one shard) are not.

The check FAILs when the worst shard's error exceeds the larger of ``clock_sync_floor_ms``
and ``clock_sync_share`` × the measured TTFC p50 (docs/metrics.md): an error small next to the
latencies measured cannot change what the run says. SKIP on a single-host run, or when no
shard's offset was measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.stats import column, median, status_is

__all__ = ["CLOCK_SYNC", "shard_clock_error_ns"]


def shard_clock_error_ns(shard: dict[str, Any]) -> int | None:
    """max(uncertainty before, uncertainty after, |offset after − offset before|), ns; None
    when neither estimate is known."""
    estimates = [shard.get("offset_before"), shard.get("offset_after")]
    known = [e for e in estimates if isinstance(e, dict)]
    if not known:
        return None
    error = max(int(e["uncertainty_ns"]) for e in known)
    if len(known) == 2:
        error = max(error, abs(int(known[1]["offset_ns"]) - int(known[0]["offset_ns"])))
    return error


def _clock_sync(data: HealthInput) -> Outcome:
    distributed = data.run_info.get("distributed")
    if not isinstance(distributed, dict):
        return Outcome(SKIP, "not a distributed run", {})
    errors = {
        int(shard["index"]): error
        for shard in distributed.get("per_shard") or []
        if (error := shard_clock_error_ns(shard)) is not None
    }
    if not errors:
        return Outcome(SKIP, "no shard's clock offset was measured", {})
    thresholds = data.thresholds
    measured = data.measured
    ok = status_is(measured, "ok")
    ttfc = column(measured, "ttfc")[ok]
    ttfc = ttfc[~np.isnan(ttfc)]
    ttfc_p50_ms = median(ttfc) * 1e3 if ttfc.size else None
    allowed_ms = thresholds.clock_sync_floor_ms
    if ttfc_p50_ms is not None:
        allowed_ms = max(allowed_ms, thresholds.clock_sync_share * ttfc_p50_ms)
    worst = max(errors, key=errors.__getitem__)
    worst_ms = errors[worst] / 1e6
    stats = {
        "error_ms_by_shard": {str(k): v / 1e6 for k, v in sorted(errors.items())},
        "worst_shard": worst,
        "worst_error_ms": worst_ms,
        "ttfc_p50_ms": ttfc_p50_ms,
        "share": thresholds.clock_sync_share,
        "floor_ms": thresholds.clock_sync_floor_ms,
        "allowed_ms": allowed_ms,
    }
    detail = f"worst clock error {worst_ms:.3f} ms (shard {worst}) vs allowed {allowed_ms:.3f} ms"
    if worst_ms > allowed_ms:
        return Outcome(FAIL, detail + ": times across shards are not comparable", stats)
    return Outcome(PASS, detail, stats)


CLOCK_SYNC = HealthCheck(
    "clock_sync",
    "distributed runs: each shard's clock offset known (uncertainty and drift) to a small share "
    "of the latencies measured",
    _clock_sync,
)
