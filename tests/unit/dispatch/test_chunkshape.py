"""The chunk-shape fast path records exactly what decoding every event records.

Each stream is fed twice, cut into the same reads: to a ``ResponseAccumulator`` as the worker
uses it (learning the stream's ``ChunkShape``) and to one that may not learn it (every event
decoded in full by msgspec, the general path). Everything recorded must be equal: text, chunk
times, first chunk, usage, timings, ``[DONE]``, and the error (kind and message) if any. The
texts are also checked against the standard library's ``json.loads`` of each event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veeksha.dispatch.chunkshape import ChunkShape, ShapeMemory
from veeksha.dispatch.openai import ResponseAccumulator, ResponseError

TRICKY = [
    "jepu",
    " mapa",
    "",
    "x",
    "y",
    'say "hi"',
    "back\\slash",
    "ends with a backslash \\",
    "line\nbreak\r\n",
    "\ttab",
    "é",
    "naïve café",
    "日本語",
    "😀",
    "a😀b𝄞",
    "\u2028\u2029",
    "\x7f",
    "\x00\x01\x1f",
    "/</script>",
    '","logprobs":null,"finish_reason":null}]}',
    "\n\ndata: ",
    "\\u0041",
]

STYLES = ("msgspec", "ascii", "utf8", "slash", "spaced")


def encode_text(text: str, style: str) -> bytes:
    """``text`` as a JSON string, escaped the way various servers do."""
    if style == "msgspec":
        return msgspec.json.encode(text)
    if style in ("ascii", "spaced"):  # \\u00e9, surrogate pairs for astral characters
        return json.dumps(text).encode()
    if style == "utf8":
        return json.dumps(text, ensure_ascii=False).encode()
    return json.dumps(text).replace("/", "\\/").encode()  # "slash": PHP-style \/


def content_chunk(chat: bool, text: str | None, style: str, rid: str = "cmpl-7") -> bytes:
    """A content chunk as OpenAI servers write it (``spaced``: with Python's default spaces)."""
    s, c = (", ", ": ") if style == "spaced" else (",", ":")
    value = "null" if text is None else encode_text(text, style).decode()
    content = f'"delta"{c}{{"content"{c}{value}}}' if chat else f'"text"{c}{value}'
    return (
        f'{{"id"{c}"{rid}"{s}"object"{c}"obj"{s}"created"{c}1{s}"model"{c}"m"{s}'
        f'"choices"{c}[{{"index"{c}0{s}{content}{s}"logprobs"{c}null{s}"finish_reason"{c}null}}]}}'
    ).encode()


def stream(chat: bool, texts: list[str | None], style: str, usage: bool = True) -> list[bytes]:
    """The SSE events of one response: a role chunk (chat), content, finish, usage, [DONE]."""
    events: list[bytes] = []
    if chat:
        events.append(b'{"id":"cmpl-7","choices":[{"index":0,"delta":{"role":"assistant"}}]}')
    events += [content_chunk(chat, t, style) for t in texts]
    finish = b'{"delta":{}' if chat else b'{"text":""'
    events.append(b'{"id":"cmpl-7","choices":[%b,"finish_reason":"length"}]}' % finish)
    if usage:
        events.append(
            b'{"id":"cmpl-7","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d,'
            b'"prompt_tokens_details":{"cached_tokens":1}},"timings":{"decode_s":0.5}}' % len(texts)
        )
    events.append(b"[DONE]")
    return [b"data: " + e + b"\n\n" for e in events]


def cut(events: list[bytes], how: str, seed: int = 0) -> list[bytes]:
    """The events as reads: all at once, one per event, random pieces, or byte by byte."""
    data = b"".join(events)
    if how == "one":
        return [data]
    if how == "events":
        return events
    if how == "bytes":
        return [data[i : i + 1] for i in range(len(data))]
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, 6)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def record(
    chat: bool, reads: list[bytes], learn: bool, memory: ShapeMemory | None = None
) -> tuple[Any, ...]:
    acc = ResponseAccumulator(chat, memory)
    if not learn:
        acc._tries = 0
    error: tuple[str, str, str] | None = None
    try:
        for i, read in enumerate(reads):
            acc.feed(read, 1000 + i)
        acc.end(1000 + len(reads))
    except Exception as exc:  # noqa: BLE001 - the error is part of what is compared
        error = (type(exc).__name__, getattr(exc, "kind", ""), str(exc))
    return (
        acc.output_text,
        acc.chunk_times(),
        acc.first_chunk_at_ns,
        acc.prompt_tokens,
        acc.completion_tokens,
        acc.cached_tokens,
        acc.server_timings,
        acc.done,
        error,
    )


