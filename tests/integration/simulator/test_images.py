"""Images in chat requests over real HTTP: the simulator counts an image as a vision-language
model served by vLLM does (one token a ``image_patch_px`` square), caches it by its bytes and
refuses what it cannot read with an OpenAI-style 400."""

from __future__ import annotations

import base64
import io
from typing import Any

from tests.integration.conftest import StartSimulator
from tests.integration.simulator.helpers import MODEL, request
from veeksha.generate.images import data_url


def with_image(url: str, prompt: str = "ba be bi", stream: bool = False, **extra: Any) -> Any:
    """A chat body of one message: an image part, then a text part."""
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": prompt},
                ],
            }
        ],
        "max_tokens": 2,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def usage_of(url: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = request(f"{url}/chat/completions", body)
    assert reply.status == 200, reply.body
    if body["stream"]:
        return dict(reply.chunks()[-1]["usage"])
    return dict(reply.json()["usage"])


def cached(usage: dict[str, Any]) -> int:
    return int(usage["prompt_tokens_details"]["cached_tokens"])


def test_an_image_is_its_patches_and_the_prefix_cache_holds_it(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(prefix_cache_block_size=1)
    body = with_image(data_url(56, 84, 11))
    first = usage_of(sim.base_url, body)
    assert first["prompt_tokens"] == 3 + 2 * 3
    assert cached(first) == 0
    again = usage_of(sim.base_url, body)
    assert again["prompt_tokens"] == 9
    assert cached(again) == 8  # (the image's 6 and 2 words: one token is always computed)
    other = usage_of(sim.base_url, with_image(data_url(56, 84, 12)))
    assert other["prompt_tokens"] == 9
    assert cached(other) == 0  # (another picture of the same size: nothing in common)
    streamed = usage_of(sim.base_url, with_image(data_url(56, 84, 12), stream=True))
    assert (streamed["prompt_tokens"], cached(streamed)) == (9, 8)
    # a text before two different images: only the text is shared
    text_first = with_image(data_url(56, 84, 13))
    text_first["messages"][0]["content"].reverse()
    usage_of(sim.base_url, text_first)
    text_first["messages"][0]["content"][1]["image_url"] = data_url(56, 84, 14)  # (bare URL)
    assert cached(usage_of(sim.base_url, text_first)) == 3
    metrics = request(f"{sim.root_url}/metrics", method="GET").body.decode()
    prompt_total = 9 * 6
    assert any(
        line.startswith("vllm:prompt_tokens_total{") and float(line.split()[-1]) == prompt_total
        for line in metrics.splitlines()
    ), metrics


def test_image_patch_px_sets_the_patch_for_the_simulator_and_per_model(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(
        image_patch_px=14, max_model_len=40, models={"coarse": {"image_patch_px": 56}}
    )
    body = with_image(data_url(56, 84, 21))
    assert usage_of(sim.base_url, body)["prompt_tokens"] == 3 + 4 * 6
    assert usage_of(sim.base_url, {**body, "model": "coarse"})["prompt_tokens"] == 3 + 1 * 2
    tokenized = request(f"{sim.root_url}/tokenize", {"messages": body["messages"]}).json()
    assert tokenized["count"] == 27
    too_big = request(f"{sim.base_url}/chat/completions", with_image(data_url(112, 84, 21)))
    assert too_big.status == 400
    assert too_big.json()["error"]["code"] == "context_length_exceeded"


def test_a_jpeg_and_the_chat_template_count_as_vllm_would(start_simulator: StartSimulator) -> None:
    from PIL import Image

    sim = start_simulator(chat_template=True, tokenizer="subword", prefix_cache_block_size=1)
    buf = io.BytesIO()
    Image.new("RGB", (100, 57)).save(buf, "JPEG")
    url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
    body = with_image(url, "ba")
    first = usage_of(sim.base_url, body)
    assert first["prompt_tokens"] == 4 * 3 + 1 + 9  # (image, "ba", the template's 9)
    assert cached(usage_of(sim.base_url, body)) == first["prompt_tokens"] - 1


def test_what_the_simulator_cannot_read_is_an_openai_400(start_simulator: StartSimulator) -> None:
    sim = start_simulator()
    url = f"{sim.base_url}/chat/completions"
    cases = [
        ("http://example.com/cat.png", "only data: URLs"),
        ("data:image/png;base64,iVBO@@@=", "base64 is invalid"),
    ]
    for image_url, says in cases:
        reply = request(url, with_image(image_url))
        assert reply.status == 400, reply.body
        error = reply.json()["error"]
        assert error["param"] == "messages"
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith("messages[0].content[0]: ")
        assert says in error["message"]
    audio = with_image(data_url(28, 28, 1))
    audio["messages"][0]["content"][0] = {"type": "input_audio", "input_audio": {"data": ""}}
    reply = request(url, audio)
    assert reply.status == 400
    assert "not supported by the simulator" in reply.json()["error"]["message"]
    assert request(url, with_image(data_url(28, 28, 1))).status == 200  # (still serving)


def test_an_image_is_prefilled_as_its_tokens_unless_cached(start_simulator: StartSimulator) -> None:
    sim = start_simulator(preset="realistic", prefill_tokens_per_s=2000, decode_step_ms=1)
    body = with_image(data_url(560, 560, 31), ignore_eos=True)  # (400 tokens: 0.2 s)
    url = f"{sim.base_url}/chat/completions"
    cold = request(url, body).json()
    warm = request(url, body).json()
    assert cold["usage"]["prompt_tokens"] == 403
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] == 400  # (25 blocks of 16)
    assert cold["timings"]["prefill_s"] >= 0.2
    assert warm["timings"]["prefill_s"] < cold["timings"]["prefill_s"] / 4
