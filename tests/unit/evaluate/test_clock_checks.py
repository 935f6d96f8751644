"""The ``clock_sync`` health check judges a distributed run's clock offsets against its TTFC."""

from __future__ import annotations

from typing import Any

from tests.unit.evaluate.builders import request, requests_table, scenario, sessions_table
from veeksha.evaluate.checks import HEALTH_CHECKS
from veeksha.evaluate.clock_checks import CLOCK_SYNC, shard_clock_error_ns
from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthInput
from veeksha.evaluate.stats import measured_rows

MS = 1_000_000


def estimate(offset_ms: float, uncertainty_ms: float) -> dict[str, int]:
    return {
        "offset_ns": int(offset_ms * MS),
        "uncertainty_ns": int(uncertainty_ms * MS),
        "rtt_ns": int(2 * uncertainty_ms * MS),
        "samples": 8,
    }


def _input(per_shard: list[dict[str, Any]] | None, ok: bool = True) -> HealthInput:
    # TTFC 0.2 s each (the builder's first chunk at 0.2 s after a send at 0)
    rows = [request(i, status="ok" if ok else "error") for i in range(5)]
    table = requests_table(rows)
    info = {} if per_shard is None else {"distributed": {"shards": 2, "per_shard": per_shard}}
    return HealthInput(table, measured_rows(table), sessions_table([]), scenario(), info)


def test_offsets_known_to_a_small_share_of_the_ttfc_pass() -> None:
    shards = [
        {"index": 0, "offset_before": estimate(0, 0.1), "offset_after": estimate(0.2, 0.1)},
        {"index": 1, "offset_before": estimate(900, 5), "offset_after": estimate(903, 4)},
    ]
    result = CLOCK_SYNC(_input(shards))
    assert result.status == PASS, result.detail
    assert result.statistics["worst_shard"] == 1
    assert result.statistics["worst_error_ms"] == 5.0
    assert result.statistics["allowed_ms"] == 20.0  # 10 % of 200 ms


def test_drift_beyond_the_share_fails() -> None:
    shards = [{"index": 3, "offset_before": estimate(10, 1), "offset_after": estimate(40, 1)}]
    result = CLOCK_SYNC(_input(shards))
    assert result.status == FAIL
    assert "shard 3" in result.detail
    assert result.statistics["worst_error_ms"] == 30.0


def test_the_floor_applies_without_latencies() -> None:
    small = [{"index": 0, "offset_before": estimate(0, 0.5), "offset_after": None}]
    assert CLOCK_SYNC(_input(small, ok=False)).status == PASS
    large = [{"index": 0, "offset_before": estimate(0, 1.5), "offset_after": None}]
    assert CLOCK_SYNC(_input(large, ok=False)).status == FAIL


def test_single_host_and_unmeasured_offsets_skip() -> None:
    assert CLOCK_SYNC(_input(None)).status == SKIP
    unmeasured = [{"index": 0, "offset_before": None, "offset_after": None}]
    assert CLOCK_SYNC(_input(unmeasured)).status == SKIP
    assert shard_clock_error_ns({"index": 0}) is None
    assert CLOCK_SYNC in HEALTH_CHECKS
