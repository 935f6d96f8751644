"""Column-wise recording gives exactly the rows of ``request_row``/``session_row`` (bit for bit)."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.record.builders import T0, make_node, make_record, make_result, ns
from veeksha.dispatch.messages import Result
from veeksha.record.columnar import (
    RequestColumns,
    SessionColumns,
    _equals,
    requests_from_rows,
    sessions_from_rows,
)
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.rows import (
    RequestRecord,
    SessionRecord,
    request_columns,
    request_row,
    session_row,
    session_status,
)


def reference_requests(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the rows are as Python values (the definition, independent of any Arrow path)."""
    out = []
    columns = request_columns(rows)
    for i in range(len(rows)):
        row = {name: columns[name][i] for name in columns}
        chunks = row.pop("chunk_times_ns")
        row["chunk_times"] = None if chunks is None else [(c - T0) / 1e9 for c in chunks]
        row["tbc"] = (
            None
            if chunks is None or row["status"] != "ok"
            else [(b - a) / 1e9 for a, b in itertools.pairwise(chunks)]
        )
        row["chunks_coalesced"] = (
            None if chunks is None else sum(a == b for a, b in itertools.pairwise(chunks))
        )
        row["parents"] = None if row["parents"] is None else list(row["parents"])
        out.append({name: row[name] for name in REQUESTS_SCHEMA.names})
    return out


