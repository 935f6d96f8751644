"""The endpoint of a client without ``api_base``: ``OPENAI_API_BASE``, checked and named as the
variable the user set (never ``client.api_base``, a key nobody wrote)."""

from __future__ import annotations

import pytest

from veeksha.engine.target import client_api_base
from veeksha.errors import ConfigurationError
from veeksha.scenario.models import ChatCompletionsClient


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ftp://h/v1", "must be an http:// or https:// URL"),
        ("http://my host:8000/v1", "has a host that is not one"),
        ("http://me:hunter2@h:8000/v1", "must not hold credentials (user:password@)"),
        ("http://bücher.lan:8000/v1", "has a host with a non-ASCII character ('ü'"),
    ],
)
def test_a_bad_openai_api_base_is_named_as_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("OPENAI_API_BASE", value)
    with pytest.raises(ConfigurationError) as caught:
        client_api_base(ChatCompletionsClient())
    text = str(caught.value)
    assert text.startswith(f"OPENAI_API_BASE (environment variable): {message}"), text
    assert "client." not in text
    assert "hunter2" not in text


def test_the_credentials_fix_names_where_the_key_goes_in_the_callers_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_BASE", "http://me:pw@h:8000/v1")
    with pytest.raises(ConfigurationError, match="put the key in the variable named by api_key_"):
        client_api_base(ChatCompletionsClient())  # a scenario's client: its api_key_env
    with pytest.raises(ConfigurationError) as caught:
        client_api_base(ChatCompletionsClient(), "OPENAI_API_KEY")  # a microbenchmark's
    assert "put the key in OPENAI_API_KEY (got" in str(caught.value)
    assert "api_key_env" not in str(caught.value)


def test_a_good_openai_api_base_is_the_endpoint_and_the_clients_own_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:8000/v1")
    assert client_api_base(ChatCompletionsClient()) == "http://127.0.0.1:8000/v1"
    own = ChatCompletionsClient(api_base="http://h:1/v1", model="m")
    assert client_api_base(own) == "http://h:1/v1"
    monkeypatch.delenv("OPENAI_API_BASE")
    assert client_api_base(ChatCompletionsClient()) is None
