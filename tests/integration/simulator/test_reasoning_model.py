"""``simulator.reasoning_tokens``: the simulator answers as a reasoning model served by vLLM or
SGLang with a reasoning parser does, its thinking first, in its own key, then the answer."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.simulator.helpers import chat, request
from veeksha.generate.tokenizer import BuiltinTokenizer

TOK = BuiltinTokenizer()


def split_stream(chunks: list[dict[str, Any]], key: str) -> tuple[list[str], list[str]]:
    """The texts of the thinking chunks and of the answer chunks, in order (and no chunk that
    carries both)."""
    thoughts, answers = [], []
    for c in chunks:
        if not c["choices"]:
            continue
        delta = c["choices"][0]["delta"]
        assert not (delta.get(key) and delta.get("content"))
        if delta.get(key):
            assert not answers, "thinking after the answer began"
            thoughts.append(delta[key])
        elif delta.get("content"):
            answers.append(delta["content"])
    return thoughts, answers


@pytest.mark.parametrize(
    ("key", "per_chunk", "sizes"),
    [("reasoning_content", 1, [1] * 5 + [1] * 7), ("reasoning", 2, [2, 2, 1, 2, 2, 2, 1])],
)
def test_a_streamed_answer_thinks_first_in_its_own_key(
    start_simulator: Any, key: str, per_chunk: int, sizes: list[int]
) -> None:
    sim = start_simulator(reasoning_tokens=5, reasoning_field=key, tokens_per_chunk=per_chunk)
    reply = request(f"{sim.base_url}/chat/completions", chat(max_tokens=12, ignore_eos=True))
    chunks = reply.chunks()
    thoughts, answers = split_stream(chunks, key)
    # the thinking's chunks and the answer's are cut apart at the fifth token
    assert [TOK.count(t) for t in thoughts + answers] == sizes
    assert TOK.count("".join(thoughts)) == 5
    assert TOK.count("".join(answers)) == 7
    assert not answers[0].startswith(" ")  # (the answer's first word, as a body's text)
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}


def test_an_answer_no_longer_than_the_thinking_is_all_thinking(start_simulator: Any) -> None:
    sim = start_simulator(reasoning_tokens=20)
    chunks = request(
        f"{sim.base_url}/chat/completions", chat(max_tokens=6, ignore_eos=True)
    ).chunks()
    thoughts, answers = split_stream(chunks, "reasoning_content")
    assert (len(thoughts), answers) == (6, [])
    assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 6}


def test_a_non_streamed_answer_has_its_thinking_in_the_message(start_simulator: Any) -> None:
    sim = start_simulator(reasoning_tokens=3, reasoning_field="reasoning")
    body = request(
        f"{sim.base_url}/chat/completions", chat(max_tokens=9, stream=False, ignore_eos=True)
    ).json()
    message = body["choices"][0]["message"]
    assert TOK.count(message["reasoning"]) == 3
    assert TOK.count(message["content"]) == 6
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_completions_and_a_model_that_does_not_think_are_as_before(start_simulator: Any) -> None:
    sim = start_simulator(reasoning_tokens=4, models={"plain": {"reasoning_tokens": 0}})
    completion = request(
        f"{sim.base_url}/completions",
        {"model": "veeksha-sim", "prompt": "ba", "max_tokens": 6, "ignore_eos": True},
    ).json()
    assert TOK.count(completion["choices"][0]["text"]) == 6
    assert "completion_tokens_details" not in completion["usage"]
    plain = request(
        f"{sim.base_url}/chat/completions", chat(max_tokens=6, ignore_eos=True, model="plain")
    ).chunks()
    thoughts, answers = split_stream(plain, "reasoning_content")
    assert (thoughts, TOK.count("".join(answers))) == ([], 6)
    assert "completion_tokens_details" not in plain[-1]["usage"]


def _streamed_contents(sim: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """A streamed chat answer of 7 tokens: its chunks, and their non-empty contents."""
    chunks = request(
        f"{sim.base_url}/chat/completions", chat(max_tokens=7, ignore_eos=True)
    ).chunks()
    contents = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    return chunks, [text for text in contents if text]


def test_thinking_inline_is_in_the_content_between_think_tags(start_simulator: Any) -> None:
    """A server without a reasoning parser: the thinking in the content, no count of it."""
    sim = start_simulator(reasoning_tokens=3, reasoning_field="inline")
    chunks, contents = _streamed_contents(sim)
    assert contents[0].startswith("<think>")
    assert contents[2].endswith("</think>\n\n")
    assert not contents[3].startswith(" ")  # (the answer's first word)
    thinking = "".join(contents[:3]).removeprefix("<think>").removesuffix("</think>\n\n")
    assert (TOK.count(thinking), TOK.count("".join(contents[3:]))) == (3, 4)
    assert "completion_tokens_details" not in chunks[-1]["usage"]
    body = request(
        f"{sim.base_url}/chat/completions", chat(max_tokens=7, stream=False, ignore_eos=True)
    ).json()
    content = body["choices"][0]["message"]["content"]
    assert content.startswith("<think>")
    head, _, answer = content.partition("</think>\n\n")
    assert (TOK.count(head.removeprefix("<think>")), TOK.count(answer)) == (3, 4)


def test_thinking_opened_by_the_template_has_only_its_close(start_simulator: Any) -> None:
    """``reasoning_field: template``: the chat template opened ``<think>`` in the prompt, so
    the content starts inside the block: no ``<think>``, the thinking's last word closes it."""
    sim = start_simulator(reasoning_tokens=3, reasoning_field="template")
    _, contents = _streamed_contents(sim)
    assert "<think>" not in "".join(contents)
    assert contents[2].endswith("</think>\n\n")
    thinking = "".join(contents[:3]).removesuffix("</think>\n\n")
    assert (TOK.count(thinking), TOK.count("".join(contents[3:]))) == (3, 4)
    body = request(
        f"{sim.base_url}/chat/completions", chat(max_tokens=7, stream=False, ignore_eos=True)
    ).json()
    head, _, answer = body["choices"][0]["message"]["content"].partition("</think>\n\n")
    assert "<think>" not in head
    assert (TOK.count(head), TOK.count(answer)) == (3, 4)
