"""agent_rounds graphs: layout, transcripts, the messages an agent sends; tool nodes."""

from __future__ import annotations

from veeksha.generate.agent_rounds import agent_rounds_layout
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.loader import load_scenario_text
from veeksha.scenario.models import AgentRoundsGraph, Scenario
from veeksha.schedule.session_state import SessionState

DEBATE = """
session_generator:
  session_graph:
    type: agent_rounds
    rounds: 2
    agents:
      - {id: mod, role: moderator, speak_after_within_round: [search]}
      - {id: a}
      - {id: b}
      - {id: search, kind: tool, speak_after_within_round: [a, b]}
  channels: [{body_length_generator: {type: fixed, value: 3}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 2}}}
"""


def scenario(text: str = DEBATE) -> Scenario:
    return load_scenario_text(text, "s.yaml")


def test_layout_orders_speakers_and_links_rounds() -> None:
    graph = scenario().session_generator.session_graph  # type: ignore[union-attr]
    assert isinstance(graph, AgentRoundsGraph)
    layout = agent_rounds_layout(graph)
    # speaking order within a round: a, b, search (after a and b), mod (after search)
    assert [(n.agent, n.round) for n in layout] == [
        (1, 0),
        (2, 0),
        (3, 0),
        (0, 0),
        (1, 1),
        (2, 1),
        (3, 1),
        (0, 1),
    ]
    assert [n.parents for n in layout] == [
        (),
        (),
        (0, 1),
        (2,),
        (0, 1, 2, 3),
        (0, 1, 2, 3),
        (0, 1, 2, 3, 4, 5),
        (0, 1, 2, 3, 6),
    ]
    # the moderator sees all of round 0, then a, b and the tool of round 1 (transitively)
    assert layout[7].transcript == (0, 1, 2, 3, 4, 5, 6)
    assert layout[4].transcript == (0, 1, 2, 3)  # a in round 1 sees round 0 only


def test_an_agent_sends_the_merged_transcript_exactly() -> None:
    spec = SessionGenerator(scenario(), BuiltinTokenizer()).session(0)
    nodes = spec.nodes
    assert [n.kind for n in nodes[:4]] == ["llm", "llm", "tool", "llm"]
    state = SessionState(spec, 0, cancel_on_failure=True)
    state.start()
    answers = {0: "a0 says", 1: "b0 says", 2: nodes[2].prompt, 3: "mod0 says"}
    for node_id in range(4):
        state.mark_dispatched(node_id)
        state.complete(node_id, 10, True, answer=answers[node_id], answer_tokens=2)
    for node_id in (4, 5):
        state.mark_dispatched(node_id)
        state.complete(node_id, 20, True, answer=f"round1 {node_id}", answer_tokens=2)
    state.mark_dispatched(6)
    state.complete(6, 30, True, answer=nodes[6].prompt, answer_tokens=3)
    messages, tokens = state.outgoing(7)
    assert messages == [
        ("user", "a: a0 says"),
        ("user", "b: b0 says"),
        ("user", f"search: {nodes[2].prompt}"),
        ("assistant", "mod0 says"),
        ("user", "a: round1 4"),
        ("user", "b: round1 5"),
        ("user", f"search: {nodes[6].prompt}"),
        ("user", nodes[7].prompt),
    ]
    assert tokens == (2 + 1) * 3 + 2 + (2 + 1) * 2 + (3 + 1)  # names: one token each
    # a's round-1 turn: its own earlier answer as assistant, the others' as user
    first, _ = state.outgoing(4)
    assert first[0] == ("assistant", "a0 says")
    assert first[1] == ("user", "b: b0 says")


def test_a_tool_result_has_its_length_and_the_agents_their_clients() -> None:
    text = "clients: [{name: x}, {name: y}]\n" + DEBATE.replace(
        "{id: a}", "{id: a, client: y}"
    ).replace("kind: tool,", "kind: tool, result_length_generator: {type: fixed, value: 7},")
    spec = SessionGenerator(scenario(text), BuiltinTokenizer()).session(3)
    tool = spec.nodes[2]
    assert (tool.agent, tool.kind, tool.max_tokens, len(tool.prompt.split())) == (
        "search",
        "tool",
        7,
        7,
    )
    assert [n.client for n in spec.nodes[:4]] == [1, 0, 0, 0]


def test_branching_graphs_mix_tool_calls_in_deterministically() -> None:
    text = """
session_generator:
  session_graph:
    type: branching
    tool_probability: 0.5
    tool_latency_generator: {type: fixed, interval: 0.25}
"""
    gen = SessionGenerator(scenario(text), BuiltinTokenizer())
    nodes = [n for i in range(200) for n in gen.session(i).nodes]
    tools = [n for n in nodes if n.kind == "tool"]
    assert all(n.parents for n in tools)  # never a root
    non_roots = sum(1 for n in nodes if n.parents)
    assert 0.4 < len(tools) / non_roots < 0.6
    assert {n.latency_s for n in tools} == {0.25}
    again = SessionGenerator(scenario(text), BuiltinTokenizer())
    assert [n.kind for n in again.session(7).nodes] == [n.kind for n in gen.session(7).nodes]


def test_an_agent_without_a_client_takes_its_roles_client() -> None:
    text = "clients: [{name: x}, {name: y}, {name: z}]\n" + DEBATE.replace(
        "rounds: 2\n", "rounds: 2\n    role_clients: {moderator: z, participant: y}\n"
    ).replace("{id: a}", "{id: a, client: x}")
    spec = SessionGenerator(scenario(text), BuiltinTokenizer()).session(0)
    by_agent = {n.agent: n.client for n in spec.nodes}
    # mod: its role's (z); a: its own (x); b: the participant role's (y)
    assert (by_agent["mod"], by_agent["a"], by_agent["b"]) == (2, 0, 1)
