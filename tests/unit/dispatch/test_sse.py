"""The incremental SSE parser and the interpretation of OpenAI chunks."""

from __future__ import annotations

import itertools
import json
import tracemalloc
from collections.abc import Callable

import pytest

from veeksha.dispatch.openai import (
    MAX_EVENT_BYTES,
    ResponseAccumulator,
    ResponseError,
    SSEParser,
    StreamOver,
)

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\n'
    b"event: message\nid: 3\n"
    b'data: {"choices":[{"delta":{"content":"lo"}}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,'
    b'"prompt_tokens_details":{"cached_tokens":3}},"timings":{"ttft_ms":1.5}}\n\n'
    b"data: [DONE]\n\n"
)
PAYLOADS = [
    b'{"choices":[{"delta":{"role":"assistant"}}]}',
    b'{"choices":[{"delta":{"content":"Hel"}}]}',
    b'{"choices":[{"delta":{"content":"lo"}}]}',
    b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,'
    b'"prompt_tokens_details":{"cached_tokens":3}},"timings":{"ttft_ms":1.5}}',
    b"[DONE]",
]


def feed_all(parser: SSEParser, pieces: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for piece in pieces:
        out.extend(parser.feed(piece))
    return out + parser.close()


def test_whole_stream_in_one_read() -> None:
    assert feed_all(SSEParser(), [STREAM]) == PAYLOADS


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_lone_cr(newline: bytes) -> None:
    assert feed_all(SSEParser(), [STREAM.replace(b"\n", newline)]) == PAYLOADS


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_split_at_every_offset(newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    for cut in range(len(stream) + 1):
        assert feed_all(SSEParser(), [stream[:cut], stream[cut:]]) == PAYLOADS, cut


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_one_byte_per_read(newline: bytes) -> None:
    stream = STREAM.replace(b"\n", newline)
    assert feed_all(SSEParser(), [stream[i : i + 1] for i in range(len(stream))]) == PAYLOADS


def test_events_are_returned_by_the_read_that_completes_them() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"a"') == []
    assert parser.feed(b": 1}\n\ndata: [DO") == [b'{"a": 1}']
    assert parser.feed(b"NE]\n") == []
    assert parser.feed(b"\n") == [b"[DONE]"]


def test_multiline_data_no_space_and_bare_data_field() -> None:
    parser = SSEParser()
    assert parser.feed(b"data:a\ndata: b\ndata\n\n") == [b"a\nb\n"]


def test_comment_only_and_blank_lines_yield_nothing() -> None:
    assert feed_all(SSEParser(), [b": ping\n\n\n\n:another\n\n"]) == []


def test_last_event_without_blank_line_is_kept_at_close() -> None:
    assert feed_all(SSEParser(), [b"data: x\n"]) == [b"x"]
    assert feed_all(SSEParser(), [b"data: y"]) == [b"y"]


# --------------------------------------------------------------------------- accumulator


def test_chat_accumulation_with_shared_read_timestamps() -> None:
    acc = ResponseAccumulator(chat=True)
    acc.on_events(PAYLOADS[:2], 100)  # role-only chunk has no content: not a chunk
    acc.on_events(PAYLOADS[2:], 200)
    assert acc.output_text == "Hello"
    assert acc.chunk_times() == [100, 200]
    assert acc.first_chunk_at_ns == 100
    assert (acc.prompt_tokens, acc.completion_tokens, acc.cached_tokens) == (5, 2, 3)
    assert acc.server_timings == {"ttft_ms": 1.5}
    assert acc.done


def test_first_chunk_is_first_non_empty_content() -> None:
    acc = ResponseAccumulator(chat=True)
    acc.on_events([b'{"choices":[{"delta":{"content":""}}]}'], 10)
    acc.on_events([b'{"choices":[{"delta":{"content":null}}]}'], 20)
    acc.on_events([b'{"choices":[{"delta":{"content":"x"}}]}'], 30)
    assert acc.first_chunk_at_ns == 30
    assert acc.chunk_times() == [30]


def test_completions_text_and_unknown_fields_ignored() -> None:
    acc = ResponseAccumulator(chat=False)
    chunk = {"id": "c", "choices": [{"text": "abc", "index": 0, "logprobs": None}], "x": [1]}
    acc.on_events([json.dumps(chunk).encode()], 5)
    assert acc.output_text == "abc"
    assert acc.prompt_tokens is None


def test_non_streamed_bodies() -> None:
    chat = ResponseAccumulator(chat=True)
    chat.on_body(b'{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":1}}', 9)
    assert (chat.output_text, chat.first_chunk_at_ns, chat.completion_tokens) == ("hi", 9, 1)
    comp = ResponseAccumulator(chat=False)
    comp.on_body(b'{"choices":[{"text":"yo"}]}', 4)
    assert (comp.output_text, comp.chunk_times()) == ("yo", [4])


@pytest.mark.parametrize("payload", [b"{not json", b'{"choices": 3}', b"[1]"])
def test_malformed_chunks(payload: bytes) -> None:
    with pytest.raises(ResponseError) as info:
        ResponseAccumulator(chat=True).on_events([payload], 1)
    assert info.value.kind == "malformed_response"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"message": "bad", "code": 400}, "http_4xx"),
        ({"message": "oom", "type": "InternalServerError"}, "http_5xx"),
        ("just a string", "http_5xx"),
    ],
)
def test_error_object_inside_a_stream(error: object, kind: str) -> None:
    acc = ResponseAccumulator(chat=True)
    with pytest.raises(ResponseError) as info:
        acc.on_events([json.dumps({"error": error}).encode()], 1)
    assert info.value.kind == kind


