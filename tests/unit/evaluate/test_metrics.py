"""Metrics of the measured phase on hand-built tables with known answers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tests.unit.evaluate.builders import request, requests_table, session, sessions_table
from veeksha.evaluate.metrics import (
    ERROR_EXAMPLE_CHARS,
    LATENCY_METRICS,
    abandonment,
    error_rates,
    latency_stats,
    measured_window,
    prefill_buckets,
    request_counts,
    throughput,
)
from veeksha.evaluate.sessions import session_metrics
from veeksha.evaluate.stats import (
    column,
    describe,
    from_numpy,
    integers,
    measured_rows,
    percentile_key,
    scalar,
)
from veeksha.evaluate.summary import metric_digests

approx = pytest.approx


def _stats(rows: list[dict]) -> dict:
    return latency_stats(metric_digests(measured_rows(requests_table(rows)), []))


def test_worked_example_of_the_recorder() -> None:
    # sent 1.0, chunks 1.2 1.3 1.5, 3 tokens: ttfc .2, e2e .5, tbc [.1 .2], tpot .15
    stats = _stats([request(sent=1.0, ready=1.0, chunks=(1.2, 1.3, 1.5))])
    assert stats["ttfc"]["mean"] == approx(0.2)
    assert stats["e2e"]["max"] == approx(0.5)
    assert stats["tbc"]["count"] == 2
    assert stats["tbc"]["mean"] == approx(0.15)
    assert stats["tpot"]["p50"] == approx(0.15)
    assert stats["normalized_e2e"]["mean"] == approx(0.5 / 3)
    assert stats["output_throughput"]["mean"] == approx(6.0)
    assert stats["generator_delay"]["mean"] == approx(0.0)


def test_tbc_aggregates_over_all_gaps_not_per_request_means() -> None:
    rows = [
        request(0, sent=0.0, chunks=(0.1, 0.2, 0.3, 0.4, 0.5)),  # four gaps of 0.1
        request(1, sent=0.0, chunks=(0.1, 0.5)),  # one gap of 0.4
    ]
    tbc = _stats(rows)["tbc"]
    assert tbc["count"] == 5
    assert tbc["mean"] == approx((4 * 0.1 + 0.4) / 5)
    assert tbc["max"] == approx(0.4)


def test_percentiles_and_units_are_declared() -> None:
    rows = [request(i, sent=0.0, chunks=(0.01 * (i + 1), 1.0)) for i in range(100)]
    ttfc = _stats(rows)["ttfc"]
    assert ttfc["unit"] == "s"
    assert ttfc["count"] == 100
    assert ttfc["p50"] == approx(np.percentile(np.arange(1, 101) * 0.01, 50))
    assert ttfc["p99_9"] == approx(np.percentile(np.arange(1, 101) * 0.01, 99.9))
    assert {m.unit for m in LATENCY_METRICS} == {"s", "s/token", "tokens/s"}
    assert set(ttfc) >= {"count", "mean", "min", "max", "std", "p50", "p90", "p95", "p99"}


def test_one_token_has_no_tpot_and_no_gaps() -> None:
    stats = _stats([request(sent=0.0, chunks=(0.3,))])
    assert stats["ttfc"]["mean"] == approx(0.3)
    assert stats["tpot"]["count"] == 0
    assert stats["tpot"]["mean"] is None
    assert stats["tbc"]["count"] == 0
    assert stats["normalized_e2e"]["mean"] == approx(0.3)


def test_no_tokens_has_no_normalized_e2e() -> None:
    stats = _stats([request(sent=0.0, chunks=(), completed=0.4, output_tokens=0)])
    assert stats["e2e"]["mean"] == approx(0.4)
    assert stats["ttfc"]["count"] == 0
    assert stats["normalized_e2e"]["count"] == 0
    assert stats["output_throughput"]["mean"] == approx(0.0)


def test_non_streaming_ttfc_equals_e2e_and_tpot_is_zero() -> None:
    stats = _stats([request(sent=1.0, chunks=(1.5,), completed=1.5, output_tokens=10)])
    assert stats["ttfc"]["mean"] == approx(stats["e2e"]["mean"]) == approx(0.5)
    assert stats["tpot"]["mean"] == approx(0.0)
    assert stats["output_throughput"]["mean"] == approx(20.0)


def test_failed_requests_are_counted_not_dropped() -> None:
    rows = [
        request(0, sent=0.0),
        request(1, sent=0.0, status="error", error_kind="http_5xx", chunks=()),
        request(2, sent=0.0, status="timeout", error_kind="timeout", chunks=(0.1,)),
        request(3, unsent=True, status="cancelled", error_kind="cancelled"),
    ]
    table = requests_table(rows)
    counts = request_counts(table)
    assert counts == {
        "total": 4,
        "ok": 1,
        "error": 1,
        "timeout": 1,
        "cancelled": 1,
        "abandoned": 0,
        "cancelled_in_flight": 0,
    }
    errors = error_rates(table)
    assert errors["failed"] == 2
    assert errors["error_rate"] == approx(0.5)
    assert errors["cancellation_rate"] == approx(0.25)
    assert errors["by_kind"] == {
        "cancelled": {"count": 1, "rate": 0.25},
        "http_5xx": {"count": 1, "rate": 0.25},
        "timeout": {"count": 1, "rate": 0.25},
    }
    stats = latency_stats(metric_digests(table, []))
    assert stats["ttfc"]["count"] == 1  # latencies of ok requests only
    assert stats["generator_delay"]["count"] == 3  # the generator's lag of every sent request


def test_each_error_kind_keeps_its_first_message() -> None:
    """``errors.by_kind`` holds each kind's first ``error_message`` (cut to
    ``ERROR_EXAMPLE_CHARS``), read from the rows in order; a kind whose rows have none has no
    example, nor does a table without the column."""
    long = "HTTP 500: " + "x" * 400
    rows = [
        request(0, sent=0.0),
        request(1, sent=0.0, status="error", error_kind="http_4xx", chunks=()),
        request(2, sent=0.0, status="error", error_kind="http_4xx", chunks=()),
        request(3, sent=0.0, status="error", error_kind="http_5xx", chunks=()),
        request(4, sent=0.0, status="timeout", error_kind="timeout", chunks=()),
    ]
    messages = [None, "", "HTTP 401: no key", long, None]
    for row, message in zip(rows, messages, strict=True):
        row["error_message"] = message
    by_kind = error_rates(requests_table(rows))["by_kind"]
    assert by_kind["http_4xx"]["example"] == "HTTP 401: no key"  # (the first with a message)
    assert by_kind["http_5xx"]["example"] == long[: ERROR_EXAMPLE_CHARS - 1] + "…"
    assert "example" not in by_kind["timeout"]
    without = requests_table(rows).drop_columns(["error_message"])
    assert all("example" not in entry for entry in error_rates(without)["by_kind"].values())


def test_warmup_rows_are_excluded() -> None:
    rows = [request(0, sent=0.0), request(1, sent=0.0, chunks=(9.0,), phase="warmup")]
    measured = measured_rows(requests_table(rows))
    assert measured.num_rows == 1
    assert latency_stats(metric_digests(measured, []))["ttfc"]["max"] == approx(0.2)


def test_throughput_over_the_measured_window() -> None:
    rows = [
        request(0, sent=1.0, chunks=(1.2, 1.5), output_tokens=10, prompt_total=100),
        request(1, sent=2.0, chunks=(2.5, 3.0), output_tokens=30, prompt_total=300),
        request(2, sent=2.5, chunks=(), completed=2.6, status="error", prompt_total=50),
    ]
    table = requests_table(rows)
    window = measured_window(table)
    assert window == approx((1.0, 3.0))
    tput = throughput(table, window)
    assert tput["window_s"] == approx(2.0)
    assert tput["requests_per_s"] == approx(1.0)
    assert tput["output_tokens_per_s"] == approx(20.0)
    assert tput["input_tokens_per_s"] == approx(200.0)
    assert tput["total_tokens_per_s"] == approx(220.0)


def test_zero_measured_rows() -> None:
    empty = requests_table([])
    stats = latency_stats(metric_digests(empty, []))
    assert all(s["count"] == 0 and s["p99"] is None for s in stats.values())
    assert measured_window(empty) is None
    assert throughput(empty, None)["requests_per_s"] is None
    assert error_rates(empty)["error_rate"] is None
    assert prefill_buckets(empty) == []
    sessions = session_metrics(sessions_table([]), empty, None)
    assert sessions["total"] == 0
    assert sessions["duration"]["mean"] is None


def test_prefill_buckets_by_prompt_length() -> None:
    rows = [
        request(0, sent=0.0, chunks=(0.1, 0.2), prompt_total=100),
        request(1, sent=0.0, chunks=(0.3, 0.4), prompt_total=127),
        request(2, sent=0.0, chunks=(0.5, 0.6), prompt_total=128),
        request(3, sent=0.0, chunks=(), status="error", prompt_total=5000),
    ]
    buckets = prefill_buckets(requests_table(rows))
    assert [b["bucket"] for b in buckets] == ["[64, 128)", "[128, 256)"]
    assert buckets[0]["count"] == 2
    assert buckets[0]["mean"] == approx(0.2)
    assert buckets[1]["max"] == approx(0.5)


def test_session_metrics_count_unrecorded_sessions_as_incomplete() -> None:
    requests = requests_table([request(s, sent=0.0) for s in range(5)])
    sessions = sessions_table(
        [
            session(0, 0.0, 2.0, think_time_total=0.5, num_requests=3),
            session(1, 0.0, 4.0, "error", num_requests=1),
            session(2, 1.0, 2.0, "cancelled", num_requests=2),
        ]
    )
    out = session_metrics(sessions, requests, (0.0, 2.0))
    assert out["total"] == 5
    assert (out["ok"], out["error"], out["cancelled"], out["incomplete"]) == (1, 1, 1, 2)
    assert out["unrecorded"] == 2
    assert out["sessions_per_s"] == approx(0.5)
    assert out["duration"]["count"] == 1  # the ok session's: the others ended early
    assert out["duration"]["mean"] == approx(2.0)
    assert out["requests_per_session"]["max"] == 3
    assert out["think_time"]["max"] == approx(0.5)


def test_session_duration_is_the_ok_sessions_as_latency_is_the_ok_requests() -> None:
    """A server that fails sessions at their first turn, and a run stopped mid-session, end
    sessions early: their durations would make the session length look shorter."""
    requests = requests_table([request(s, sent=0.0) for s in range(6)])
    sessions = sessions_table(
        [session(k, 0.0, 10.0 + k) for k in range(3)]  # 10, 11, 12 s
        + [session(3, 0.0, 0.2, "error"), session(4, 0.0, 0.3, "error")]
        + [session(5, 0.0, 1.0, "cancelled")]
    )
    out = session_metrics(sessions, requests, (0.0, 12.0))
    assert out["duration"]["count"] == 3
    assert out["duration"]["p50"] == approx(11.0)
    assert out["duration"]["min"] == approx(10.0)
    assert out["requests_per_session"]["count"] == 6  # (the work: every session's)


def test_describe_and_keys() -> None:
    assert percentile_key(99.9) == "p99_9"
    assert describe(np.array([np.nan, 1.0]))["count"] == 1


def test_buffer_helpers_match_pyarrow_conversions() -> None:
    values = pa.chunked_array([pa.array([1.5, None, 3.0]), pa.array([None, 4.0])])
    got = column(pa.table({"v": values}), "v")
    assert np.array_equal(got, np.array([1.5, np.nan, 3.0, np.nan, 4.0]), equal_nan=True)
    sliced = pa.array([1, 2, None, 4], pa.int32()).slice(1, 3)
    assert integers(sliced).tolist() == [2, 0, 4]
    assert np.array_equal(
        column(pa.table({"v": sliced}), "v"), np.array([2.0, np.nan, 4.0]), equal_nan=True
    )
    assert integers(pa.array([True, False, None])).tolist() == [1, 0, 0]
    assert column(pa.table({"v": pa.array([], pa.float64())}), "v").size == 0
    assert scalar("ok").equals(pa.scalar("ok"))
    assert scalar(3).equals(pa.scalar(3))
    assert scalar(2.5).equals(pa.scalar(2.5))
    assert scalar(False).equals(pa.scalar(False))
    assert from_numpy(np.array([True, False, True])).equals(pa.array([True, False, True]))
    assert from_numpy(np.arange(3, dtype=np.int64)).equals(pa.array([0, 1, 2]))


def test_requests_cut_in_flight_are_told_from_nodes_never_sent() -> None:
    # A stopped run: 2 nodes never sent, 1 request cut by the stop (its chunks kept)
    rows = [
        request(0, sent=0.0),
        request(1, unsent=True, status="cancelled", error_kind="cancelled"),
        request(2, unsent=True, status="cancelled", error_kind="cancelled"),
        request(3, sent=0.0, status="cancelled", error_kind="cancelled", chunks=(0.1,)),
    ]
    counts = request_counts(requests_table(rows))
    assert (counts["cancelled"], counts["cancelled_in_flight"]) == (3, 1)


def test_abandonment_counts_the_chosen_requests_and_how_late_each_was_dropped() -> None:
    def leaving(i: int, after: float, **kw: object) -> dict[str, object]:
        return request(i, **kw) | {"abandon_after": after}  # type: ignore[arg-type]

    rows = [
        leaving(0, 0.5, sent=1.0, chunks=(1.2,), completed=1.503, status="abandoned"),
        leaving(1, 0.2, sent=1.0, chunks=(), completed=1.2001, status="abandoned"),
        leaving(2, 5.0, sent=1.0, chunks=(1.1, 1.4)),  # answered before its time
        leaving(3, 0.3, unsent=True, status="cancelled"),  # never sent: not counted
        request(4, sent=1.0),
    ]
    section = abandonment(requests_table(rows))
    assert section is not None
    assert (section["chosen"], section["abandoned"], section["answered_first"]) == (3, 2, 1)
    lateness = section["lateness"]
    assert lateness["count"] == 2
    assert lateness["max"] == pytest.approx(0.003)
    assert lateness["min"] == pytest.approx(0.0001)
    # nothing to say without a chosen request, or for rows from before the column
    assert abandonment(requests_table([request(0, sent=1.0)])) is None
    old = requests_table([request(0, sent=1.0)]).drop_columns(["abandon_after"])
    assert abandonment(old) is None
