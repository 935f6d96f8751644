"""The server's numbers against what the client saw, and values that do not fit their column:
the same row from ``request_row`` and from the column batches, the other rows untouched."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.record.builders import T0, make_node, make_record, make_result
from tests.unit.record.test_columnar import add_record, assert_rows, reference_requests
from veeksha.record.columnar import RequestColumns, requests_from_rows
from veeksha.record.numbers import output_plausible, output_tokens, server_timings
from veeksha.record.rows import RequestRecord, request_row


def words(text: str) -> int:
    return len(text.split())


# ----------------------------------------------------------------------------- output tokens


@pytest.mark.parametrize(
    ("server", "chunks", "requested", "plausible"),
    [
        (14, 14, 14, True),
        (9, 14, 14, True),  # 0.75 * 14 - 2 = 8.5
        (8, 14, 14, False),
        (14, 14, 10, True),  # max(requested, chunks)
        (19, 14, 14, True),  # 1.25 * 14 + 2 = 19.5
        (20, 14, 14, False),
        (0, 0, 6, True),
        (9, 1, 6, True),  # non-streamed: one chunk; 1.25 * 6 + 2 = 9.5
        (10, 1, 6, False),
    ],
)
def test_output_plausible(server: int, chunks: int, requested: int, plausible: bool) -> None:
    assert output_plausible(server, chunks, requested) is plausible


def test_chunks_of_thinking_count_a_token_each_beside_the_answers_text() -> None:
    assert output_tokens(None, 6, 6, "a b", None, words, thinking=4) == (6, False, "")
    assert output_tokens(None, 6, 6, "a b", 3, None, thinking=4) == (7, False, "")
    assert output_tokens(None, 6, 6, "a b", None, None, thinking=4) == (None, False, "")


def test_the_servers_plausible_figure_is_taken_without_counting() -> None:
    def count(text: str) -> int:
        raise AssertionError("counted")

    assert output_tokens(6, 6, 6, "x", None, count) == (6, True, "")


def test_one_token_for_fourteen_chunks_is_replaced_by_the_clients_count() -> None:
    text = "".join(f"t{i} " for i in range(14))
    assert output_tokens(1, 14, 14, text, None, words) == (
        14,
        False,
        "completion_tokens=1 (disagrees: 14 chunks, 14 counted)",
    )


def test_a_proxy_that_splits_tokens_across_chunks_keeps_the_servers_figure() -> None:
    text = "".join(f"word{i} " for i in range(100))  # 100 tokens sent in 700 chunks
    assert output_tokens(100, 700, 100, text, None, words) == (100, True, "")


def test_an_implausible_figure_that_agrees_with_the_count_is_kept() -> None:
    # a server that ignores max_tokens and sends several tokens a chunk: the text agrees
    text = " ".join(["w"] * 380)
    assert output_tokens(500, 100, 100, text, None, words) == (500, True, "")


def test_a_huge_figure_is_replaced() -> None:
    out, usage, note = output_tokens(2**31 - 1, 14, 14, "a b c", None, words)
    assert (out, usage) == (3, False)
    assert note == "completion_tokens=2147483647 (disagrees: 14 chunks, 3 counted)"


def test_without_usage_the_count_is_taken() -> None:
    assert output_tokens(None, 3, 3, "a b c", None, words) == (3, False, "")
    assert output_tokens(None, 3, 3, "a b c", 7, words) == (7, False, "")
    assert output_tokens(None, 3, 3, "a b c", None, None) == (None, False, "")


def test_without_a_tokenizer_the_chunks_stand_for_the_client() -> None:
    assert output_tokens(1, 14, 14, "", None, None) == (
        14,
        False,
        "completion_tokens=1 (disagrees: 14 content chunks)",
    )


def test_a_tokenizer_that_fails_on_the_text_costs_only_the_count() -> None:
    def failing(text: str) -> int:
        raise ValueError("cannot tokenize")

    assert output_tokens(1, 14, 14, "x", None, failing)[:2] == (14, False)
    assert output_tokens(None, 3, 3, "x", None, failing) == (None, False, "")


# --------------------------------------------------------------------------------- timings


def test_plausible_timings_are_taken() -> None:
    values, notes = server_timings({"queue_time": 0.01, "prefill_ms": 20, "decode_s": 0.4}, 0.5)
    assert values == [0.01, 0.02, None, 0.4]
    assert notes == ""


@pytest.mark.parametrize(
    ("timings", "note"),
    [
        (
            {"decode_time": 1e300},
            "timings.decode_time=1e300 (1e+300 s, longer than the request's e2e 0.5 s)",
        ),
        ({"prefill_time": -0.5}, "timings.prefill_time=-0.5 (negative)"),
        ({"ttft": "fast"}, "timings.ttft=fast (not a number)"),
        ({"decode": "1e400"}, "timings.decode=1e400 (not a number)"),
        ({"queue": True}, "timings.queue=true (not a number)"),
        (
            {"decode_time": 350},
            "timings.decode_time=350 (350 s, longer than the request's e2e 0.5 s)",
        ),
        (
            {"decode_ms": 2**70},
            "timings.decode_ms=1180591620717411303424 "
            "(1.18059e+18 s, longer than the request's e2e 0.5 s)",
        ),
    ],
)
def test_absurd_timings_are_null_with_a_note(timings: dict[str, Any], note: str) -> None:
    values, notes = server_timings({**timings, "queue_wait_s": 0.01}, 0.5)
    assert notes == note
    assert values[0] == 0.01  # the others are taken
    assert values[1:] == [None, None, None]


def test_simulator_instants_are_checked_too() -> None:
    values, notes = server_timings({"arrival_ns": 2_000_000_000, "first_token_ns": 1_000}, 0.5)
    assert values == [None, None, None, None]
    assert notes.startswith("timings.first_token_ns-arrival_ns=-1999999000 (negative)")


def test_unknown_keys_are_ignored_whatever_they_hold() -> None:
    assert server_timings({"foo": "18446744073709551617", "bar": -1, "n": None}, 0.5) == (
        [None, None, None, None],
        "",
    )


# ------------------------------------------------------------------ rows: both paths, one row


def absurd_records() -> list[RequestRecord]:
    fourteen = tuple(1.0 + i / 100 for i in range(1, 15))
    return [
        make_record(make_result(), request_id=1),
        make_record(
            make_result(chunks=fourteen, completed=1.2, tokens=1, output_text="a " * 14),
            request_id=2,
            node=make_node(max_tokens=14),
        ),
        make_record(
            make_result(
                tokens=None,
                output_text="a b c",
                server_numbers_rejected="completion_tokens=-5 (negative)",
            ),
            request_id=3,
        ),
        make_record(
            make_result(
                server_timings={"decode_time": 1e300, "prefill_time": -1, "queue_time": 0.01}
            ),
            request_id=4,
        ),
        make_record(make_result(status="error", error_kind="connection_reset"), request_id=5),
    ]


def test_both_paths_record_the_same_judgement() -> None:
    records = absurd_records()
    rows = [request_row(rec, T0, words) for rec in records]
    expected = reference_requests(rows)
    assert_rows(requests_from_rows(rows, T0), expected)
    batch = RequestColumns()
    for rec in records:
        add_record(batch, rec, words)
    table = batch.to_table(T0)
    assert_rows(table, expected)
    got = {r["request_id"]: r for r in table.to_pylist()}
    assert (got[1]["output_tokens"], got[1]["server_numbers_rejected"]) == (3, "")
    assert got[2]["output_tokens"] == 14
    assert got[2]["server_output_tokens"] == 1
    assert got[2]["usage_reported"] is False
    assert got[2]["tpot"] == pytest.approx((1.2 - 1.01) / 13)
    assert (
        got[2]["server_numbers_rejected"]
        == "completion_tokens=1 (disagrees: 14 chunks, 14 counted)"
    )
    assert (got[3]["output_tokens"], got[3]["server_output_tokens"]) == (3, None)
    assert got[3]["server_numbers_rejected"] == "completion_tokens=-5 (negative)"
    assert got[4]["server_queue_time"] == 0.01
    assert (got[4]["server_decode_time"], got[4]["server_prefill_time"]) == (None, None)
    assert got[4]["server_numbers_rejected"] == (
        "timings.decode_time=1e300 (1e+300 s, longer than the request's e2e 0.5 s); "
        "timings.prefill_time=-1 (negative)"
    )


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("output_tokens", 99_999_999_999),  # int32 would wrap it to 1,215,752,191
        ("output_tokens", 2**63 + 5),  # past int64
        ("prompt_tokens_total", 2**64 + 1),
        ("cached_tokens", -(2**40)),
        ("server_output_tokens", 2**31),
    ],
)
def test_a_value_that_does_not_fit_its_column_is_null_with_a_note(column: str, value: int) -> None:
    # (the worker bounds the server's numbers and the row judges them: the writer's own defence)
    rows = [request_row(make_record(make_result(), request_id=i), T0, words) for i in range(4)]
    rows[1][column] = value
    table = {r["request_id"]: r for r in requests_from_rows(rows, T0).to_pylist()}
    assert table[1][column] is None
    assert table[1]["server_numbers_rejected"] == f"{column}={value} (does not fit the column)"
    assert table[1]["status"] == "ok"
    for i in (0, 2, 3):
        assert (table[i]["output_tokens"], table[i]["server_numbers_rejected"]) == (3, "")


@pytest.mark.parametrize("value", [99_999_999_999, 2**63 + 5, 2**64 + 1])
def test_a_count_the_worker_did_not_bound_still_costs_only_its_cell(value: int) -> None:
    records = [make_record(make_result(), request_id=i) for i in range(3)]
    records.insert(1, make_record(make_result(tokens=value, output_text="a b c"), request_id=9))
    batch = RequestColumns()
    for rec in records:
        add_record(batch, rec, words)
    rows = {r["request_id"]: r for r in batch.to_table(T0).to_pylist()}
    assert (rows[9]["output_tokens"], rows[9]["server_output_tokens"]) == (3, None)
    assert rows[9]["server_numbers_rejected"] == (
        f"completion_tokens={value} (disagrees: 3 chunks, 3 counted); "
        f"server_output_tokens={value} (does not fit the column)"
    )
    for i in range(3):
        assert (rows[i]["output_tokens"], rows[i]["server_numbers_rejected"]) == (3, "")