# ------------------------------------------------------------------ fast path of whole events


def general_path(reads: list[bytes]) -> list[bytes]:
    """The payloads the line-by-line path gives: fed after a byte that disables the fast path."""
    parser = SSEParser()
    assert parser.feed(b":") == []  # a pending comment line: every later feed is general
    out = parser.feed(b"\n")
    for piece in reads:
        out.extend(parser.feed(piece))
    return out + parser.close()


@pytest.mark.parametrize(
    "read",
    [
        b'data: {"a":1}\n\n',
        b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n',
        b"data: \n\n",  # an empty payload
        b"data:  two spaces\n\n",
        b"data: a\ndata: b\n\n",  # multi-line data: not the fast shape
        b"data: a\n\n\ndata: b\n\n",  # a stray blank line
        b"data: a\n\n: comment\n\ndata: b\n\n",
        b"data: a\n\nevent: x\ndata: b\n\n",
        b"data: a\r\n\r\ndata: b\r\n\r\n",
        b"data: a\rb\n\n",
        b"data: a\n\ndata:b\n\n",  # no space after the colon
        b"data: a\n\ndata: b\n",  # the last event is not complete yet
    ],
)
def test_fast_path_gives_the_general_paths_payloads(read: bytes) -> None:
    assert feed_all(SSEParser(), [read]) == general_path([read])


def test_fast_path_only_without_pending_bytes() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a") == []
    assert parser.feed(b"b\n\ndata: c\n\n") == [b"ab", b"c"]


def test_one_read_of_many_completions_chunks_shares_its_timestamp() -> None:
    chunks = [{"choices": [{"text": f"t{i}", "index": 0, "logprobs": None}]} for i in range(5)]
    chunks.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
    read = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    acc = ResponseAccumulator(chat=False)
    acc.on_events(SSEParser().feed(read + b"data: [DONE]\n\n"), 42)
    assert acc.output_text == "t0t1t2t3t4"
    assert acc.chunk_times() == [42] * 5
    assert (acc.first_chunk_at_ns, acc.completion_tokens, acc.done) == (42, 5, True)


def test_long_streams_keep_text_and_times_compact() -> None:
    acc = ResponseAccumulator(chat=True)
    for i in range(300):
        acc.on_events([json.dumps({"choices": [{"delta": {"content": f"<{i}>"}}]}).encode()], i)
    assert acc.output_text == "".join(f"<{i}>" for i in range(300))
    assert len(acc.parts) < 64
    assert acc.chunk_times() == list(range(300))
    assert acc.chunk_count == 300


