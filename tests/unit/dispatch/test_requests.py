"""Request bodies for both client types and every option; WorkerSettings from a scenario."""

from __future__ import annotations

import json

import pytest

from veeksha.dispatch.openai import RequestBuilder
from veeksha.dispatch.settings import WorkerSettings, resolve_api_key
from veeksha.errors import ConfigurationError
from veeksha.scenario.models import ChatCompletionsClient, CompletionsClient

CONVERSATION = [("user", "first"), ("assistant", "answer"), ("user", 'second "quoted"\n')]


def body(**kwargs: object) -> dict[str, object]:
    options: dict[str, object] = {"chat": True, "model": "m", "stream": True}
    options.update(kwargs)
    builder = RequestBuilder(max_tokens_param="max_completion_tokens", **options)  # type: ignore[arg-type]
    return json.loads(builder.body(CONVERSATION, 17))


def test_chat_defaults() -> None:
    assert body() == {
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "answer"},
            {"role": "user", "content": 'second "quoted"\n'},
        ],
        "max_completion_tokens": 17,
        "model": "m",
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_completions_flatten_with_newlines() -> None:
    got = body(chat=False)
    assert got["prompt"] == 'first\nanswer\nsecond "quoted"\n'
    assert "messages" not in got


def test_completions_prompt_of_one_message_or_none() -> None:
    builder = RequestBuilder(chat=False, model="m", stream=False, max_tokens_param="max_tokens")
    one = json.loads(builder.body([("user", 'only "one"\n')], 3))
    assert one["prompt"] == 'only "one"\n'  # as is: nothing joined to it
    assert json.loads(builder.body([], 3))["prompt"] == ""


def test_min_tokens_param_gets_the_same_count() -> None:
    got = body(min_tokens_param="min_tokens")
    assert (got["max_completion_tokens"], got["min_tokens"]) == (17, 17)


def test_no_stream_no_stream_options_and_ignore_eos_off_is_omitted() -> None:
    got = body(stream=False, ignore_eos=False)
    assert got["stream"] is False
    assert "stream_options" not in got
    assert "ignore_eos" not in got


def test_no_model_key_without_model() -> None:
    assert "model" not in body(model=None)


def test_prompt_fallback_goes_on_the_last_user_message_only() -> None:
    got = body(prompt_fallback=True)
    messages = got["messages"]
    assert isinstance(messages, list)
    assert messages[0]["content"] == "first"
    assert messages[2]["content"] == 'second "quoted"\n Generate at least 17 tokens.'
    flat = body(chat=False, prompt_fallback=True)
    assert isinstance(flat["prompt"], str)
    assert flat["prompt"].endswith("\n Generate at least 17 tokens.")


def test_additional_params_merged_and_stream_options_extended() -> None:
    got = body(extra_params={"temperature": 0.5, "ignore_eos": False, "stream_options": {"x": 1}})
    assert got["temperature"] == 0.5
    assert got["ignore_eos"] is False
    assert got["stream_options"] == {"include_usage": True, "x": 1}


def test_body_is_bytes_and_builder_is_reusable() -> None:
    builder = RequestBuilder(chat=True, model="m", stream=True, max_tokens_param="max_tokens")
    a = builder.body([("user", "a")], 1)
    b = builder.body([("user", "b")], 2)
    assert isinstance(a, bytes)
    assert json.loads(a)["max_tokens"] == 1
    assert json.loads(b)["messages"][0]["content"] == "b"


# ------------------------------------------------------------------------------ settings


def test_settings_from_chat_client() -> None:
    client = ChatCompletionsClient.model_validate(
        {
            "model": "llama",
            "min_tokens_param": "min_tokens",
            "request_timeout": 12,
            "max_retries": 2,
            "use_min_tokens_prompt_fallback": True,
            "additional_sampling_params": {"temperature": 0},
        }
    )
    s = WorkerSettings.from_client(client, "http://127.0.0.1:9/v1/", "k", dry_run=True)
    assert s.endpoint == "http://127.0.0.1:9/v1/chat/completions"
    assert (s.chat, s.stream, s.model, s.api_key, s.dry_run) == (True, True, "llama", "k", True)
    assert (s.max_tokens_param, s.min_tokens_param) == ("max_completion_tokens", "min_tokens")
    assert (s.request_timeout_s, s.max_retries, s.prompt_fallback) == (12, 2, True)
    assert s.extra_params == {"temperature": 0}


def test_settings_from_completions_client() -> None:
    s = WorkerSettings.from_client(
        CompletionsClient.model_validate({"stream": False}), "http://h/v1", None
    )
    assert s.endpoint == "http://h/v1/completions"
    assert (s.chat, s.stream, s.max_tokens_param, s.api_key) == (False, False, "max_tokens", None)


def test_controlled_keys_in_additional_params_are_rejected() -> None:
    client = ChatCompletionsClient.model_validate({"additional_sampling_params": {"stream": False}})
    with pytest.raises(ConfigurationError, match="stream"):
        WorkerSettings.from_client(client, "http://h/v1", None)


def test_repr_never_shows_the_key() -> None:
    s = WorkerSettings(endpoint="http://h/v1/completions", api_key="sk-secret")
    assert "sk-secret" not in repr(s)
    assert "sk-secret" not in str([s])


def test_resolve_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "from-env")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert (
        resolve_api_key(ChatCompletionsClient.model_validate({"api_key_env": "MY_KEY"}))
        == "from-env"
    )
    assert resolve_api_key(ChatCompletionsClient.model_validate({"api_key": "inline"})) == "inline"
    assert resolve_api_key(ChatCompletionsClient.model_validate({})) is None
