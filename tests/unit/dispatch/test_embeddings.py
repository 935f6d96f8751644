"""The ``openai_embeddings`` client: its settings, the body it sends (the prompt as ``input``,
the encoding and dimensions, nothing of a generation) and how its answer is read (the usage's
prompt tokens, no output, a vector required); the scenario's rules for it."""

from __future__ import annotations

import json

import pytest

from tests.unit.scenario.helpers import load, only_issue
from veeksha.dispatch.openai import RequestBuilder, ResponseAccumulator, ResponseError
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import _Route
from veeksha.errors import ConfigurationError

EMBED = "client: {type: openai_embeddings, model: e5, encoding_format: base64, dimensions: 256}"


def _settings(text: str = EMBED) -> WorkerSettings:
    client = load(text).client
    return WorkerSettings.from_client(client, "http://127.0.0.1:8000/v1", None)


def _builder(settings: WorkerSettings) -> RequestBuilder:
    return _Route(settings).builder  # (the worker's own, from its settings)


def test_the_body_is_the_prompt_as_input_and_nothing_of_a_generation() -> None:
    settings = _settings()
    assert settings.endpoint == "http://127.0.0.1:8000/v1/embeddings"
    assert (settings.embeddings, settings.chat, settings.stream) == (True, False, False)
    body = json.loads(_builder(settings).body([("user", "what is a KV cache")], 0))
    assert body == {
        "input": "what is a KV cache",
        "model": "e5",
        "encoding_format": "base64",
        "dimensions": 256,
    }
    # a conversation is flattened as a completions prompt; no model, no extras: still JSON
    bare = RequestBuilder(
        chat=False, model=None, stream=False, max_tokens_param="", embeddings=True
    )
    assert json.loads(bare.body([("user", "a"), ("user", "b")], 5)) == {"input": "a\nb"}


def test_the_answer_gives_its_prompt_tokens_and_no_output() -> None:
    answer = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2, 0.3]}],
        "model": "e5",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    acc = ResponseAccumulator(chat=False, embeddings=True)
    acc.on_body(json.dumps(answer).encode(), 123)
    assert (acc.prompt_tokens, acc.completion_tokens) == (7, 0)
    assert (acc.done, acc.first_chunk_at_ns, acc.done_at_ns) == (True, 123, 123)
    assert acc.parts == []
    assert len(acc.chunk_times_ns) == 0
    base64 = dict(answer, data=[{"index": 0, "embedding": "AAAAAA=="}])
    acc = ResponseAccumulator(chat=False, embeddings=True)
    acc.on_body(json.dumps(base64).encode(), 5)
    assert acc.prompt_tokens == 7


@pytest.mark.parametrize(
    "answer",
    [
        {"data": [], "usage": {"prompt_tokens": 3}},
        {"data": [{"index": 0}], "usage": {"prompt_tokens": 3}},
        {"data": [{"embedding": []}]},
        {"data": [{"embedding": ["x"]}]},
        {"choices": [{"text": "not an embedding"}]},
    ],
)
def test_an_answer_without_a_vector_is_malformed(answer: dict[str, object]) -> None:
    acc = ResponseAccumulator(chat=False, embeddings=True)
    with pytest.raises(ResponseError, match="no embedding vector in the answer") as caught:
        acc.on_body(json.dumps(answer).encode(), 1)
    assert caught.value.kind == "malformed_response"


def test_a_usage_that_is_not_a_count_is_noted_not_taken() -> None:
    acc = ResponseAccumulator(chat=False, embeddings=True)
    acc.on_body(b'{"data": [{"embedding": [1.0]}], "usage": {"prompt_tokens": -4}}', 1)
    assert acc.prompt_tokens is None
    assert acc.rejected is not None
    assert "prompt_tokens=-4" in acc.rejected.text()


def test_the_scenarios_rules_for_an_embeddings_client() -> None:
    issue = only_issue("client: {type: openai_embeddings, stream: true}")
    assert issue.path == "client.stream"
    issue = only_issue("client: {type: openai_embeddings, ignore_eos: false}")
    assert issue.path == "client.ignore_eos"
    assert "an embeddings client generates nothing" in issue.message
    issue = only_issue(
        "client: {type: openai_embeddings}\n"
        "session_generator:\n  channels: [{type: text}, {type: image}]\n"
    )
    assert "is an openai_embeddings client" in issue.message
    with pytest.raises(ConfigurationError, match="sets input, which veeksha controls"):
        _settings("client: {type: openai_embeddings, additional_sampling_params: {input: x}}")
    extra = _settings("client: {type: openai_embeddings, additional_sampling_params: {user: u}}")
    assert extra.extra_params == {"user": "u", "encoding_format": "float"}


def test_agents_cannot_speak_through_an_embeddings_client() -> None:
    issue = only_issue(
        "clients: [{name: e, type: openai_embeddings}]\n"
        "session_generator:\n"
        "  session_graph:\n"
        "    type: agent_rounds\n"
        "    agents: [{id: a}, {id: b, speak_after_within_round: [a]}]\n"
    )
    assert issue.path == "session_generator.session_graph.type"
    assert "e only embeds (openai_embeddings)" in issue.message