def assert_same(chat: bool, events: list[bytes], how: str, seed: int = 0) -> tuple[Any, ...]:
    reads = cut(events, how, seed)
    fast = record(chat, reads, learn=True)
    assert fast == record(chat, reads, learn=False), how
    return fast


def expected_text(chat: bool, events: list[bytes]) -> str:
    """The output text by the standard library: every event decoded in full."""
    out = []
    for event in events:
        payload = event[6:-2]
        if payload == b"[DONE]":
            continue
        choices = json.loads(payload)["choices"]
        if choices:
            part = choices[0]["delta"].get("content") if chat else choices[0]["text"]
            out.append(part or "")
    return "".join(out)


# ------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("how", ["one", "events", "random", "bytes"])
def test_tricky_texts_record_the_same(chat: bool, style: str, how: str) -> None:
    texts: list[str | None] = [*TRICKY, None, *reversed(TRICKY)]
    events = stream(chat, texts, style)
    recorded = assert_same(chat, events, how)
    assert recorded[0] == expected_text(chat, events) == "".join(t or "" for t in texts)
    assert len(recorded[1]) == sum(1 for t in texts if t)
    assert recorded[3:8] == (3, len(texts), 1, {"decode_s": 0.5}, True)
    assert recorded[8] is None


class CountingAccumulator(ResponseAccumulator):
    """Counts the events decoded in full."""

    def __init__(self, chat: bool, memory: ShapeMemory | None = None) -> None:
        super().__init__(chat, memory)
        self.decoded: list[bytes] = []

    def on_events(self, events: list[bytes], t_ns: int) -> None:
        self.decoded.extend(events)
        super().on_events(events, t_ns)


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("how", ["one", "events"])
def test_the_fast_path_is_taken(chat: bool, how: str) -> None:
    reads = cut(stream(chat, [f" w{i}" for i in range(40)], "msgspec"), how)
    acc = CountingAccumulator(chat)
    for i, read in enumerate(reads):
        acc.feed(read, i)
    acc.end(len(reads))
    assert acc.done  # (and the shape, learned and used, dropped: the stream is over)
    # decoded in full: the role chunk, the first content chunk, finish, usage, [DONE]
    assert len(acc.decoded) == (5 if chat else 4)
    assert acc.output_text == "".join(f" w{i}" for i in range(40))
    assert acc.chunk_times() == ([0] * 40 if how == "one" else list(range(chat, 40 + chat)))


@settings(max_examples=300, deadline=None)
@given(
    chat=st.booleans(),
    texts=st.lists(st.text(max_size=8) | st.sampled_from(TRICKY), min_size=1, max_size=12),
    style=st.sampled_from(STYLES),
    seed=st.integers(0, 10**6),
)
def test_random_texts_and_reads_record_the_same(
    chat: bool, texts: list[str], style: str, seed: int
) -> None:
    events = stream(chat, list(texts), style, usage=seed % 2 == 0)
    for how in ("one", "events", "random"):
        recorded = assert_same(chat, events, how, seed)
        assert recorded[0] == "".join(texts)


