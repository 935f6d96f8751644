"""A reasoning model's stream: its thinking (``delta.reasoning_content`` or ``delta.reasoning``)
is made of generated tokens like its answer, so its chunks are chunks (stamped, counted, the
first of them the time to first chunk), while the answer's text and the time of its first chunk
are kept apart. Every path a read can take is exercised: the general decode, a shape learned
from the stream's first answer chunk, and a shape recalled from an earlier stream."""

from __future__ import annotations

import json

import pytest

from veeksha.dispatch.chunkshape import ShapeMemory
from veeksha.dispatch.openai import ResponseAccumulator

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def event(delta: dict[str, object], **more: object) -> bytes:
    chunk = {**HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **more}
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def stream(key: str, thoughts: list[str], words: list[str]) -> list[bytes]:
    """One read per event: the role chunk, the thinking, the answer, the usage, [DONE]."""
    reads = [event({"role": "assistant", "content": ""})]
    reads += [event({key: word}) for word in thoughts]
    reads += [event({"content": word}) for word in words]
    usage = {
        "prompt_tokens": 7,
        "completion_tokens": len(thoughts) + len(words),
        "completion_tokens_details": {"reasoning_tokens": len(thoughts)},
    }
    reads.append(b"data: " + json.dumps({**HEAD, "choices": [], "usage": usage}).encode() + b"\n\n")
    reads.append(b"data: [DONE]\n\n")
    return reads


def feed(acc: ResponseAccumulator, reads: list[bytes], start: int = 100) -> bool:
    """Each read at ``start`` + 10 ns each; whether the answer's last chunk came by a shape
    (the stream's end drops it)."""
    shaped = False
    for i, data in enumerate(reads):
        acc.feed(data, start + 10 * i)
        shaped = shaped or (acc._shape is not None and i == len(reads) - 3)
    acc.end(start + 10 * len(reads))
    return shaped


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_thinking_chunks_are_chunks_and_the_answer_keeps_its_own_text_and_first_time(
    key: str,
) -> None:
    acc = ResponseAccumulator(chat=True)
    feed(acc, stream(key, ["Let", " me", " think"], ["Hi", " there", " you", " all"]))
    # reads at 100 (role), 110-130 (thinking), 140-170 (answer)
    assert acc.chunk_times() == [110, 120, 130, 140, 150, 160, 170]
    assert acc.first_chunk_at_ns == 110  # the first generated token, thinking or not
    assert acc.first_answer_at_ns == 140
    assert acc.reasoning_chunks == 3
    assert acc.output_text == "Hi there you all"  # (the thinking is not the answer)
    assert (acc.completion_tokens, acc.reasoning_tokens) == (7, 3)


def test_the_answer_is_taken_by_its_learned_shape_after_the_thinking() -> None:
    acc = ResponseAccumulator(chat=True)
    words = [f" w{i}" for i in range(40)]
    assert feed(acc, stream("reasoning_content", ["a", "b"], words))  # (the fast path)
    assert acc.output_text == "".join(words)
    assert acc.chunk_count == 42
    assert acc.first_answer_at_ns == 100 + 10 * 3


def test_a_shape_recalled_from_an_earlier_stream_still_times_the_first_answer_chunk() -> None:
    memory = ShapeMemory()
    feed(ResponseAccumulator(chat=True, memory=memory), stream("reasoning", ["x"], ["p", "q"]))
    acc = ResponseAccumulator(chat=True, memory=memory)
    assert feed(acc, stream("reasoning", ["one", " two"], ["p", " q", " r"]), start=1000)
    assert acc.first_chunk_at_ns == 1010
    assert acc.first_answer_at_ns == 1030
    assert (acc.reasoning_chunks, acc.chunk_count, acc.output_text) == (2, 5, "p q r")


def test_thinking_and_answer_in_one_read_share_its_time() -> None:
    acc = ResponseAccumulator(chat=True)
    reads = stream("reasoning_content", ["t1", "t2"], ["A", "B"])
    acc.feed(b"".join(reads[:4]), 50)  # role, two thoughts, the first answer chunk
    acc.feed(b"".join(reads[4:]), 60)
    assert acc.chunk_times() == [50, 50, 50, 60]
    assert (acc.first_chunk_at_ns, acc.first_answer_at_ns) == (50, 50)


def test_an_answer_cut_off_while_thinking_has_chunks_but_no_answer() -> None:
    acc = ResponseAccumulator(chat=True)
    feed(acc, stream("reasoning_content", ["a", "b", "c"], []))
    assert acc.chunk_count == 3
    assert acc.first_answer_at_ns is None
    assert acc.output_text == ""


