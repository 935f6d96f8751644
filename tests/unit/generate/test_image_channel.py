"""The image channel: which requests carry images, how many and of what sizes, drawn from the
seed without changing any other draw; the scenario's rules for it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.scenario.helpers import load, only_issue
from veeksha.generate.sessions import BLOCK_SESSIONS, SessionGenerator
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.models import Scenario

TOK = BuiltinTokenizer()
CHAT = {"type": "linear", "num_request_generator": {"type": "fixed", "value": 3}}


def _scenario(image: dict[str, Any] | None, graph: dict[str, Any] = CHAT) -> Scenario:
    channels: list[dict[str, Any]] = [{"type": "text"}]
    if image is not None:
        channels.append({"type": "image", **image})
    generator = {"session_graph": graph, "channels": channels}
    return Scenario.model_validate({"seed": 9, "session_generator": generator})


def _sessions(scenario: Scenario, n: int = 300) -> list[SessionSpec]:
    generator = SessionGenerator(scenario, TOK)
    return [generator.session(i) for i in range(n)]


def test_a_conversation_carries_its_images_in_its_first_turn() -> None:
    sessions = _sessions(_scenario({"width_generator": {"type": "fixed", "value": 64}}))
    for session in sessions:
        first, *later = session.nodes
        assert len(first.images) == 1
        ((width, height, seed),) = first.images
        assert (width, height) == (64, 512)
        assert 0 <= seed < 1 << 63
        assert all(node.images == () for node in later)
        assert session.images
    seeds = [s.nodes[0].images[0][2] for s in sessions]
    assert len(set(seeds)) == len(seeds)  # (every image its own)


def test_every_turn_gives_each_request_images_and_counts_and_sizes_are_drawn() -> None:
    image = {
        "every_turn": True,
        "count_generator": {"type": "uniform", "min": 0, "max": 3},
        "width_generator": {"type": "uniform", "min": 28, "max": 600},
        "height_generator": {"type": "fixed_stair", "values": [100, 200]},
    }
    nodes = [node for s in _sessions(_scenario(image)) for node in s.nodes]
    counts = [len(node.images) for node in nodes]
    assert set(counts) == {0, 1, 2, 3}
    sizes = [(w, h) for node in nodes for w, h, _ in node.images]
    assert {h for _, h in sizes} == {100, 200}
    assert min(w for w, _ in sizes) >= 28
    assert max(w for w, _ in sizes) <= 600


def test_the_images_change_no_other_draw_and_are_the_same_for_the_same_seed() -> None:
    plain = _sessions(_scenario(None))
    with_images = _sessions(_scenario({}))
    again = _sessions(_scenario({}))
    assert with_images == again
    assert not any(s.images for s in plain)
    for a, b in zip(plain, with_images, strict=True):
        for x, y in zip(a.nodes, b.nodes, strict=True):
            assert y.images or x == y
            y.images = ()
            assert x == y  # (prompts, lengths, waits, clients: all as without the channel)


def test_a_block_is_the_same_whichever_is_asked_first() -> None:
    scenario = _scenario({"count_generator": {"type": "uniform", "min": 0, "max": 2}})
    ordered = _sessions(scenario, BLOCK_SESSIONS + 10)
    generator = SessionGenerator(scenario, TOK)
    assert generator.session(BLOCK_SESSIONS + 3) == ordered[BLOCK_SESSIONS + 3]
    assert generator.session(2) == ordered[2]


def test_roots_of_a_workflow_carry_images_and_tool_calls_none() -> None:
    graph = {
        "type": "branching",
        "num_layers_generator": {"type": "fixed", "value": 3},
        "tool_probability": 0.5,
    }
    for session in _sessions(_scenario({}, graph), 100):
        for node in session.nodes:
            starts = node.history_parent is None and node.kind != "tool"
            assert bool(node.images) == starts, node


@pytest.mark.parametrize(
    ("channels", "path", "message"),
    [
        ("[{type: image}]", "session_generator.channels", "no text channel"),
        (
            "[{type: text}, {type: image}, {type: image}]",
            "session_generator.channels[2].type",
            "a second image channel",
        ),
        (
            "[{type: text}, {type: image, width_generator: {type: fixed, value: 0}}]",
            "session_generator.channels[1].width_generator.value",
            "at least 1 pixel",
        ),
        (
            "[{type: text}, {type: image, height_generator: {type: uniform, min: 5, max: 20000}}]",
            "session_generator.channels[1].height_generator.max",
            "at most 16384",
        ),
    ],
)
def test_the_channels_are_checked_at_their_key(channels: str, path: str, message: str) -> None:
    issue = only_issue(f"session_generator:\n  channels: {channels}\n")
    assert issue.path == path
    assert message in issue.message


def test_images_need_chat_clients_and_no_agent_rounds() -> None:
    text = "client: {type: openai_completions}\nsession_generator:\n"
    text += "  channels: [{type: text}, {type: image}]\n"
    issue = only_issue(text)
    assert issue.path == "session_generator.channels[1].type"
    assert "client is an openai_completions client" in issue.message
    agents = (
        "session_generator:\n  channels: [{type: text}, {type: image}]\n"
        "  session_graph:\n    type: agent_rounds\n"
        "    agents: [{id: a}, {id: b}]\n"
    )
    issue = only_issue(agents)
    assert "agent_rounds graph takes no images" in issue.message
    assert load("session_generator:\n  channels: [{type: text}, {type: image}]\n")