BAD_TEXTS = [
    b'a"b',  # an unescaped quote: the event is not JSON
    b"a\\",  # a trailing backslash escapes the closing quote
    b"a\x01b",  # a raw control character
    b"a\nb",  # a raw line end splits the SSE event
    b"\xff",  # not UTF-8
    b"\xe2\x82",  # a UTF-8 character cut short
    b"\\ud83d",  # a lone surrogate escape
    b"\\x41",  # not a JSON escape
]


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("bad", BAD_TEXTS)
@pytest.mark.parametrize("how", ["one", "events", "random"])
def test_malformed_events_after_the_shape_is_learned_fail_the_same(
    chat: bool, bad: bytes, how: str
) -> None:
    good = content_chunk(chat, "good", "msgspec")
    broken = good.replace(b'"good"', b'"' + bad + b'"')
    events = stream(chat, ["first", "second"], "msgspec")
    at = 3 if chat else 2  # after two content chunks: the shape is known
    events.insert(at, b"data: " + broken + b"\n\n")
    recorded = assert_same(chat, events, how)
    assert recorded[8] is not None


def test_malformed_sse_of_the_simulator_is_reported() -> None:
    events = stream(False, ["a", "b"], "msgspec")
    events.insert(2, b'data: {"id": "malformed", "choices": [\n\n')
    recorded = assert_same(False, events, "one")
    assert recorded[8] is not None
    assert recorded[8][:2] == ("ResponseError", "malformed_response")


def test_a_server_error_inside_the_stream_after_content() -> None:
    events = stream(True, ["a", "b"], "msgspec")
    events.insert(3, b'data: {"error":{"message":"oom","code":503}}\n\n')
    recorded = assert_same(True, events, "one")
    assert recorded[8] is not None
    assert recorded[8][:2] == ("ResponseError", "http_5xx")
    assert recorded[0] == "ab"


def test_shapes_that_change_in_the_stream_fall_back() -> None:
    events = stream(False, ["a", "b"], "msgspec")
    other = [b"data: " + content_chunk(False, t, "msgspec", rid="cmpl-8") + b"\n\n" for t in "cd"]
    events[2:2] = other  # another id: not the learned shape
    recorded = assert_same(False, events, "one")
    assert recorded[0] == "abcd"


# ------------------------------------------------------------- a shape recalled on later streams


def varied_stream(
    chat: bool, texts: list[str], style: str = "msgspec", head: str = "", **values: Any
) -> list[bytes]:
    """``stream`` with the content chunks' head values replaced (``id="x"``, ``created=5``:
    JSON values as text) or the whole head before the text given (``head``)."""
    events = stream(chat, list(texts), style)
    at = 1 if chat else 0
    for i, text in enumerate(texts):
        event = content_chunk(chat, text, style)
        if head:
            event = head.encode() + event[event.index(b'"delta"' if chat else b'"text"') :]
        for key, value in values.items():
            old = json.loads(content_chunk(chat, text, "msgspec"))[key]
            event = event.replace(
                f'"{key}":{json.dumps(old)}'.encode(), f'"{key}":{value}'.encode(), 1
            )
        events[at + i] = b"data: " + event + b"\n\n"
    return events


def recorded_with(
    memory: ShapeMemory, chat: bool, events: list[bytes], how: str
) -> tuple[tuple[Any, ...], CountingAccumulator]:
    """What a stream records with ``memory`` (equal to the general path's), and its accumulator."""
    reads = cut(events, how)
    fast = record(chat, reads, learn=True, memory=memory)
    assert fast == record(chat, reads, learn=False), how
    acc = CountingAccumulator(chat, memory)
    with contextlib.suppress(ResponseError):  # (the error is compared above)
        for i, read in enumerate(reads):
            acc.feed(read, 1000 + i)
        acc.end(1000 + len(reads))
    return fast, acc


