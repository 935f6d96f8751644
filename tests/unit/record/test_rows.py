"""Per-request metrics and rows with known answers (SCENARIO_REFERENCE.md definitions)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.record.builders import T0, make_record, make_result, ns
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.rows import (
    MAX_ERROR_MESSAGE_CHARS,
    SessionRecord,
    request_row,
    requests_table,
    session_row,
    session_status,
    sessions_table,
)


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    """The row as it lands in Parquet (list columns computed)."""
    return requests_table([row], T0).to_pylist()[0]


def test_streaming_worked_example() -> None:
    row = table_row(request_row(make_record(make_result()), T0))
    assert row["ttfc"] == pytest.approx(0.2)
    assert row["e2e"] == pytest.approx(0.5)
    assert row["tbc"] == pytest.approx([0.1, 0.2])
    assert row["tbc_mean"] == pytest.approx(0.15)
    assert row["tpot"] == pytest.approx(0.15)
    assert row["normalized_e2e"] == pytest.approx(0.5 / 3)
    assert row["output_throughput"] == pytest.approx(6.0)
    assert row["generator_delay"] == pytest.approx(0.5)  # sent 1.0 - ready 0.5
    assert row["dispatch_lag"] == pytest.approx(0.3)  # dispatched 0.8 - ready 0.5
    assert row["chunk_times"] == pytest.approx([1.2, 1.3, 1.5])
    assert (row["ready_at"], row["sent_at"], row["completed_at"]) == pytest.approx((0.5, 1.0, 1.5))
    assert row["received_at"] == pytest.approx(0.95)
    assert row["processed_at"] == pytest.approx(2.0)
    assert row["first_chunk_at"] == pytest.approx(1.2)
    assert row["status"] == "ok"
    assert row["parents"] == [0]
    assert row["history_parent"] == 0
    assert row["worker_id"] == 2
    assert row["output_tokens"] == 3
    assert row["usage_reported"] is True
    assert row["http_status"] is None  # 0 in the Result means no status


def test_one_token_has_no_tpot() -> None:
    row = table_row(
        request_row(make_record(make_result(chunks=(1.4,), completed=1.5, tokens=1)), T0)
    )
    assert row["tpot"] is None
    assert row["tbc"] == []
    assert row["tbc_mean"] is None
    assert row["ttfc"] == pytest.approx(0.4)
    assert row["normalized_e2e"] == pytest.approx(0.5)
    assert row["output_throughput"] == pytest.approx(2.0)


def test_zero_tokens() -> None:
    row = table_row(request_row(make_record(make_result(chunks=(), completed=1.25, tokens=0)), T0))
    assert row["e2e"] == pytest.approx(0.25)
    assert row["ttfc"] is None
    assert row["tpot"] is None
    assert row["normalized_e2e"] is None
    assert row["output_throughput"] == 0.0
    assert row["tbc"] == []
    assert row["chunk_times"] == []


def test_error_without_chunks_keeps_timestamps_not_metrics() -> None:
    result = make_result(
        chunks=(),
        completed=1.1,
        tokens=None,
        status="error",
        http_status=503,
        error_kind="http_5xx",
        error_message="Service Unavailable",
    )
    row = table_row(request_row(make_record(result, output_tokens_counted=0), T0))
    assert (row["status"], row["http_status"], row["error_kind"]) == ("error", 503, "http_5xx")
    assert row["error_message"] == "Service Unavailable"
    assert row["completed_at"] == pytest.approx(1.1)
    for metric in ("ttfc", "e2e", "tpot", "tbc", "tbc_mean", "normalized_e2e", "output_throughput"):
        assert row[metric] is None, metric
    assert row["chunk_times"] == []
    assert row["usage_reported"] is False
    assert row["output_tokens"] == 0


def test_error_after_chunks_has_no_latency_metrics() -> None:
    result = make_result(status="error", error_kind="connection_reset", tokens=None)
    row = table_row(request_row(make_record(result), T0))
    assert row["chunk_times"] == pytest.approx([1.2, 1.3, 1.5])
    assert row["tbc"] is None
    assert row["ttfc"] is None


def test_non_streaming_first_chunk_is_completion() -> None:
    row = table_row(
        request_row(make_record(make_result(chunks=(1.5,), completed=1.5, tokens=3)), T0)
    )
    assert row["ttfc"] == pytest.approx(row["e2e"])
    assert row["e2e"] == pytest.approx(0.5)
    assert row["tpot"] is None  # no time between its tokens was seen: not 0
    assert row["tbc"] == []
    assert row["normalized_e2e"] == pytest.approx(0.5 / 3)


def test_cancelled_never_sent() -> None:
    record = make_record(None, dispatched_at_ns=None, cancel_reason="parent request 0 failed")
    row = table_row(request_row(record, T0))
    assert row["status"] == "cancelled"
    assert row["error_kind"] == "cancelled"
    assert row["error_message"] == "parent request 0 failed"
    assert row["ready_at"] == pytest.approx(0.5)
    for column in ("dispatched_at", "sent_at", "completed_at", "worker_id", "chunk_times", "tbc"):
        assert row[column] is None, column
    assert row["dispatch_lag"] is None
    assert row["output_tokens"] is None
    assert row["requested_output_tokens"] == 3
    assert row["target_prompt_tokens"] == 20


def test_token_counts_prefer_usage_then_own_counts() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return 9

    with_usage = make_result(tokens=3, prompt_tokens=70, cached_tokens=48)
    row = request_row(make_record(with_usage), T0, count)
    assert (row["output_tokens"], row["prompt_tokens_total"], row["cached_tokens"]) == (3, 70, 48)
    assert row["prompt_tokens_new"] == 20
    assert calls == []  # the tokenizer runs only when needed

    no_usage = make_result(tokens=None, output_text="a b c")
    row = request_row(make_record(no_usage), T0, count)
    assert (row["output_tokens"], row["prompt_tokens_total"]) == (9, 60)
    assert row["usage_reported"] is False
    assert calls == ["a b c"]

    row = request_row(make_record(no_usage, output_tokens_counted=4), T0, count)
    assert row["output_tokens"] == 4
    assert row["tpot"] == pytest.approx(0.3 / 3)


def test_server_timings_and_long_messages() -> None:
    timings = {"queue_time": 0.01, "prefill_ms": 20, "ttft_s": 0.04, "decode": True}
    result = make_result(server_timings=timings, error_message="x" * 5000)
    row = request_row(make_record(result), T0)
    assert row["server_queue_time"] == pytest.approx(0.01)
    assert row["server_prefill_time"] == pytest.approx(0.02)
    assert row["server_ttft"] == pytest.approx(0.04)
    assert row.get("server_decode_time") is None  # not a number
    assert len(row["error_message"]) == MAX_ERROR_MESSAGE_CHARS


def test_simulator_timings() -> None:
    timings = {
        "arrival_ns": 1_000,
        "first_token_ns": 40_000_000 + 1_000,
        "queue_wait_s": 0.01,
        "prefill_s": 0.03,
        "decode_s": 0.2,
        "chunk_ns": [1, 2],
    }
    row = request_row(make_record(make_result(server_timings=timings)), T0)
    assert row["server_ttft"] == pytest.approx(0.04)
    assert row["server_queue_time"] == pytest.approx(0.01)
    assert row["server_prefill_time"] == pytest.approx(0.03)
    assert row["server_decode_time"] == pytest.approx(0.2)


def test_row_keys_are_schema_columns() -> None:
    names = set(REQUESTS_SCHEMA.names) | {"chunk_times_ns"}
    for record in (make_record(make_result(server_timings={"ttft": 1})), make_record(None)):
        assert set(request_row(record, T0)) <= names


chunk_lists = st.lists(
    st.one_of(st.none(), st.lists(st.integers(0, 10**6), max_size=6).map(sorted)), max_size=8
)


@given(chunk_lists)
def test_bulk_tbc_matches_per_row_gaps(lists: list[list[int] | None]) -> None:
    rows = []
    for i, chunks in enumerate(lists):
        base = request_row(make_record(make_result(), request_id=i), T0)
        base["chunk_times_ns"] = None if chunks is None else [T0 + c for c in chunks]
        base["status"] = "ok" if i % 3 else "error"
        rows.append(base)
    table = requests_table(rows, T0).to_pylist()
    for row, chunks, out in zip(rows, lists, table, strict=True):
        if chunks is None:
            assert out["chunk_times"] is None
        else:
            assert out["chunk_times"] == pytest.approx([c / 1e9 for c in chunks])
        if row["status"] != "ok" or chunks is None:
            assert out["tbc"] is None
        else:
            expected = [(b - a) / 1e9 for a, b in itertools.pairwise(chunks)]
            assert out["tbc"] == pytest.approx(expected)


def test_session_rows_and_status() -> None:
    assert session_status(3, 3, 0, 0) == "ok"
    assert session_status(3, 1, 1, 1) == "error"
    assert session_status(3, 1, 0, 2) == "cancelled"
    assert session_status(3, 2, 0, 0) == "incomplete"
    record = SessionRecord("run-1", "measured", 3, ns(1.0), ns(4.5), 3, 3, 3, 0, 0, 1.25)
    row = session_row(record, T0)
    assert (row["started_at"], row["ended_at"], row["duration"]) == pytest.approx((1.0, 4.5, 3.5))
    assert row["status"] == "ok"
    open_session = SessionRecord("run-1", "warmup", 4, ns(1.0), None, 5, 2, 2, 0, 0, 0.0)
    row = session_row(open_session, T0)
    assert (row["ended_at"], row["duration"], row["status"]) == (None, None, "incomplete")
    table = sessions_table([row])
    assert table.schema.equals(SESSIONS_SCHEMA, check_metadata=True)


def test_a_failure_ends_when_seen_and_keeps_its_last_byte() -> None:
    # a stall: chunks until 1.5 s, then nothing; veeksha gave up at 6 s
    stalled = make_result(status="timeout", error_kind="timeout", completed=6.0, last_byte=1.5)
    row = table_row(request_row(make_record(stalled), T0))
    assert row["completed_at"] == pytest.approx(6.0)
    assert row["last_byte_at"] == pytest.approx(1.5)
    assert row["chunk_times"] == pytest.approx([1.2, 1.3, 1.5])
    assert row["e2e"] is None  # latencies are for ok rows
    refused = make_result(
        chunks=(), status="error", error_kind="connection_refused", last_byte=None
    )
    row = table_row(request_row(make_record(refused), T0))
    assert row["last_byte_at"] is None
    ok = table_row(request_row(make_record(make_result()), T0))
    assert ok["last_byte_at"] == ok["completed_at"]
