"""The merge's time arithmetic: a shard's times onto the driver's timeline."""

from __future__ import annotations

import pyarrow as pa
import pytest

from veeksha.distributed.clock import OffsetEstimate
from veeksha.distributed.lost import lost_request_rows, lost_times
from veeksha.distributed.merge import ShardResult, shard_shift_ns
from veeksha.distributed.merged_rows import sorted_table
from veeksha.distributed.partition import ShardSpec
from veeksha.distributed.timeline import move_table, shard_offset_ns
from veeksha.record.columnar import requests_from_rows
from veeksha.record.columns import REQUESTS_SCHEMA

S = 1_000_000_000


def test_shift_is_the_shard_t0_on_the_driver_clock_minus_the_driver_t0() -> None:
    driver_t0 = 1_700_000_000 * S
    # the shard's clock is 2.5 s ahead; its t0 came 0.25 s after the driver's
    shard_t0_on_its_clock = driver_t0 + int(2.75 * S)
    assert shard_shift_ns(shard_t0_on_its_clock, int(2.5 * S), driver_t0) == S // 4
    # started at the driver's t0 + its offset (the driver's usual request): no shift
    assert shard_shift_ns(driver_t0 + 123, 123, driver_t0) == 0


def test_the_offset_used_is_the_mean_of_before_and_after() -> None:
    spec = ShardSpec(0, 1)
    before, after = OffsetEstimate(100, 1, 2, 3), OffsetEstimate(300, 1, 2, 3)
    assert shard_offset_ns(ShardResult(spec, None, before, after)) == 200
    assert shard_offset_ns(ShardResult(spec, None, None, after)) == 300
    assert shard_offset_ns(ShardResult(spec, None)) == 0


def test_every_time_since_t0_moves_and_nothing_else() -> None:
    table = requests_from_rows(
        [
            {
                "run_id": "r",
                "phase": "measured",
                "session_id": 4,
                "node_id": 0,
                "status": "ok",
                "ready_at": 1.0,
                "sent_at": 1.25,
                "first_chunk_at": 1.5,
                "completed_at": 2.0,
                "ttfc": 0.25,
                "e2e": 0.75,
                "chunk_times_ns": [int(1.5 * S), int(1.75 * S)],
            }
        ],
        0,
    )
    shifted = move_table(table, REQUESTS_SCHEMA, 0.5).to_pylist()[0]
    assert shifted["ready_at"] == 1.5
    assert shifted["sent_at"] == 1.75
    assert shifted["completed_at"] == 2.5
    assert shifted["chunk_times"] == [2.0, 2.25]
    assert (shifted["ttfc"], shifted["e2e"], shifted["tbc"]) == (0.25, 0.75, [0.25])
    assert shifted["dispatched_at"] is None


def test_rows_sort_by_keys_with_nulls_last() -> None:
    table = pa.table({"a": [3.0, None, 1.0, 1.0], "b": [0, 1, 5, 2]})
    assert sorted_table(table, ["a", "b"]).column("b").to_pylist() == [2, 5, 0, 1]


@pytest.mark.parametrize("shift", [0.0, -0.125])
def test_a_null_list_stays_null(shift: float) -> None:
    table = requests_from_rows(
        [{"run_id": "r", "phase": "measured", "session_id": 1, "node_id": 0, "status": "error"}],
        0,
    )
    assert move_table(table, REQUESTS_SCHEMA, shift).column("chunk_times").to_pylist() == [None]


def test_a_result_from_the_probe_snapshot() -> None:
    snapshot = {
        "state": "running",
        "t0_wall_ns": 5 * S,
        "next_session": 10,
        "in_flight": [{"session_id": 7, "node_id": 1}],
    }
    spec = ShardSpec(1, 3)
    result = ShardResult.from_snapshot(spec, None, snapshot, lost="node died")
    assert result.started_sessions is not None
    assert result.started_sessions.tolist() == [1, 4, 7]
    assert result.in_flight == [{"session_id": 7, "node_id": 1}]
    assert (result.t0_wall_ns, result.lost) == (5 * S, "node died")
    empty = ShardResult.from_snapshot(spec, None, None, lost="never reported")
    assert empty.started_sessions is None
    assert empty.in_flight == []


def test_a_lost_shards_rows_end_when_they_were_last_known_in_flight_not_when_it_was_seen_lost() -> (
    None
):
    # a hung shard: its last snapshot (at 2.0 s of its timeline) named one request; a trace
    # line pulled after it, another dispatched at 2.3 s; the driver saw it lost 30 s of missed
    # pulls later. That wait is no time of the requests' (nor of the measured window they
    # would end), and their SLO judgement reads completed_at - dispatched_at as the least time
    # they were in flight
    snapshot = {"at": 2.0, "next_session": 10, "in_flight": [_in_flight(7, 1.5)]}
    result = ShardResult.from_snapshot(ShardSpec(1, 3), None, snapshot, lost="hung")
    result.in_flight.append(_in_flight(4, 2.3))  # (a trace line without a row)
    rows = lost_request_rows(result, "run", set(), 0.1, 32.4)
    assert [(r["dispatched_at"], r["completed_at"]) for r in rows] == [
        pytest.approx((1.6, 2.1)),
        pytest.approx((2.4, 2.4)),
    ]
    assert all(r["processed_at"] == r["completed_at"] for r in rows)
    assert lost_request_rows(result, "run", set(), 0.1, 1.8)[0]["completed_at"] == 1.8
    # its engine's last report, not the actor's answers (a frozen engine's actor answers on)
    assert lost_times(result, 0, 32_400_000_000, 0.1) == (32.4, pytest.approx(2.1))
    # nothing known of a request but that it was in flight: the loss
    bare = ShardResult(
        ShardSpec(1, 3), None, lost="hung", in_flight=[{"session_id": 1, "node_id": 0}]
    )
    assert lost_request_rows(bare, "run", set(), 0.0, 32.4)[0]["completed_at"] == 32.4


def _in_flight(session_id: int, dispatched: float) -> dict[str, object]:
    return {
        "session_id": session_id,
        "node_id": 0,
        "ready_at": dispatched - 0.01,
        "dispatched_at": dispatched,
    }