SAME_STRUCTURE = [
    {"id": '"cmpl-8"'},
    {"id": '"cmpl-1234567890abcdef"', "created": "1795659660"},
    {"id": '""', "created": "0", "model": '"other model/7"'},
    {"object": '"x"', "created": "999999999999999"},
]


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("how", ["one", "events", "random"])
def test_a_shape_is_recalled_on_a_later_stream_and_records_the_same(
    chat: bool, style: str, how: str
) -> None:
    memory = ShapeMemory()
    texts = ["first", *TRICKY, "last"]
    recorded_with(memory, chat, varied_stream(chat, texts, style), how)  # learned
    for values in SAME_STRUCTURE:
        events = varied_stream(chat, texts, style, **values)
        recorded, acc = recorded_with(memory, chat, events, how)
        assert recorded[0] == "".join(texts)
        if how != "random":  # (random cuts take the general path, with or without a shape)
            # recalled, not learned: decoded in full only the role chunk, finish, usage, [DONE]
            assert len(acc.decoded) == (4 if chat else 3), values


DIFFERENT_HEADS = {
    "a key renamed": {
        "head": '{"id":"cmpl-7","object":"obj","created":1,"modell":"m","choices":[{"index":0,'
    },
    "keys swapped": {
        "head": '{"object":"cmpl-7","id":"obj","created":1,"model":"m","choices":[{"index":0,'
    },
    "an escaped id": {"id": '"cmpl\\/7"'},
    "a non-ASCII id": {"id": '"cmpl-é"'},
    "a leading zero": {"created": "01"},
    "a float": {"created": "1.5"},
    "16 digits": {"created": "1234567890123456"},
    "a negative number": {"created": "-1"},
    "a number for a string": {"id": "7"},
    "a string for a number": {"created": '"1"'},
    "null for a string": {"id": "null"},
    "usage in the head": {
        "head": '{"id":"cmpl-7","object":"obj","created":1,"model":"m",'
        '"usage":{"prompt_tokens":3,"completion_tokens":9},'
        '"choices":[{"index":0,'
    },
    "an error in the head": {"id": '"cmpl-7","error":"boom"'},
    "spaces": {
        "head": '{"id": "cmpl-7","object":"obj","created":1,"model":"m","choices":[{"index":0,'
    },
    "two choices": {
        "head": '{"id":"cmpl-7","object":"obj","created":1,"model":"m",'
        '"choices":[{"index":0,"text":"a","delta":{"content":"a"}},{"index":0,'
    },
}


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("case", list(DIFFERENT_HEADS))
def test_a_head_that_differs_in_more_than_plain_values_is_not_recalled(
    chat: bool, case: str
) -> None:
    memory = ShapeMemory()
    recorded_with(memory, chat, varied_stream(chat, ["a", "b"]), "one")
    events = varied_stream(chat, ["c", "d", "e"], **DIFFERENT_HEADS[case])
    first = events[1 if chat else 0]
    shape = memory.recall(first)  # (a head that matches a prefix: its slot is no string)
    assert shape is None or shape.split(first) is None
    for how in ("one", "events", "random"):
        recorded_with(memory, chat, events, how)
        recorded_with(memory, chat, varied_stream(chat, ["f", "g"]), how)


@settings(max_examples=200, deadline=None)
@given(
    chat=st.booleans(),
    ids=st.lists(st.text(max_size=12), min_size=2, max_size=4),
    created=st.lists(st.integers(-(10**17), 10**17), min_size=2, max_size=4),
    texts=st.lists(st.text(max_size=6) | st.sampled_from(TRICKY), min_size=1, max_size=6),
    style=st.sampled_from(STYLES),
    seed=st.integers(0, 10**6),
)
def test_random_heads_across_streams_record_the_same(
    chat: bool, ids: list[str], created: list[int], texts: list[str], style: str, seed: int
) -> None:
    memory = ShapeMemory()
    for rid, when in zip(ids, created, strict=False):
        events = varied_stream(chat, texts, style, id=json.dumps(rid), created=str(when))
        for how in ("one", "events", "random"):
            reads = cut(events, how, seed)
            assert record(chat, reads, True, memory) == record(chat, reads, False), how