def test_a_model_that_does_not_think_records_no_answer_time_apart() -> None:
    acc = ResponseAccumulator(chat=True)
    feed(acc, stream("reasoning_content", [], ["A", "B"]))
    assert (acc.reasoning_chunks, acc.first_answer_at_ns, acc.reasoning_tokens) == (0, None, 0)
    assert acc.first_chunk_at_ns == 110


def test_empty_or_null_thinking_is_no_chunk() -> None:
    acc = ResponseAccumulator(chat=True)
    acc.on_events([b'{"choices":[{"delta":{"reasoning_content":"","content":null}}]}'], 10)
    acc.on_events([b'{"choices":[{"delta":{"reasoning":null}}]}'], 20)
    acc.on_events([b'{"choices":[{"delta":{"content":"x"}}]}'], 30)
    assert (acc.chunk_times(), acc.reasoning_chunks, acc.first_answer_at_ns) == ([30], 0, None)


def test_thinking_in_chunks_that_carry_usage() -> None:
    """vLLM's ``continuous_usage_stats`` puts a usage in every chunk: read the same."""
    acc = ResponseAccumulator(chat=True)
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    acc.on_events([event({"reasoning_content": "hm"}, usage=usage)[6:-2]], 10)
    acc.on_events([event({"content": "ok"}, usage=usage)[6:-2]], 20)
    assert (acc.chunk_times(), acc.reasoning_chunks, acc.first_answer_at_ns) == ([10, 20], 1, 20)
    assert acc.output_text == "ok"


@pytest.mark.parametrize(
    ("details", "taken", "note"),
    [
        ('{"reasoning_tokens": 4}', 4, ""),
        ('{"reasoning_tokens": null}', None, ""),
        ("{}", None, ""),
        ("null", None, ""),
        ('{"reasoning_tokens": 11}', None, "reasoning_tokens=11 (more than completion_tokens 9)"),
        ('{"reasoning_tokens": -1}', None, "reasoning_tokens=-1"),
        ('{"reasoning_tokens": 1e400}', None, "reasoning_tokens=1e400"),
        ("[1]", None, "completion_tokens_details=[1] (not an object)"),
    ],
)
def test_reasoning_tokens_are_a_count_no_larger_than_the_completion(
    details: str, taken: int | None, note: str
) -> None:
    acc = ResponseAccumulator(chat=True)
    usage = b'{"prompt_tokens": 2, "completion_tokens": 9, "completion_tokens_details": %b}'
    acc.on_events([b'{"choices": [], "usage": ' + usage % details.encode() + b"}"], 5)
    assert acc.completion_tokens == 9
    assert acc.reasoning_tokens == taken
    assert note in acc.rejected_numbers
    if not note:
        assert acc.rejected_numbers == ""


def test_a_non_streamed_answer_keeps_its_text_and_reasoning_tokens() -> None:
    acc = ResponseAccumulator(chat=True)
    body = {
        "choices": [
            {"message": {"role": "assistant", "reasoning_content": "hmm", "content": "hi"}}
        ],
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 5,
            "completion_tokens_details": {"reasoning_tokens": 4},
        },
    }
    acc.on_body(json.dumps(body).encode(), 9)
    assert (acc.output_text, acc.first_chunk_at_ns, acc.reasoning_tokens) == ("hi", 9, 4)
    assert acc.reasoning_chunks == 0  # (one body: nothing streamed apart)


# ------------------------------------------------------------- thinking inline: <think>…</think>


def inline(thoughts: list[str], words: list[str], split_close: bool = True) -> list[bytes]:
    """A server without a reasoning parser: the thinking in the content, the first chunk
    opening the block; ``split_close``: the chunk closing it holds nothing of the answer."""
    texts = ["<think>" + thoughts[0], *thoughts[1:]]
    if split_close:
        texts += ["</think>", "\n\n", *words]
    else:
        texts += ["</think>\n\n" + words[0], *words[1:]]
    return [event({"role": "assistant", "content": ""}), *(event({"content": t}) for t in texts)]


@pytest.mark.parametrize("split_close", [True, False])
def test_thinking_inline_in_the_content_is_thinking_and_the_answer_follows_the_block(
    split_close: bool,
) -> None:
    acc = ResponseAccumulator(chat=True)
    words = ["Hi", " there"] + [f" w{i}" for i in range(20)]
    reads = inline(["hm", " let", " me", " see"], words, split_close)
    shaped = False
    for i, data in enumerate(reads):
        acc.feed(data, 100 + 10 * i)
        shaped = shaped or acc._shape is not None
    acc.end(100 + 10 * len(reads))
    thinking = 4 + (2 if split_close else 0)  # (the block's close and the break apart)
    assert acc.reasoning_chunks == thinking
    assert acc.chunk_count == thinking + len(words)
    assert acc.first_chunk_at_ns == 110
    assert acc.first_answer_at_ns == 110 + 10 * thinking
    assert acc.output_text == "".join(words)  # (the block is not the answer)
    assert shaped  # (the answer's later chunks by their shape)


