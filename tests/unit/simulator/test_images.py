"""Images in chat requests (``veeksha.simulator.vision``): token counts, identity, errors."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest

from veeksha.generate.images import data_url, png
from veeksha.scenario.loader import load_scenario_text, scenario_hash
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.settings import SimSettings
from veeksha.simulator.subword import subword_tokenizer
from veeksha.simulator.vision import IMAGE_BASE, jpeg_size
from veeksha.simulator.wire import (
    SPECIAL_BASE,
    TEMPLATE_PROMPT_TOKENS,
    ApiError,
    chat_text,
    chat_tokens,
    parse_generation,
)

SUBWORD = subword_tokenizer().encode


def jpeg(width: int, height: int, **options: Any) -> bytes:
    """A black JPEG of that size, written by Pillow."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height)).save(buf, "JPEG", **options)
    return buf.getvalue()


def url_of(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(data).decode()


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def text(words: str) -> dict[str, Any]:
    return {"type": "text", "text": words}


def body(*parts: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": list(parts)}]}


@pytest.mark.parametrize(
    ("width", "height", "patch", "count"),
    [(56, 84, 28, 6), (56, 84, 14, 24), (57, 84, 28, 9), (1, 1, 28, 1), (448, 448, 28, 256)],
)
def test_a_png_counts_its_patches(width: int, height: int, patch: int, count: int) -> None:
    one = body(image(data_url(width, height, 7)))
    assert len(chat_tokens(one, image_patch_px=patch)) == count
    assert len(chat_tokens(one, SUBWORD, image_patch_px=patch)) == count


@pytest.mark.parametrize("media", ["image/jpeg", "image/jpg", "IMAGE/JPEG"])
@pytest.mark.parametrize("progressive", [False, True])  # (SOF0 or SOF2)
def test_a_jpeg_counts_its_patches(media: str, progressive: bool) -> None:
    data = jpeg(100, 57, progressive=progressive)
    assert jpeg_size(data) == (100, 57)
    assert len(chat_tokens(body(image(url_of(data, media))))) == 4 * 3
    assert len(chat_tokens(body(image(url_of(data, media))), image_patch_px=10)) == 10 * 6


def test_a_bare_url_string_is_an_image_too() -> None:
    url = data_url(56, 84, 3)
    bare = body({"type": "image_url", "image_url": url}, text("ba be bi"))
    assert chat_tokens(bare) == chat_tokens(body(image(url), text("ba be bi")))
    assert len(chat_tokens(bare)) == 6 + 3


def test_the_same_image_is_the_same_tokens_and_two_images_share_none() -> None:
    again = url_of(png(56, 84, 1))  # (the same bytes, not the cached URL's string)
    for tokenize in (None, SUBWORD):
        kw = {} if tokenize is None else {"tokenize": tokenize}
        first = chat_tokens(body(image(data_url(56, 84, 1))), **kw)
        assert chat_tokens(body(image(again)), **kw) == first
        other = chat_tokens(body(image(data_url(56, 84, 2))), **kw)
        assert len(set(first)) == len(first) == len(other) == 6
        assert not set(first) & set(other)


def test_an_image_stands_where_its_part_stands_among_the_texts() -> None:
    url = data_url(28, 56, 5)
    alone = chat_tokens(body(image(url)))
    tokens = chat_tokens(body(text("ba be"), image(url), text("bi")))
    assert tokens == ["ba", "be", *alone, "bi"]
    # an image cached after the same texts, in a later message: a history re-sent
    history = {
        "messages": [
            {"role": "user", "content": [image(url), text("ba be")]},
            {"role": "assistant", "content": "bo bu"},
            {"role": "user", "content": "da"},
        ]
    }
    assert chat_tokens(history)[:4] == chat_tokens(body(image(url), text("ba be")))


def test_image_tokens_are_never_a_text_or_special_token() -> None:
    one = body(text("ba \x01x be"), image(data_url(56, 84, 1)))
    words = chat_tokens(one, template=True)
    images = [t for t in words if isinstance(t, str) and t.startswith("\1") and " " in t]
    assert len(images) == 6
    assert len(words) == 3 + 6 + TEMPLATE_PROMPT_TOKENS
    ids = chat_tokens(one, SUBWORD, template=True)
    assert sum(1 for i in ids if IMAGE_BASE <= i < 2 * IMAGE_BASE) == 6
    assert all(i < SPECIAL_BASE + 8 for i in ids if i < IMAGE_BASE)


def test_with_the_template_the_image_sits_inside_its_message() -> None:
    one = body(image(data_url(56, 84, 1)), text("ba be bi"))
    ids = chat_tokens(one, SUBWORD, template=True)
    assert len(ids) == 6 + len(SUBWORD("ba be bi")) + TEMPLATE_PROMPT_TOKENS
    start = ids.index(SPECIAL_BASE + 3) + 1  # (after <|im_start|> user <nl>)
    assert all(i >= IMAGE_BASE for i in ids[start : start + 6])
    assert ids[start + 6] < SPECIAL_BASE


def test_the_rendered_template_writes_an_image_as_a_placeholder() -> None:
    one = body(text("ba"), image(data_url(56, 84, 1)), text("be"))
    rendered = chat_text(one)
    assert rendered == (
        "<s><|im_start|><|user|><nl>ba <image> be<|im_end|><nl><|im_start|><|assistant|><nl>"
    )


def _refused(message: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        chat_tokens({"messages": [{"role": "user", "content": "ba"}, message]})
    assert caught.value.status == 400
    assert caught.value.param == "messages"
    return caught.value


def zero_width_png() -> bytes:
    data = bytearray(png(3, 4, 1))
    data[16:20] = bytes(4)  # (IHDR's width; the simulator reads no CRC)
    return bytes(data)


def zero_height_jpeg() -> bytes:
    data = bytearray(jpeg(16, 16))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 7] = bytes(2)
    return bytes(data)


@pytest.mark.parametrize(
    ("part", "says"),
    [
        (image("http://example.com/cat.png"), "only data: URLs"),
        ({"type": "image_url", "image_url": "https://example.com/cat.png"}, "only data: URLs"),
        (image("data:image/png;base64,iVBO@@@="), "base64 is invalid"),
        (image("data:image/png;base64,iVBORw0KGgo"), "base64 is invalid"),  # (no padding)
        (image("data:image/png,rawbytes"), "only base64 data: URLs"),
        (image(url_of(b"GIF89a" + bytes(20), "image/gif")), "neither a PNG nor a JPEG"),
        (image(url_of(b"not an image at all, " * 3)), "neither a PNG nor a JPEG"),
        (image(url_of(b"\xff\xd8\xff\xd9")), "neither a PNG nor a JPEG"),
        (image(url_of(zero_width_png())), "0 × 4 pixels"),
        (image(url_of(zero_height_jpeg(), "image/jpeg")), "16 × 0 pixels"),
        ({"type": "image_url"}, "'url' string"),
        ({"type": "image_url", "image_url": {"detail": "low"}}, "'url' string"),
        ({"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}, "not supported"),
        ({"type": "video_url", "video_url": {"url": "data:video/mp4;base64,"}}, "not supported"),
    ],
)
def test_an_image_part_the_simulator_cannot_read_is_a_400_naming_it(
    part: dict[str, Any], says: str
) -> None:
    error = _refused({"role": "user", "content": [text("ba"), part]})
    assert error.message.startswith("messages[1].content[1]: ")
    assert says in error.message


def test_the_request_counts_images_against_max_model_len() -> None:
    raw = json.dumps(body(image(data_url(56, 84, 1)), text("ba be bi"))).encode()
    req = parse_generation("chat", raw, "m", 4, max_model_len=13)
    assert len(req.tokens) == 9
    assert len(parse_generation("chat", raw, "m", 4, 100, image_patch_px=14).tokens) == 27
    with pytest.raises(ApiError) as caught:
        parse_generation("chat", raw, "m", 5, max_model_len=13)
    assert caught.value.code == "context_length_exceeded"
    with pytest.raises(ApiError, match="an image of 56 × 84 pixels: 24 tokens") as caught:
        parse_generation("chat", raw, "m", 1, max_model_len=20, image_patch_px=14)
    assert caught.value.code == "context_length_exceeded"


def test_a_huge_image_header_is_refused_before_its_tokens_are_made() -> None:
    data = bytearray(png(1, 1, 1))
    data[16:24] = (1 << 31 - 1).to_bytes(4, "big") * 2  # (2**30 × 2**30 pixels)
    raw = json.dumps(body(image(url_of(bytes(data))))).encode()
    with pytest.raises(ApiError, match="context length") as caught:
        parse_generation("chat", raw, "m", 1, max_model_len=1 << 20, image_patch_px=1)
    assert caught.value.code == "context_length_exceeded"


def test_image_patch_px_is_a_setting_per_model_and_hashes_only_when_set() -> None:
    config = SimulatorConfig.model_validate(
        {"image_patch_px": 14, "models": {"other": {"image_patch_px": 32}, "same": {}}}
    )
    settings = SimSettings.from_json(config.model_dump_json())
    assert settings.image_patch_px == 14
    assert settings.for_model("other").image_patch_px == 32
    assert settings.for_model("same").image_patch_px == 14
    assert SimulatorConfig().image_patch_px == 28
    with pytest.raises(ValueError, match="image_patch_px"):
        SimulatorConfig(image_patch_px=0)

    def hash_of(text: str) -> str:
        return scenario_hash(load_scenario_text(text, "s.yaml"))

    assert hash_of("seed: 42") == "41a55509ee"  # (from before the key existed)
    assert hash_of("seed: 42\nsimulator: {image_patch_px: 28}") == "41a55509ee"
    assert hash_of("seed: 42\nsimulator: {image_patch_px: 14}") != "41a55509ee"
    assert hash_of("seed: 42\nsimulator: {models: {b: {image_patch_px: 14}}}") != hash_of(
        "seed: 42\nsimulator: {models: {b: {}}}"
    )