# --------------------------------------------------------------------------- ChunkShape itself


def test_learn_finds_the_text_once_or_declines() -> None:
    payload = content_chunk(False, "jepu", "msgspec")
    before, after, probe = ChunkShape.learn(payload, "jepu") or (b"", b"", "")
    assert before + b"jepu" + after == payload
    assert before.endswith(b'"text":"')
    assert probe == "x"
    assert ChunkShape.learn(content_chunk(False, "x", "msgspec"), "x") is not None
    assert (ChunkShape.learn(content_chunk(False, "x", "msgspec"), "x") or ("", "", ""))[2] == "y"
    assert ChunkShape.learn(content_chunk(False, "cmpl", "msgspec", rid="cmpl"), "cmpl") is None
    assert ChunkShape.learn(content_chunk(False, "é", "ascii"), "é") is None  # \\u00e9 escape


def test_split_cuts_and_proves_several_chunks() -> None:
    payload = content_chunk(False, "jepu", "msgspec")
    before, after, _ = ChunkShape.learn(payload, "jepu") or (b"", b"", "")
    shape = ChunkShape(before, after)
    read = b"".join(shape.head + t + shape.tail for t in (b"a", b"", b"\\n\\u00e9", b"d"))
    assert shape.split(read + b"data: [DONE]\n\n") == ("a\né" + "d", 3, b"data: [DONE]\n\n")
    assert shape.split(shape.head + b"xyz" + shape.tail) == ("xyz", 1, b"")
    assert shape.split(shape.head + b"x\\" + shape.tail) is None
    assert shape.split(shape.head + b"partial") is None


class FakeContent:
    """The part of aiohttp's StreamReader that ``read_stream`` uses."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = list(reads)

    async def readany(self) -> bytes:
        return self.reads.pop(0) if self.reads else b""


class State:
    completed_at = 0


@pytest.mark.parametrize("how", ["one", "events", "random"])
def test_the_https_path_reads_the_same(how: str) -> None:
    from veeksha.dispatch.aiohttp_client import read_stream

    texts = ["a", ' "b"', "é\n", "😀"]
    events = stream(True, list(texts), "ascii")
    acc = ResponseAccumulator(chat=True)
    asyncio.run(read_stream(FakeContent(cut(events, how)), acc, State()))  # type: ignore[arg-type]
    assert acc.output_text == "".join(texts)
    assert acc.chunk_count == 4
    assert (acc.prompt_tokens, acc.completion_tokens, acc.cached_tokens) == (3, 4, 1)
    assert acc.done


def test_a_memory_that_keeps_missing_stops_remembering() -> None:
    """Heads that differ per stream in a value the pattern keeps literal (a float here) would
    build and compile a pattern on every stream: after ``GIVE_UP`` misses in a row, nothing
    more is remembered, and every stream still records what the general path records."""
    memory = ShapeMemory()
    for i in range(ShapeMemory.GIVE_UP + 3):
        reads = cut(varied_stream(False, ["a", "b"], created=f"{i}.5"), "one")
        assert record(False, reads, True, memory) == record(False, reads, False)
    assert memory._match is None
    assert memory.recall(varied_stream(False, ["c"], created="9.5")[0]) is None


def test_a_stream_that_learns_the_remembered_head_is_no_miss() -> None:
    memory = ShapeMemory()
    recorded_with(memory, False, varied_stream(False, ["a", "b"]), "one")
    for i in range(ShapeMemory.GIVE_UP + 3):  # (random cuts: learned, not recalled)
        reads = cut(varied_stream(False, ["c", "d"], id=f'"x{i}"'), "random", i)
        assert record(False, reads, True, memory) == record(False, reads, False)
    recorded, acc = recorded_with(memory, False, varied_stream(False, ["e", "f"]), "one")
    assert recorded[0] == "ef"
    assert len(acc.decoded) == 3  # recalled: only finish, usage and [DONE] decoded in full