def test_a_recalled_shape_waits_for_the_first_content_chunk_when_it_may_open_a_block() -> None:
    memory = ShapeMemory()
    plain = ResponseAccumulator(chat=True, memory=memory)
    feed(plain, stream("reasoning_content", [], ["a", " b", " c", " d"]))
    assert (plain.reasoning_chunks, plain.output_text) == (0, "a b c d")
    acc = ResponseAccumulator(chat=True, memory=memory)
    reads = inline(["x", " y"], ["A", " B", " C"])
    for i, data in enumerate(reads):
        acc.feed(data, 1000 + 10 * i)
    acc.end(2000)
    assert (acc.reasoning_chunks, acc.output_text) == (4, "A B C")
    assert acc.first_answer_at_ns == 1000 + 10 * 5
    # and a stream that does not think recalls it at once
    again = ResponseAccumulator(chat=True, memory=memory)
    assert feed(again, stream("reasoning_content", [], ["p", " q", " r"]))
    assert (again.reasoning_chunks, again.first_answer_at_ns) == (0, None)


def test_an_answer_that_only_mentions_think_tags_later_is_no_thinking() -> None:
    acc = ResponseAccumulator(chat=True)
    feed(acc, stream("reasoning_content", [], ["Use", " <think>", " tags"]))
    assert (acc.reasoning_chunks, acc.output_text) == (0, "Use <think> tags")


def test_thinking_inline_cut_off_leaves_no_answer() -> None:
    acc = ResponseAccumulator(chat=True)
    reads = [event({"content": "<think>a"}), event({"content": " b"}), b"data: [DONE]\n\n"]
    feed(acc, reads)
    assert (acc.reasoning_chunks, acc.first_answer_at_ns, acc.output_text) == (2, None, "")


@pytest.mark.parametrize(
    ("content", "answer"),
    [
        ("<think>hm</think>\n\nHello", "Hello"),
        ("\n<think>hm, ok</think>Hi", "Hi"),
        ("<think>never closed", ""),
        ("No <think> here", "No <think> here"),
    ],
)
def test_a_non_streamed_answer_drops_its_inline_thinking(content: str, answer: str) -> None:
    acc = ResponseAccumulator(chat=True)
    acc.on_body(json.dumps({"choices": [{"message": {"content": content}}]}).encode(), 9)
    assert acc.output_text == answer


def test_thinking_opened_by_the_template_is_thinking_until_its_close() -> None:
    """``client.thinking_opened``: the chat template opened ``<think>`` in the prompt, so the
    stream has only ``</think>``: its content is thinking until then (was: the thinking was the
    answer, sent back in the next turn, and no answer_ttfc). A second stream, with the first's
    chunk shape remembered, is read the same."""
    memory = ShapeMemory()
    words = ["Hi", " there", " you"]
    for _ in range(2):
        acc = ResponseAccumulator(chat=True, memory=memory, thinking_opened=True)
        reads = [event({"role": "assistant", "content": ""})]
        reads += [event({"content": t}) for t in ["hm", " let", " me", "</think>\n\n"]]
        reads += [event({"content": w}) for w in words]
        reads.append(b"data: [DONE]\n\n")
        feed(acc, reads)
        assert acc.reasoning_chunks == 4
        assert acc.first_chunk_at_ns == 110
        assert acc.first_answer_at_ns == 110 + 10 * 4
        assert acc.output_text == "Hi there you"
    # a model that opens the block itself anyway is read the same; one that never closes it
    # thought all along
    opens = ResponseAccumulator(chat=True, thinking_opened=True)
    feed(
        opens,
        [event({"content": "<think>x"}), event({"content": "</think>Yes"}), b"data: [DONE]\n\n"],
    )
    assert (opens.reasoning_chunks, opens.output_text) == (1, "Yes")
    never = ResponseAccumulator(chat=True, thinking_opened=True)
    feed(never, [event({"content": "all"}), event({"content": " thought"}), b"data: [DONE]\n\n"])
    assert (never.reasoning_chunks, never.first_answer_at_ns, never.output_text) == (2, None, "")


@pytest.mark.parametrize(
    ("content", "answer"),
    [("hm, ok</think>\n\nHello", "Hello"), ("<think>hm</think>Hi", "Hi"), ("no close", "")],
)
def test_a_non_streamed_answer_drops_the_thinking_the_template_opened(
    content: str, answer: str
) -> None:
    acc = ResponseAccumulator(chat=True, thinking_opened=True)
    acc.on_body(json.dumps({"choices": [{"message": {"content": content}}]}).encode(), 9)
    assert acc.output_text == answer
