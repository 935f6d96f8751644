"""The simulator speaks the OpenAI format: bodies, streams, usage, exact token counts."""

from __future__ import annotations

import pytest

from tests.integration.simulator.helpers import MODEL, chat, content_of, request, words
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.simulator.process import SimulatorProcess

TOK = BuiltinTokenizer()


def test_streaming_chat_follows_the_openai_chunk_format(fast_simulator: SimulatorProcess) -> None:
    reply = request(
        f"{fast_simulator.base_url}/chat/completions", chat("ba be bi", 12, ignore_eos=True)
    )
    assert reply.status == 200
    assert reply.headers["content-type"] == "text/event-stream"
    events = reply.events()
    assert events[-1] == "[DONE]"
    chunks = reply.chunks()
    assert len({c["id"] for c in chunks}) == 1
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 12  # one token per chunk
    assert not content[0]["choices"][0]["delta"]["content"].startswith(" ")
    assert all(c["choices"][0]["delta"]["content"].startswith(" ") for c in content[1:])
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "length"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 12,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert TOK.count(content_of(chunks)) == 12
    assert set(usage_chunk["timings"]) >= {
        "arrival_ns", "scheduled_ns", "first_token_ns", "last_token_ns",
        "queue_wait_s", "prefill_s", "decode_s", "cached_tokens",
    }  # fmt: skip


def test_stream_without_usage_puts_timings_in_the_finish_chunk(
    fast_simulator: SimulatorProcess,
) -> None:
    body = chat("bo bu", 4, stream=True, ignore_eos=True)
    del body["stream_options"]
    chunks = request(f"{fast_simulator.base_url}/chat/completions", body).chunks()
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["timings"]["completion_tokens"] == 4


def test_non_streaming_chat_body(fast_simulator: SimulatorProcess) -> None:
    reply = request(
        f"{fast_simulator.base_url}/chat/completions",
        chat(words(20, "nonstream"), max_completion_tokens=7, stream=False, ignore_eos=True),
    )
    assert reply.status == 200
    body = reply.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert TOK.count(message["content"]) == body["usage"]["completion_tokens"] == 7  # wins over 8
    assert body["usage"]["prompt_tokens"] == 20
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["timings"]["last_token_ns"] >= body["timings"]["first_token_ns"] > 0


@pytest.mark.parametrize("stream", [True, False])
def test_completions_endpoint(fast_simulator: SimulatorProcess, stream: bool) -> None:
    body = {
        "model": MODEL,
        "prompt": "ka ke ki ko",
        "max_tokens": 5,
        "ignore_eos": True,
        "stream": stream,
        "stream_options": {"include_usage": True} if stream else None,
    }
    reply = request(f"{fast_simulator.base_url}/completions", body)
    assert reply.status == 200
    if stream:
        chunks = reply.chunks()
        assert all(c["object"] == "text_completion" for c in chunks)
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        usage = chunks[-1]["usage"]
    else:
        result = reply.json()
        text = result["choices"][0]["text"]
        usage = result["usage"]
    assert TOK.count(text) == usage["completion_tokens"] == 5
    assert usage["prompt_tokens"] == 4


def test_prompt_tokens_sum_every_message_without_template_tokens(
    fast_simulator: SimulatorProcess,
) -> None:
    body = chat(stream=False, max_tokens=2)
    body["messages"] = [
        {"role": "system", "content": "ba  be\nbi"},
        {"role": "user", "content": [{"type": "text", "text": "bo bu"}]},
        {"role": "assistant", "content": "da de di do"},
        {"role": "user", "content": "du"},
    ]
    reply = request(f"{fast_simulator.base_url}/chat/completions", body)
    assert reply.json()["usage"]["prompt_tokens"] == 3 + 2 + 4 + 1


def test_output_length_is_a_seeded_draw_unless_exact(fast_simulator: SimulatorProcess) -> None:
    url = f"{fast_simulator.base_url}/chat/completions"
    lengths = set()
    for _ in range(30):
        got = request(url, chat(max_tokens=10, stream=False, min_tokens=4)).json()
        n = got["usage"]["completion_tokens"]
        assert 4 <= n <= 10
        assert got["choices"][0]["finish_reason"] == ("length" if n == 10 else "stop")
        lengths.add(n)
    assert len(lengths) > 1
    exact = request(url, chat(max_tokens=10, stream=False, min_tokens=10)).json()
    assert exact["usage"]["completion_tokens"] == 10
    same = [request(url, chat(max_tokens=50, stream=False, seed=7)).json() for _ in range(2)]
    assert same[0]["choices"][0]["message"] == same[1]["choices"][0]["message"]


def test_official_openai_client_streaming_and_not(fast_simulator: SimulatorProcess) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=fast_simulator.base_url, api_key="unused", timeout=10)
    try:
        answer = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "ba be"}], max_tokens=6,
            extra_body={"ignore_eos": True},
        )  # fmt: skip
        assert answer.usage is not None
        assert answer.usage.completion_tokens == 6
        assert TOK.count(answer.choices[0].message.content or "") == 6

        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "ba be"}], max_tokens=6,
            stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        )  # fmt: skip
        parts, usage = [], None
        for event in stream:
            if event.choices and event.choices[0].delta.content:
                parts.append(event.choices[0].delta.content)
            if event.usage is not None:
                usage = event.usage
        assert len(parts) == 6
        assert usage is not None
        assert usage.completion_tokens == 6

        completion = client.completions.create(
            model=MODEL, prompt="ka ke", max_tokens=3, stream=True
        )
        texts = [c.choices[0].text for c in completion if c.choices]
        assert 1 <= TOK.count("".join(texts)) <= 3

        models = client.models.list()
        assert [m.id for m in models.data] == [MODEL]
    finally:
        client.close()


def test_role_chunk_comes_first_when_enabled(start_simulator) -> None:  # type: ignore[no-untyped-def]
    sim = start_simulator(role_chunk=True, tokens_per_chunk=3)
    chunks = request(
        f"{sim.base_url}/chat/completions", chat(max_tokens=7, ignore_eos=True)
    ).chunks()
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    contents = [
        c["choices"][0]["delta"]["content"]
        for c in chunks[1:]
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]
    assert [TOK.count(c) for c in contents] == [3, 3, 1]
