"""hf (local tokenizer.json) and server (/tokenize) tokenizers, and make_tokenizer."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from veeksha.errors import ConfigurationError, TargetError
from veeksha.generate.calibration import ChatTemplate, calibrate, measure_chat_template
from veeksha.generate.server_tokenizer import PROBE_TEXT
from veeksha.generate.tokenizer import (
    BuiltinTokenizer,
    HfTokenizerAdapter,
    ServerTokenizer,
    default_tokenize_endpoint,
    make_tokenizer,
)
from veeksha.scenario.models import BuiltinTokenizer as BuiltinConfig
from veeksha.scenario.models import HfTokenizer as HfConfig
from veeksha.scenario.models import ServerTokenizer as ServerConfig


def test_hf_tokenizer_from_file_and_folder(wordlevel_json: Path) -> None:
    text = "ba bebe zu"
    for path in (wordlevel_json, wordlevel_json.parent):
        tok = HfTokenizerAdapter(str(path))
        assert tok.count(text) == 3
        assert tok.decode(tok.encode(text)) == text


def test_hf_tokenizer_missing_file_names_path_and_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigurationError, match="nowhere") as info:
        HfTokenizerAdapter(str(missing))
    assert "never downloads" in str(info.value)
    with pytest.raises(ConfigurationError, match=r"tokenizer\.json"):
        make_tokenizer(HfConfig(path=str(tmp_path)))  # a folder without tokenizer.json


def test_hf_tokenizer_unreadable_file(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigurationError, match="cannot load"):
        HfTokenizerAdapter(str(bad))


def test_make_tokenizer_kinds(wordlevel_json: Path) -> None:
    assert isinstance(make_tokenizer(BuiltinConfig()), BuiltinTokenizer)
    assert isinstance(make_tokenizer(HfConfig(path=str(wordlevel_json))), HfTokenizerAdapter)
    server = make_tokenizer(ServerConfig(), "http://127.0.0.1:8000/v1/", "m")
    assert isinstance(server, ServerTokenizer)
    assert server.endpoint == "http://127.0.0.1:8000/tokenize"
    explicit = make_tokenizer(ServerConfig(endpoint="http://h/tok"), None, "m")
    assert isinstance(explicit, ServerTokenizer)
    assert explicit.endpoint == "http://h/tok"
    with pytest.raises(ConfigurationError, match="api_base"):
        make_tokenizer(ServerConfig(), None, None)
    assert default_tokenize_endpoint("http://x:1") == "http://x:1/tokenize"


# ----------------------------------------------------------------------------- server tokenizer


Handler = Callable[[web.Request], Awaitable[web.Response]]

#: The fake llama.cpp's BOS id, and the special tokens' texts its /tokenize parses
LLAMA_BOS = 1
_LLAMA_SPECIAL = re.compile(r"(<\|im_(?:start|end)\|>)")


async def _with_server(check: Callable[[str], Any]) -> tuple[Any, list[dict[str, Any]]]:
    """Run a vLLM-like /tokenize server on loopback; run ``check(base_url)`` in a thread."""
    seen: list[dict[str, Any]] = []
    builtin = BuiltinTokenizer()

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        tokens = builtin.encode(body["prompt"])  # (the vLLM shape only)
        return web.json_response({"tokens": tokens, "count": len(tokens), "max_model_len": 99})

    async def detokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return web.json_response({"prompt": builtin.decode(body["tokens"])})

    async def broken(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.Response(status=500, text="upstream down")

    async def llama_tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)  # llama.cpp: no "content", no tokens (and still 200)
        content = body.get("content", "")
        if body.get("parse_special", True):  # (its default: a special token's text is one)
            content = _LLAMA_SPECIAL.sub(r" \1 ", content)
        bos = [LLAMA_BOS] if body.get("add_special", False) else []
        return web.json_response({"tokens": bos + builtin.encode(content)})

    async def llama_apply_template(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)  # ChatML, the BOS left out: the vocabulary adds it (add_special)
        prompt = "".join(
            f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"]
        )
        return web.json_response({"prompt": prompt + "<|im_start|>assistant\n"})

    async def llama_detokenize(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        return web.json_response({"content": builtin.decode(body["tokens"])})

    def router(handler: Handler) -> Handler:
        """llama-server in router mode: a body must name one of its models."""

        async def routed(request: web.Request) -> web.Response:
            if (await request.json()).get("model") != "m":
                message = "model name is missing from the request"
                error = {"code": 400, "message": message, "type": "invalid_request_error"}
                return web.json_response({"error": error}, status=400)
            return await handler(request)

        return routed

    app = web.Application()
    app.router.add_post("/router/tokenize", router(llama_tokenize))
    app.router.add_post("/router/detokenize", router(llama_detokenize))
    app.router.add_post("/router/apply-template", router(llama_apply_template))
    app.router.add_post("/llama/tokenize", llama_tokenize)
    app.router.add_post("/llama/detokenize", llama_detokenize)
    app.router.add_post("/llama/apply-template", llama_apply_template)
    app.router.add_post("/old-llama/tokenize", llama_tokenize)  # (no /apply-template)
    app.router.add_post("/broken/tokenize", broken)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        result = await asyncio.to_thread(check, f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()
    return result, seen


def test_server_tokenizer_counts_encodes_decodes() -> None:
    def check(base: str) -> tuple[int, list[int], str]:
        tok = make_tokenizer(ServerConfig(), base + "/v1", "my-model")
        ids = tok.encode("ba be bi")
        return tok.count("ba be bi bo"), ids, tok.decode(ids)

    (count, ids, text), seen = asyncio.run(_with_server(check))
    assert count == 4
    assert ids == BuiltinTokenizer().encode("ba be bi")
    assert text == "ba be bi"
    # the first call finds the request shape (vLLM's) with the probe text
    assert seen[0] == {"model": "my-model", "prompt": PROBE_TEXT, "add_special_tokens": False}
    assert seen[1] == {"model": "my-model", "prompt": "ba be bi", "add_special_tokens": False}
    assert seen[-1] == {"model": "my-model", "tokens": ids}


def test_server_tokenizer_errors_are_target_errors() -> None:
    def check(base: str) -> str:
        tok = ServerTokenizer(base + "/missing", "m", timeout=5)
        with pytest.raises(TargetError, match=r"answered HTTP 404.*/tokenize"):
            tok.count("ba")
        return "ok"

    assert asyncio.run(_with_server(check))[0] == "ok"


def test_a_failed_server_tokenizer_fails_at_once_afterwards() -> None:
    """One failure, one call: later calls (each result's count, mid-run) do not each wait."""

    def check(base: str) -> list[str]:
        tok = ServerTokenizer(base + "/broken/tokenize", "m", timeout=5)
        errors = []
        for _ in range(3):
            with pytest.raises(TargetError) as info:
                tok.count("ba")
            errors.append(str(info.value))
        return errors

    errors, seen = asyncio.run(_with_server(check))
    assert len(seen) == 1
    assert len(set(errors)) == 1
    assert "answered HTTP 500 Internal Server Error: 'upstream down'" in errors[0]


def test_the_server_tokenizer_gets_the_key_only_on_the_targets_origin() -> None:
    base = "http://127.0.0.1:8000/v1"
    same = make_tokenizer(ServerConfig(), base, "m", "sk-k")
    explicit_same = make_tokenizer(
        ServerConfig(endpoint="http://127.0.0.1:8000/t"), base, "m", "sk-k"
    )
    other = make_tokenizer(
        ServerConfig(endpoint="http://127.0.0.1:9000/tokenize"), base, "m", "sk-k"
    )
    assert isinstance(same, ServerTokenizer)
    assert isinstance(explicit_same, ServerTokenizer)
    assert isinstance(other, ServerTokenizer)
    assert same._api_key == explicit_same._api_key == "sk-k"
    assert other._api_key is None
    assert "sk-k" not in repr(same)


def test_the_llama_cpp_shape_is_found_when_the_vllm_one_gives_no_tokens() -> None:
    def check(base: str) -> tuple[str | None, list[int], str]:
        tok = ServerTokenizer(base + "/llama/tokenize", "m", timeout=5)
        ids = tok.encode("ba be")
        return tok.format, ids, tok.decode(ids)

    (form, ids, text), seen = asyncio.run(_with_server(check))
    assert form == "llama_cpp"
    assert ids == BuiltinTokenizer().encode("ba be")
    assert text == "ba be"
    assert seen[0] == {"model": "m", "prompt": PROBE_TEXT, "add_special_tokens": False}
    assert seen[1] == {"model": "m", "content": PROBE_TEXT, "add_special": False}
    assert seen[2] == {"model": "m", "content": "ba be", "add_special": False}
    assert seen[3] == {"model": "m", "tokens": ids}


def test_an_explicit_shape_is_used_without_probing() -> None:
    def check(base: str) -> list[int]:
        return ServerTokenizer(base + "/llama/tokenize", None, 5, format="llama_cpp").encode("ba")

    ids, seen = asyncio.run(_with_server(check))
    assert ids == [0]
    assert seen == [{"content": "ba", "add_special": False}]


def test_a_missing_endpoint_is_one_call_not_a_probe_of_each_shape() -> None:
    def check(base: str) -> int:
        tok = ServerTokenizer(base + "/missing/tokenize", "m", timeout=5)
        with pytest.raises(TargetError, match=r"answered HTTP 404"):
            tok.fingerprint()
        with pytest.raises(TargetError, match=r"answered HTTP 404"):
            tok.encode("ba")  # (at once: the first failure stands)
        return tok.calls

    calls, _ = asyncio.run(_with_server(check))
    assert calls == 1


def test_make_tokenizer_passes_the_shape() -> None:
    auto = make_tokenizer(ServerConfig(), "http://h:1/v1", "m")
    llama = make_tokenizer(ServerConfig(format="llama_cpp"), "http://h:1/v1", "m")
    assert isinstance(auto, ServerTokenizer)
    assert isinstance(llama, ServerTokenizer)
    assert auto.format is None
    assert llama.format == "llama_cpp"
    assert llama.detokenize_endpoint == "http://h:1/detokenize"


def test_a_llama_cpp_chat_template_is_rendered_then_tokenized_as_its_chat_path_does() -> None:
    """llama.cpp's /tokenize takes no messages: /apply-template renders them (its BOS left
    out), and /tokenize counts the text with the chat path's flags, the BOS added and the
    template's special tokens read as tokens."""
    calibration = calibrate(BuiltinTokenizer())

    def check(base: str) -> ChatTemplate | str:
        tok = ServerTokenizer(base + "/llama/tokenize", "m", 5, format="llama_cpp")
        return measure_chat_template(tok, calibration)

    found, seen = asyncio.run(_with_server(check))
    # a prompt: BOS, <|im_start|>, user, <|im_end|>, and <|im_start|> assistant; a turn: the
    # three of each of its two messages
    assert isinstance(found, ChatTemplate), found
    assert (found.prompt, found.turn) == (6, 6)
    assert found.counts == (8 + 6, 24 + 12, 40 + 18)
    assert [sorted(body) for body in seen] == 3 * [
        ["messages", "model"],
        ["add_special", "content", "model", "parse_special"],
    ]
    rendered, counted = seen[0], seen[1]
    assert [m["role"] for m in rendered["messages"]] == ["user"]
    assert counted["add_special"] is True
    assert counted["parse_special"] is True
    first = rendered["messages"][0]["content"]
    assert counted["content"] == f"<|im_start|>user\n{first}<|im_end|>\n<|im_start|>assistant\n"


def test_a_llama_cpp_server_without_apply_template_is_one_refusal_and_stays_usable() -> None:
    calibration = calibrate(BuiltinTokenizer())

    def check(base: str) -> tuple[ChatTemplate | str, int, list[int]]:
        tok = ServerTokenizer(base + "/old-llama/tokenize", "m", 5, format="llama_cpp")
        found = measure_chat_template(tok, calibration)
        return found, tok.calls, tok.encode("ba be")

    (found, calls, ids), _ = asyncio.run(_with_server(check))
    assert found == (
        "its /apply-template refused a chat request (HTTP 404 Not Found: '404: Not Found')"
    )
    assert calls == 1  # (the first refusal: nothing more asked)
    assert ids == BuiltinTokenizer().encode("ba be")


def test_llama_server_in_router_mode_is_named_the_model_in_every_call() -> None:
    """llama-server serving several models (router mode) refuses a /tokenize, /detokenize or
    /apply-template body without "model": every call names the client's."""
    calibration = calibrate(BuiltinTokenizer())

    def check(base: str) -> tuple[str | None, list[int], str, ChatTemplate | str]:
        tok = ServerTokenizer(base + "/router/tokenize", "m", timeout=5)
        ids = tok.encode("ba be")
        return tok.format, ids, tok.decode(ids), measure_chat_template(tok, calibration)

    (form, ids, text, template), seen = asyncio.run(_with_server(check))
    assert (form, ids, text) == ("llama_cpp", BuiltinTokenizer().encode("ba be"), "ba be")
    assert isinstance(template, ChatTemplate), template
    assert (template.prompt, template.turn) == (6, 6)
    assert all(body.get("model") == "m" for body in seen)