def same(a: Any, b: Any) -> bool:
    """Equal, NaN-free, bit for bit for floats."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and not math.isnan(a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def assert_rows(table: pa.Table, expected: list[dict[str, Any]]) -> None:
    assert table.schema.equals(REQUESTS_SCHEMA, check_metadata=True)
    got = table.to_pylist()
    assert len(got) == len(expected)
    for row, want in zip(got, expected, strict=True):
        for name in REQUESTS_SCHEMA.names:
            assert same(row[name], want[name]), (name, row[name], want[name])


def add_record(batch: RequestColumns, rec: RequestRecord, count: Any = None) -> None:
    if rec.result is None:
        batch.add_cancelled(
            rec.run_id,
            rec.phase,
            rec.session_id,
            rec.request_id,
            rec.node,
            rec.model,
            rec.ready_at_ns,
            rec.processed_at_ns,
            rec.prompt_tokens_new,
            rec.prompt_tokens_total,
            rec.cancel_reason,
            T0,
            not_before=rec.not_before_ns,
        )
    else:
        batch.add_result(
            rec.run_id,
            rec.phase,
            rec.session_id,
            rec.request_id,
            rec.node,
            rec.model,
            rec.ready_at_ns,
            rec.dispatched_at_ns,
            rec.processed_at_ns,
            rec.result,
            rec.prompt_tokens_new,
            rec.prompt_tokens_total,
            T0,
            rec.output_tokens_counted,
            count,
            not_before=rec.not_before_ns,
        )


def examples() -> list[RequestRecord]:
    sim = {"arrival_ns": 1_000, "first_token_ns": 40_001_000, "queue_wait_s": 0.01}
    return [
        make_record(make_result()),
        make_record(make_result(chunks=(1.4,), completed=1.5, tokens=1)),
        make_record(make_result(chunks=(), completed=1.25, tokens=0), phase="warmup"),
        make_record(
            make_result(
                chunks=(),
                completed=1.1,
                tokens=None,
                status="error",
                http_status=503,
                error_kind="http_5xx",
                error_message="Service Unavailable",
            ),
            output_tokens_counted=0,
        ),
        make_record(make_result(status="error", error_kind="connection_reset", tokens=None)),
        make_record(make_result(chunks=(1.5,), completed=1.5, tokens=3), model="other"),
        make_record(None, dispatched_at_ns=None, cancel_reason="parent request 0 failed"),
        make_record(make_result(tokens=3, prompt_tokens=70, cached_tokens=48)),
        make_record(make_result(tokens=None, output_text="a b c")),
        make_record(make_result(tokens=None), output_tokens_counted=4),
        make_record(
            make_result(
                server_timings={"queue_time": 0.01, "prefill_ms": 20, "ttft_s": 0.04},
                error_message="x" * 5000,
            )
        ),
        make_record(make_result(server_timings=sim)),
        make_record(make_result(), node=make_node(0), ready_at_ns=None),
        make_record(make_result(), node=make_node(2, parents=(0, 1), shared_prefix_tokens=4)),
        make_record(make_result(http_status=200, retries=2, worker_id=5), session_id=2**40),
        make_record(make_result(status="timeout", error_kind="timeout"), dispatched_at_ns=None),
        # a stall: the last byte long before the give-up; a failure before any byte
        make_record(
            make_result(status="timeout", error_kind="timeout", completed=6.0, last_byte=1.5)
        ),
        make_record(
            make_result(chunks=(), status="error", error_kind="connection_refused", last_byte=None)
        ),
        # a wall-clock step: both reads' kernel stamps clamped to sent_at
        make_record(make_result(chunks=(1.0, 1.0), completed=1.0, chunk_stamps_clamped=2)),
        # turns held by their trace rows' times (turn_timing: timestamps): with and without
        # server timings, and one cancelled before it was sent
        make_record(make_result(), not_before_ns=ns(0.5)),
        make_record(make_result(server_timings=sim), not_before_ns=ns(0.4375)),
        make_record(None, dispatched_at_ns=None, not_before_ns=ns(0.5)),
        # its worker opened a connection for it (31.25 ms) before writing it
        make_record(make_result(connect_ns=31_250_000)),
        # a reasoning model: two chunks of thinking, then the answer at 1.5 s
        make_record(
            make_result(reasoning_chunks=2, first_answer_at_ns=ns(1.5), reasoning_tokens=2)
        ),
        make_record(make_result(reasoning_tokens=0)),  # (a server that says so of every answer)
        # thinking without usage: the answer's text counted, one token a chunk of thinking
        make_record(make_result(tokens=None, reasoning_chunks=4, output_text="a b")),
    ]


def test_both_paths_give_request_row_exactly() -> None:
    records = examples()
    rows = [request_row(rec, T0, lambda text: len(text.split())) for rec in records]
    expected = reference_requests(rows)
    assert_rows(requests_from_rows(rows, T0), expected)
    batch = RequestColumns()
    for rec in records:
        add_record(batch, rec, lambda text: len(text.split()))
    assert len(batch) == len(records)
    assert_rows(batch.to_table(T0), expected)


def test_empty_batches_are_typed() -> None:
    assert RequestColumns().to_table(T0).schema.equals(REQUESTS_SCHEMA, check_metadata=True)
    assert SessionColumns().to_table().schema.equals(SESSIONS_SCHEMA, check_metadata=True)
    assert RequestColumns().to_table(T0).num_rows == 0


chunk_lists = st.lists(
    st.tuples(
        st.one_of(st.none(), st.lists(st.integers(0, 10**6), max_size=6).map(sorted)),
        st.sampled_from(["ok", "error", "timeout"]),
    ),
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(chunk_lists)
def test_per_chunk_columns_match_per_row_gaps(lists: list[tuple[list[int] | None, str]]) -> None:
    rows = []
    for i, (chunks, status) in enumerate(lists):
        if chunks is None:
            rec = make_record(None, request_id=i)
        else:
            times = tuple(1.0 + c / 1e6 for c in chunks)
            result = make_result(
                chunks=times, completed=2.0, status=status, tokens=len(chunks), request_id=i
            )
            rec = make_record(result, request_id=i)
        rows.append(request_row(rec, T0))
    expected = reference_requests(rows)
    assert_rows(requests_from_rows(rows, T0), expected)
    batch = RequestColumns()
    for row in rows:
        batch.add_row(row)
    assert_rows(batch.to_table(T0), expected)


def test_sessions_both_paths() -> None:
    records = [
        SessionRecord("run-1", "measured", 3, ns(0.1), ns(2.5), 3, 3, 3, 0, 0, 0.5),
        SessionRecord("run-1", "warmup", 4, ns(0.2), None, 3, 1, 0, 1, 2, 0.0),
        SessionRecord("run-1", "measured", 2**40, None, None, 2, 0, 0, 0, 0, 0.0, "incomplete"),
    ]
    rows = [session_row(rec, T0) for rec in records]
    batch = SessionColumns()
    for rec in records:
        status = rec.status or session_status(
            rec.num_nodes, rec.num_ok, rec.num_error, rec.num_cancelled
        )
        batch.add(
            rec.run_id,
            rec.phase,
            rec.session_id,
            rec.started_at_ns,
            rec.ended_at_ns,
            rec.num_nodes,
            rec.num_requests,
            rec.num_ok,
            rec.num_error,
            rec.num_cancelled,
            rec.think_time_total_s,
            status,
            T0,
        )
    for table in (batch.to_table(), sessions_from_rows(rows)):
        assert table.schema.equals(SESSIONS_SCHEMA, check_metadata=True)
        got = table.to_pylist()
        for row, want in zip(got, rows, strict=True):
            for name in SESSIONS_SCHEMA.names:
                assert same(row[name], want[name]), (name, row[name], want[name])


def test_equals_handles_offsets_and_nulls() -> None:
    strings = pa.array(["ok", None, "okay", "", "ok", "ko"], pa.string())
    assert _equals(strings, "ok").tolist() == [True, False, False, False, True, False]
    assert _equals(strings.slice(1, 4), "ok").tolist() == [False, False, False, True]
    assert _equals(strings, "").tolist() == [False, False, False, True, False, False]


def test_recording_and_conversion_never_import_pandas() -> None:
    code = (
        "import sys\n"
        "from tests.unit.record.test_columnar import examples, add_record\n"
        "from veeksha.record.columnar import RequestColumns, SessionColumns\n"
        "from tests.unit.record.builders import T0\n"
        "b = RequestColumns()\n"
        "[add_record(b, r) for r in examples()]\n"
        "b.to_table(T0); SessionColumns().to_table()\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"


def test_chunks_coalesced_counts_the_chunks_stamped_with_the_read_before() -> None:
    """A worker stamps every chunk of one socket read with that read's time: a chunk whose time
    equals the one before it came in the same read (three reads of 2, 1 and 3 chunks: 3)."""
    reads = [1.25, 1.25, 1.5, 1.75, 1.75, 1.75]
    cases = [
        (make_result(chunks=tuple(reads), completed=2.0, tokens=6, request_id=0), 3),
        (make_result(chunks=(1.25, 1.5), completed=2.0, tokens=2, request_id=1), 0),
        (make_result(chunks=(1.25, 1.25), completed=2.0, status="error", request_id=2), 1),
        (make_result(chunks=(), completed=2.0, tokens=0, request_id=3), 0),
        (None, None),  # never sent: no reads to count
    ]
    rows = [request_row(make_record(res, request_id=i), T0) for i, (res, _) in enumerate(cases)]
    for table in (requests_from_rows(rows, T0), _columns_of(rows).to_table(T0)):
        assert table.column("chunks_coalesced").to_pylist() == [want for _, want in cases]
    assert requests_from_rows(rows, T0).column("tbc").to_pylist()[0] == [0.0, 0.25, 0.25, 0, 0]


def _columns_of(rows: list[dict[str, Any]]) -> RequestColumns:
    batch = RequestColumns()
    for row in rows:
        batch.add_row(row)
    return batch


def _both_paths(results: list[Result | None]) -> tuple[pa.Table, pa.Table]:
    """The requests table of one record per result (request ids 0, 1, ...) from
    ``request_row`` dicts and from the column batches."""
    records = [make_record(res, request_id=i) for i, res in enumerate(results)]
    batch = RequestColumns()
    for rec in records:
        add_record(batch, rec)
    rows = [request_row(rec, T0) for rec in records]
    return requests_from_rows(rows, T0), batch.to_table(T0)


def test_chunk_stamps_clamped_is_the_workers_count_null_when_never_sent() -> None:
    """A substituted (clamped) read time is counted in the row of its request."""
    cases = [
        (make_result(chunks=(1.0, 1.0), completed=1.0, chunk_stamps_clamped=2, request_id=0), 2),
        (make_result(request_id=1), 0),
        (None, None),
    ]
    for table in _both_paths([res for res, _ in cases]):
        assert table.column("chunk_stamps_clamped").to_pylist() == [want for _, want in cases]


def test_connect_time_is_the_workers_set_up_null_when_reused_or_never_sent() -> None:
    """A request whose worker opened a connection for it has that set-up in seconds; one sent
    on a kept-alive connection (connect_ns 0), or never sent, has none (null, not 0)."""
    cases = [
        (make_result(connect_ns=1_000_125_000, request_id=0), 1.000125),
        (make_result(request_id=1), None),
        (make_result(connect_ns=1, request_id=2, status="error", error_kind="timeout"), 1e-9),
        (None, None),
    ]
    for table in _both_paths([res for res, _ in cases]):
        assert table.column("connect_time").to_pylist() == [want for _, want in cases]


def test_a_one_chunk_answer_has_no_tpot_in_the_run_s_recorder() -> None:
    one = make_record(make_result(chunks=(1.5,), completed=1.5, tokens=3))  # non-streaming
    two = make_record(make_result(chunks=(1.2, 1.5), completed=1.5, tokens=3))
    batch = RequestColumns()
    for rec in (one, two):
        add_record(batch, rec)
    got = batch.to_table(T0).to_pylist()
    assert got[0]["ttfc"] == pytest.approx(got[0]["e2e"])
    assert got[0]["tpot"] is None  # no time between its tokens was seen: not 0
    assert got[1]["tpot"] == pytest.approx(0.15)


def test_reasoning_columns_are_null_for_a_model_that_does_not_think() -> None:
    """A reasoning model's answer has its thinking's chunks and tokens and the time to its
    answer (from sent_at, ok rows only); any other row has nulls there, not zeros."""
    cases = [
        (
            make_result(reasoning_chunks=2, first_answer_at_ns=ns(1.25), reasoning_tokens=2),
            (2, 2, 0.25),
        ),
        (make_result(reasoning_chunks=3, first_answer_at_ns=0), (None, 3, None)),  # no answer
        (
            make_result(
                reasoning_chunks=1, first_answer_at_ns=ns(1.3), status="error", error_kind="x"
            ),
            (None, 1, None),
        ),
        (make_result(reasoning_tokens=0), (0, None, None)),
        (make_result(), (None, None, None)),
        (None, (None, None, None)),
    ]
    for table in _both_paths([res for res, _ in cases]):
        got = zip(
            table.column("reasoning_tokens").to_pylist(),
            table.column("reasoning_chunks").to_pylist(),
            table.column("answer_ttfc").to_pylist(),
            strict=True,
        )
        for (tokens, chunks, answer), (_, want) in zip(got, cases, strict=True):
            assert (tokens, chunks) == want[:2]
            assert answer == (None if want[2] is None else pytest.approx(want[2]))


def test_image_columns_are_the_nodes_own_images_null_without() -> None:
    """A request whose message carried images has their count and pixels (answered, failed or
    never sent alike); any other row nulls, not zeros."""
    two = make_node(images=((10, 20, 1), (3, 4, 2)))
    records = [
        make_record(make_result(request_id=0), request_id=0, node=two),
        make_record(make_result(request_id=1), request_id=1),
        make_record(None, request_id=2, node=two),
        make_record(make_result(request_id=3, status="error", error_kind="x"), request_id=3),
    ]
    batch = RequestColumns()
    for rec in records:
        add_record(batch, rec)
    rows = [request_row(rec, T0) for rec in records]
    for table in (requests_from_rows(rows, T0), batch.to_table(T0)):
        assert table.column("images").to_pylist() == [2, None, 2, None]
        assert table.column("image_pixels").to_pylist() == [212, None, 212, None]


def test_abandon_after_is_the_nodes_drawn_delay_null_without() -> None:
    """A request its user abandons has the delay drawn for it (abandoned, answered sooner, or
    never sent alike); any other row null."""
    leaving = make_node(abandon_after_s=0.25)
    records = [
        make_record(make_result(request_id=0, status="abandoned"), request_id=0, node=leaving),
        make_record(make_result(request_id=1), request_id=1, node=leaving),
        make_record(None, request_id=2, node=leaving),
        make_record(make_result(request_id=3), request_id=3),
    ]
    batch = RequestColumns()
    for rec in records:
        add_record(batch, rec)
    rows = [request_row(rec, T0) for rec in records]
    for table in (requests_from_rows(rows, T0), batch.to_table(T0)):
        assert table.column("abandon_after").to_pylist() == [0.25, 0.25, 0.25, None]
        assert table.column("status").to_pylist() == ["abandoned", "ok", "cancelled", "ok"]


def test_output_text_is_each_answers_text_when_kept_null_otherwise() -> None:
    """``trace_recorder.include_content``: every sent request's text as it came (a failure's
    part too; a reasoning model's thinking is not in it), a request never sent null; without
    it the column is null throughout. Both paths, and without pandas (``_strings``)."""
    results = [
        make_result(request_id=0, output_text="one two three"),
        make_result(request_id=1, output_text="", status="error", http_status=500),
        None,
        make_result(request_id=3, output_text="déjà vu ✓", reasoning_chunks=2),
        make_result(request_id=4, output_text="one two three"),
    ]
    for keep, want in (
        (True, ["one two three", "", None, "déjà vu ✓", "one two three"]),
        (False, [None] * 5),
    ):
        records = [make_record(res, request_id=i, keep_text=keep) for i, res in enumerate(results)]
        batch = RequestColumns(keep_texts=keep)
        for rec in records:
            add_record(batch, rec)
        rows = [request_row(rec, T0) for rec in records]
        for table in (requests_from_rows(rows, T0), batch.to_table(T0)):
            assert table.schema.equals(REQUESTS_SCHEMA, check_metadata=True)
            assert table.column("output_text").to_pylist() == want
