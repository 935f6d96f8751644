"""The incremental SSE parser and the interpretation of OpenAI chunks."""

from __future__ import annotations

import json

import pytest

from veeksha.dispatch.openai import ResponseAccumulator, ResponseError, SSEParser

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


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
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
