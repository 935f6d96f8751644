"""The server's numbers at the edge: bounded, noted with their raw text, never failing a response;
and a Result batch the link cannot encode loses only the Results at fault."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from veeksha.dispatch.channel import Link, encode_frame, from_worker_decoder, socket_pair
from veeksha.dispatch.messages import FromWorker, Result
from veeksha.dispatch.numbers import (
    MAX_COUNT,
    MAX_RAW_CHARS,
    RawText,
    Rejections,
    raw_text,
    raw_value,
    sendable_timings,
)
from veeksha.dispatch.openai import ResponseAccumulator, ResponseError
from veeksha.dispatch.worker import Worker, sendable

# --------------------------------------------------------------------------- bounding a count


@pytest.mark.parametrize("value", [0, 1, 6, MAX_COUNT - 1])
def test_a_count_in_range_is_taken_as_it_is(value: int) -> None:
    rejected = Rejections()
    assert rejected.count("completion_tokens", value) == value
    assert rejected.text() == ""


def test_an_absent_count_is_none_and_not_a_rejection() -> None:
    rejected = Rejections()
    assert rejected.count("completion_tokens", None) is None
    assert rejected.text() == ""


@pytest.mark.parametrize(
    ("value", "note"),
    [
        (-5, "completion_tokens=-5 (negative)"),
        (MAX_COUNT, f"completion_tokens={MAX_COUNT} (out of range)"),
        (99_999_999_999, "completion_tokens=99999999999 (out of range)"),
        (2**63 + 5, "completion_tokens=9223372036854775813 (out of range)"),
        (2**64 + 1, "completion_tokens=18446744073709551617 (out of range)"),
        (14.0, "completion_tokens=14.0 (not an integer)"),
        (True, "completion_tokens=true (not an integer)"),
        ("14", 'completion_tokens="14" (not an integer)'),
        ([1], "completion_tokens=[1] (not an integer)"),
        (RawText("1e400"), "completion_tokens=1e400 (out of range)"),
    ],
)
def test_anything_else_is_none_with_a_note_naming_the_raw_text(value: Any, note: str) -> None:
    rejected = Rejections()
    assert rejected.count("completion_tokens", value) is None
    assert rejected.text() == note


def test_notes_are_kept_by_field_latest_first_seen_order() -> None:
    rejected = Rejections()
    rejected.count("completion_tokens", -1)
    rejected.count("prompt_tokens", -2)
    rejected.count("completion_tokens", -3)  # a usage in every chunk: the latest note
    assert rejected.text() == "completion_tokens=-3 (negative); prompt_tokens=-2 (negative)"


def test_raw_text_is_short_whatever_the_value() -> None:
    assert raw_text(10**200) == "1" + "0" * (MAX_RAW_CHARS - 2) + "…"
    assert len(raw_text("x" * 10_000)) == MAX_RAW_CHARS
    assert raw_text(10**20000) == "<int>"  # past str's digit limit: its type, not a traceback


def test_raw_value_keeps_what_msgspec_cannot_hold_as_text() -> None:
    assert raw_value(msgspec.Raw(b"12")) == 12
    assert raw_value(msgspec.Raw(b"18446744073709551617")) == 2**64 + 1
    value = raw_value(msgspec.Raw(b"1e400"))
    assert type(value) is RawText
    assert value.text == "1e400"
    long = raw_value(msgspec.Raw(b"9" * 5000))
    assert type(long) is RawText
    assert len(raw_text(long)) == MAX_RAW_CHARS


def test_sendable_timings_are_the_same_object_when_the_link_can_carry_them() -> None:
    timings = {"arrival_ns": 2**62, "decode_s": 0.2, "fault": None, "chunk_ns": [1, 2]}
    assert sendable_timings(timings) is timings


def test_sendable_timings_replace_what_msgpack_cannot_carry_by_its_text() -> None:
    timings = {"a": 2**64 + 1, "b": [1, -(2**63) - 1], "c": 1.5, "d": RawText("1e400")}
    sent = sendable_timings(timings)
    assert sent == {
        "a": "18446744073709551617",
        "b": "[1,-9223372036854775809]",
        "c": 1.5,
        "d": "1e400",
    }
    msgspec.msgpack.encode(sent)


# ------------------------------------------------------------------- the response accumulator


def stream(usage: bytes, timings: bytes = b"") -> ResponseAccumulator:
    """A chat stream of 3 content chunks (one read each), then a usage chunk."""
    acc = ResponseAccumulator(chat=True)
    for i in range(3):
        acc.feed(b'data: {"choices":[{"delta":{"content":"t%d "}}]}\n\n' % i, 10 + i)
    tail = b',"timings":' + timings if timings else b""
    acc.feed(b'data: {"choices":[],"usage":%b%b}\n\ndata: [DONE]\n\n' % (usage, tail), 20)
    acc.end(20)
    return acc


@pytest.mark.parametrize(
    ("raw", "note"),
    [
        (b"18446744073709551617", "completion_tokens=18446744073709551617 (out of range)"),
        (b"9223372036854775813", "completion_tokens=9223372036854775813 (out of range)"),
        (b"99999999999", "completion_tokens=99999999999 (out of range)"),
        (b"-5", "completion_tokens=-5 (negative)"),
        (b"1e400", "completion_tokens=1e400 (out of range)"),
        (b"1" * 5000, "completion_tokens=" + "1" * (MAX_RAW_CHARS - 1) + "… (out of range)"),
        (b"3.5", "completion_tokens=3.5 (not an integer)"),
        (b'"3"', 'completion_tokens="3" (not an integer)'),
    ],
)
def test_an_absurd_completion_count_is_noted_and_the_answer_kept(raw: bytes, note: str) -> None:
    acc = stream(b'{"prompt_tokens":10,"completion_tokens":%b}' % raw)
    assert acc.output_text == "t0 t1 t2 "
    assert acc.chunk_times() == [10, 11, 12]
    assert acc.done
    assert (acc.prompt_tokens, acc.completion_tokens) == (10, None)
    assert acc.rejected_numbers == note


def test_a_plain_usage_is_taken_without_a_note() -> None:
    acc = stream(
        b'{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}'
    )
    assert (acc.prompt_tokens, acc.completion_tokens, acc.cached_tokens) == (10, 3, 4)
    assert acc.rejected_numbers == ""


@pytest.mark.parametrize(
    ("usage", "counts", "note"),
    [
        (
            b'{"prompt_tokens":-1,"completion_tokens":3}',
            (None, 3, None),
            "prompt_tokens=-1 (negative)",
        ),
        (
            b'{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":11}}',
            (10, 3, None),
            "cached_tokens=11 (more than prompt_tokens 10)",
        ),
        (
            b'{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":1e400}}',
            (10, 3, None),
            "cached_tokens=1e400 (out of range)",
        ),
        (
            b'{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":7}',
            (10, 3, None),
            "prompt_tokens_details=7 (not an object)",
        ),
        (b"[1,2]", (None, None, None), "usage=[1,2] (not an object)"),
    ],
)
def test_other_usage_fields_are_bounded_too(
    usage: bytes, counts: tuple[int | None, ...], note: str
) -> None:
    acc = stream(usage)
    assert (acc.prompt_tokens, acc.completion_tokens, acc.cached_tokens) == counts
    assert acc.rejected_numbers == note
    assert acc.output_text == "t0 t1 t2 "


def test_timings_numbers_beyond_the_link_or_a_double_become_text_not_a_failure() -> None:
    timings = b'{"decode_time":1e400,"foo":18446744073709551617,"ttft":"fast","queue_time":0.01}'
    acc = stream(b'{"prompt_tokens":10,"completion_tokens":3}', timings)
    assert acc.output_text == "t0 t1 t2 "
    assert acc.completion_tokens == 3
    assert acc.server_timings == {
        "decode_time": "1e400",
        "foo": "18446744073709551617",
        "ttft": "fast",
        "queue_time": 0.01,
    }  # (read by the main process, which rejects the keys it reads: veeksha.record.numbers)
    msgspec.msgpack.encode(acc.server_timings)


def test_timings_that_are_not_an_object_are_noted() -> None:
    acc = stream(b'{"prompt_tokens":10,"completion_tokens":3}', b"[1e400]")
    assert acc.server_timings is None
    assert acc.rejected_numbers == "timings=[1e400] (not an object)"


def test_a_non_streamed_body_with_absurd_numbers_keeps_its_answer() -> None:
    acc = ResponseAccumulator(chat=True)
    acc.on_body(
        b'{"choices":[{"message":{"content":"hi there"}}],'
        b'"usage":{"prompt_tokens":4,"completion_tokens":1e400},"timings":{"decode":1e999}}',
        9,
    )
    assert (acc.output_text, acc.chunk_times(), acc.completion_tokens) == ("hi there", [9], None)
    assert acc.server_timings == {"decode": "1e999"}
    assert acc.rejected_numbers == "completion_tokens=1e400 (out of range)"


def test_a_broken_choice_is_still_a_malformed_response() -> None:
    acc = ResponseAccumulator(chat=True)
    with pytest.raises(ResponseError) as info:
        acc.on_events(
            [b'{"choices":[{"delta":{"content":5}}],"usage":{"completion_tokens":1e400}}'], 1
        )
    assert info.value.kind == "malformed_response"


def test_an_error_object_with_an_absurd_code_is_still_the_servers_error() -> None:
    acc = ResponseAccumulator(chat=True)
    with pytest.raises(ResponseError) as info:
        acc.on_events([b'{"error":{"message":"overloaded","code":1e400}}'], 1)
    assert info.value.kind == "http_5xx"
    assert "overloaded" in str(info.value)


# ------------------------------------------------------------------ the worker's Result batch


def result(i: int, **kw: Any) -> Result:
    fields: dict[str, Any] = {"chunk_times_ns": [4, 5], "output_text": "w0 w1", "http_status": 200}
    fields.update(kw)
    return Result(i, 0, "ok", 1, 2, 3, **fields)


def bad_batch() -> list[Result]:
    return [
        result(0),
        result(1, completion_tokens=2**64 + 1),
        result(2, server_timings={"x": -(2**63) - 1}),
        result(3, output_text="lone \ud800 surrogate"),
        result(4, completion_tokens=2**63 + 5),  # (msgpack carries it: bounded at the edge)
    ]


def test_sendable_repairs_timings_and_replaces_only_the_results_it_cannot_encode() -> None:
    batch = bad_batch()
    with pytest.raises((OverflowError, UnicodeEncodeError)):
        encode_frame(batch)
    out = sendable(batch)
    encode_frame(out)
    assert [r.request_id for r in out] == [0, 1, 2, 3, 4]
    assert out[0] is batch[0]
    assert out[4] is batch[4]
    repaired = out[2]  # the server's timings: the value as text, the answer kept
    assert (repaired.status, repaired.output_text) == ("ok", "w0 w1")
    assert repaired.server_timings == {"x": "-9223372036854775809"}
    for lost in (out[1], out[3]):
        assert (lost.status, lost.error_kind, lost.http_status) == ("error", "client_error", 200)
        assert (lost.received_at_ns, lost.sent_at_ns, lost.completed_at_ns) == (1, 2, 3)
        assert "could not be sent to the main process" in lost.error_message
    assert "OverflowError" in out[1].error_message
    assert "UnicodeEncodeError" in out[3].error_message


def test_flush_sends_every_request_a_result_when_one_cannot_be_encoded() -> None:
    ours, theirs = socket_pair()
    sender: Link[FromWorker] = Link(ours, from_worker_decoder(), lambda batch: None)
    receiver: Link[FromWorker] = Link(theirs, from_worker_decoder(), lambda batch: None)
    worker = SimpleNamespace(
        _flush_scheduled=True, _outbox=bad_batch(), _sender=sender, _bulk_outbox=[], _bulk=None
    )
    try:
        Worker._flush(worker)  # type: ignore[arg-type]
        assert worker._outbox == []
        got = receiver.drain()
    finally:
        for link in (sender, receiver):
            link.close()
    assert [(r.request_id, r.status) for r in got if isinstance(r, Result)] == [
        (0, "ok"),
        (1, "error"),
        (2, "ok"),
        (3, "error"),
        (4, "ok"),
    ]