# ------------------------------------------------------------- long lines: linear and bounded


def bytes_allocated_by(feed: Callable[[bytes], object], pieces: list[bytes]) -> int:
    """The bytes each call of ``feed`` allocated beyond what was live when it started (its
    peak, as tracemalloc counts it), summed over the pieces: what the calls copied."""
    total = 0
    tracemalloc.start()
    try:
        for piece in pieces:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            feed(piece)
            total += tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return total


def long_line(size: int) -> bytes:
    return b"data: " + b"x" * (size - 6) + b"\n\n"


def test_a_20_mb_line_in_64_kb_reads_costs_work_linear_in_its_size() -> None:
    """Not re-joined and re-scanned per read: the pieces are kept and joined once. (Re-joining
    them per read copies ~N²/2R bytes: 3.3 GB for this line.)"""
    size = 20 << 20
    line = long_line(size)
    pieces = [line[i : i + 65536] for i in range(0, len(line), 65536)]
    parser = SSEParser(max_line=32 << 20)
    out: list[bytes] = []
    copied = bytes_allocated_by(lambda piece: out.extend(parser.feed(piece)), pieces)
    assert [len(p) for p in out] == [size - 6]
    assert copied < 4 * size, copied


def test_a_line_over_the_limit_fails_the_response() -> None:
    assert MAX_EVENT_BYTES == 16 << 20
    parser = SSEParser(max_line=1000)
    assert parser.feed(b"data: " + b"x" * 900) == []
    with pytest.raises(ResponseError) as info:
        parser.feed(b"x" * 200)  # in pieces
    assert info.value.kind == "malformed_response"
    assert str(info.value) == "an SSE line longer than 1,000 bytes (the limit of one event)"
    with pytest.raises(ResponseError):  # in one read (a whole ``data: X\n\n`` read is never
        # checked: a worker's read is at most 256,000 bytes)
        SSEParser(max_line=1000).feed(b"data: " + b"x" * 1000 + b"\r\n\r\n")
    parser = SSEParser(max_line=1000)
    parser.feed(b"data: " + b"x" * 900)
    with pytest.raises(ResponseError):  # a line ended in the read that made it too long
        parser.feed(b"x" * 200 + b"\n\n")
    exact = b"data: " + b"x" * 994
    assert feed_all(SSEParser(max_line=1000), [exact[:500], exact[500:], b"\n\n"]) == [b"x" * 994]


def test_an_event_of_many_data_lines_over_the_limit_fails_the_response() -> None:
    line = b"data: " + b"y" * 99 + b"\n"
    assert feed_all(SSEParser(max_line=1000), [line * 10, b"\n"]) == [b"\n".join([b"y" * 99] * 10)]
    with pytest.raises(ResponseError) as info:
        feed_all(SSEParser(max_line=1000), [line * 5, line * 6])
    assert str(info.value).startswith("an SSE event longer than 1,000 bytes")


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
@pytest.mark.parametrize("size", [2, 3, 5, 7, 13])
def test_pieces_of_every_size(newline: bytes, size: int) -> None:
    stream = STREAM.replace(b"\n", newline)
    pieces = [stream[i : i + size] for i in range(0, len(stream), size)]
    assert feed_all(SSEParser(), pieces) == PAYLOADS


def test_a_cr_ending_a_read_ends_the_line_even_if_the_next_read_has_no_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a") == []
    assert parser.feed(b"b\r") == []  # (the CR may be half a CRLF)
    assert parser.feed(b"data: c") == []  # (it was not: it ended "data: ab")
    assert parser.feed(b"\n\n") == [b"ab\nc"]


# ------------------------------------------------------------------------ the end of a stream


def completions_event(text: str) -> bytes:
    return b'data: {"choices":[{"index":0,"text":%b}]}\n\n' % json.dumps(text).encode()


DONE = b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    "after",
    [completions_event("AFTER"), b"data: {not json\n\n", b"garbage", b"data: x\n", DONE],
)
def test_anything_after_done_in_the_same_read_is_ignored(after: bytes) -> None:
    acc = ResponseAccumulator(chat=False)
    acc.feed(completions_event("a"), 1)
    with pytest.raises(StreamOver):
        acc.feed(completions_event("b") + DONE + after, 2)
    assert (acc.output_text, acc.chunk_times(), acc.done, acc.done_at_ns) == ("ab", [1, 2], True, 2)
    acc.end(3)  # (nothing more is read)
    assert acc.output_text == "ab"


def test_a_read_after_done_is_ignored_also_once_the_shape_is_learned() -> None:
    acc = ResponseAccumulator(chat=False)
    for i in range(3):
        acc.feed(completions_event(f"t{i}"), i)
    assert acc._shape is not None
    acc.feed(DONE, 5)
    assert (acc.done, acc.done_at_ns) == (True, 5)
    with pytest.raises(StreamOver):
        acc.feed(completions_event("AFTER"), 6)  # the learned shape: still not taken
    assert (acc.output_text, acc.chunk_times()) == ("t0t1t2", [0, 1, 2])


def test_done_at_the_end_of_its_read_is_a_normal_end() -> None:
    acc = ResponseAccumulator(chat=False)
    acc.feed(completions_event("a") + DONE, 4)
    acc.end(4)
    assert (acc.output_text, acc.done, acc.done_at_ns) == ("a", True, 4)


# ---------------------------------------------------------------------------- byte order mark


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("cuts", [[], [1], [2], [3], [1, 2], [1, 2, 3], [3, 4]])
def test_a_byte_order_mark_at_the_start_is_dropped_and_the_first_chunk_kept(
    cuts: list[int],
) -> None:
    stream = BOM + completions_event("first") + completions_event(" second") + DONE
    bounds = [0, *cuts, len(stream)]
    acc = ResponseAccumulator(chat=False)
    for i, (start, end) in enumerate(itertools.pairwise(bounds)):
        acc.feed(stream[start:end], i)
    acc.end(len(bounds))
    assert acc.output_text == "first second"
    assert acc.chunk_count == 2


def test_only_the_streams_first_bytes_can_be_a_byte_order_mark() -> None:
    acc = ResponseAccumulator(chat=False)
    acc.feed(b"\xef" + completions_event("a")[1:], 1)  # not a mark: the stream's own bytes
    acc.feed(BOM + completions_event("b"), 2)  # a mark later: a line of an unknown field
    acc.feed(completions_event("c") + DONE, 3)
    acc.end(3)
    assert acc.output_text == "c"


def test_a_byte_order_mark_before_a_json_body() -> None:
    acc = ResponseAccumulator(chat=True)
    acc.on_body(BOM + b'{"choices":[{"message":{"content":"hi"}}]}', 1)
    assert acc.output_text == "hi"


# ------------------------------------------------------------------------------ invalid UTF-8


@pytest.mark.parametrize("learned", [False, True])
def test_invalid_utf8_is_a_malformed_response_with_a_readable_message(learned: bool) -> None:
    acc = ResponseAccumulator(chat=False)
    if learned:
        for i in range(3):
            acc.feed(completions_event(f"t{i}"), i)
        assert acc._shape is not None
    with pytest.raises(ResponseError) as info:
        acc.feed(completions_event("bad").replace(b"bad", b"b\xffd"), 9)
    assert info.value.kind == "malformed_response"
    assert str(info.value) == (
        "invalid UTF-8 in the response (b'\\xff': invalid start byte): "
        '\'{"choices":[{"index":0,"text":"b\ufffdd"}]}\''
    )
    with pytest.raises(ResponseError) as info:
        ResponseAccumulator(chat=True).on_body(b'{"choices":[{"message":{"content":"\xc3"}}]}', 1)
    assert str(info.value).startswith("invalid UTF-8 in the response (b'\\xc3': ")
