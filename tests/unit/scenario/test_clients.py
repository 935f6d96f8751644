"""Several clients: clients: beside client:, names, client_selection, simulator models."""

from __future__ import annotations

import functools
import operator
from pathlib import Path

import pytest

from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.simulator import SimulatorConfig

from .helpers import load, only_issue

TWO = """
clients:
  - {name: small, model: m-small, max_in_flight: 2}
  - {name: big, model: m-big, type: openai_completions}
"""


def test_client_alone_is_one_client_named_default() -> None:
    entries = load("client: {model: m}\n").client_entries()
    assert [(name, client.model) for name, client in entries] == [("default", "m")]


def test_clients_keep_their_order_type_and_limits() -> None:
    entries = load(TWO).client_entries()
    assert [name for name, _ in entries] == ["small", "big"]
    assert entries[0][1].type == "openai_chat_completions"
    assert entries[0][1].max_in_flight == 2
    assert entries[1][1].type == "openai_completions"


def test_client_and_clients_together_are_refused_at_the_clients_line() -> None:
    issue = only_issue("client: {model: a}\nclients:\n  - {name: x}\n")
    assert (issue.line, issue.path) == (2, "clients")
    assert "not both" in issue.message


def test_a_name_used_twice_is_refused_at_its_line() -> None:
    issue = only_issue("clients:\n  - {name: x}\n  - {name: x}\n")
    assert (issue.line, issue.path) == (3, "clients[1].name")


def test_a_bad_name_and_a_missing_name_are_refused() -> None:
    assert only_issue("clients:\n  - {name: 'a b'}\n").path == "clients[0].name"
    assert only_issue("clients:\n  - {model: m}\n").path == "clients[0].name"


def test_weights_naming_an_unknown_client_are_refused_at_their_line() -> None:
    text = TWO + (
        "session_generator:\n"
        "  client_selection:\n"
        "    type: weighted\n"
        "    weights: {small: 1, huge: 2}\n"
    )
    issue = only_issue(text)
    assert issue.line == 8
    assert issue.path == "session_generator.client_selection.weights.huge"
    assert "unknown client 'huge'" in issue.message
    assert "'small', 'big'" in issue.message


def _clients(text: str, sessions: int = 4) -> list[list[int]]:
    generator = SessionGenerator(load(text), BuiltinTokenizer())
    return [[node.client for node in generator.session(i).nodes] for i in range(sessions)]


LINEAR3 = """
session_generator:
  session_graph: {type: linear, num_request_generator: {type: fixed, value: 3}}
"""


def test_round_robin_alternates_turns_and_session_starts() -> None:
    assert _clients(TWO + LINEAR3) == [[0, 1, 0], [1, 0, 1], [0, 1, 0], [1, 0, 1]]
    assert _clients(LINEAR3) == [[0, 0, 0]] * 4  # one client: all of them


def test_weighted_selection_is_deterministic_and_follows_the_weights() -> None:
    text = TWO + LINEAR3 + "  client_selection: {type: weighted, weights: {big: 1}}\n"
    assert _clients(text) == [[1, 1, 1]] * 4  # small has no weight
    text = TWO + LINEAR3 + "  client_selection: {type: weighted, weights: {small: 1, big: 3}}\n"
    picks = functools.reduce(operator.iadd, _clients(text, 200), [])
    assert picks == functools.reduce(
        operator.iadd, _clients(text, 200), []
    )  # same seed, same choice
    assert 0.65 < sum(picks) / len(picks) < 0.85  # ~3/4 big


def test_weighted_selection_leaves_lengths_and_content_untouched() -> None:
    plain = SessionGenerator(load(TWO + LINEAR3), BuiltinTokenizer()).session(5)
    text = TWO + LINEAR3 + "  client_selection: {type: weighted, weights: {small: 1, big: 1}}\n"
    weighted = SessionGenerator(load(text), BuiltinTokenizer()).session(5)
    assert [n.prompt for n in plain.nodes] == [n.prompt for n in weighted.nodes]
    assert [n.max_tokens for n in plain.nodes] == [n.max_tokens for n in weighted.nodes]


def test_simulator_models_inherit_the_section_and_a_preset_refills_timing() -> None:
    config = SimulatorConfig.model_validate(
        {"ttft_ms": 3, "models": {"big": {"max_num_seqs": 2}, "slow": {"preset": "realistic"}}}
    )
    assert config.served_models() == ["veeksha-sim", "big", "slow"]
    big = config.for_model("big")
    assert (big.model, big.max_num_seqs, big.ttft_ms, big.models) == ("big", 2, 3.0, {})
    slow = config.for_model("slow")
    assert (slow.timing, slow.decode_step_ms) == ("engine", 6.0)


AGENTS = """
clients: [{name: x}]
session_generator:
  session_graph:
    type: agent_rounds
    agents:
      - {id: a, speak_after_within_round: [%s]}
      - {id: b, client: %s, speak_after_within_round: [%s]}
"""


def test_agent_mistakes_are_refused_at_their_lines() -> None:
    waits_itself = only_issue(AGENTS % ("a", "x", ""))
    assert (waits_itself.line, waits_itself.path) == (
        7,
        "session_generator.session_graph.agents[0].speak_after_within_round[0]",
    )
    assert "waits on itself" in waits_itself.message
    unknown = only_issue(AGENTS % ("c", "x", ""))
    assert "unknown agent 'c'" in unknown.message
    circle = only_issue(AGENTS % ("b", "x", "a"))
    assert circle.line == 7
    assert "a -> b -> a" in circle.message
    client = only_issue(AGENTS % ("", "nope", ""))
    assert (client.line, client.path) == (8, "session_generator.session_graph.agents[1].client")


def test_a_scenario_built_in_code_is_checked_before_a_run(tmp_path: Path) -> None:
    from veeksha.engine.run import run_scenario
    from veeksha.errors import ConfigurationError
    from veeksha.scenario.models import Scenario

    scenario = Scenario.model_validate({"client": {}, "clients": [{"name": "a"}]})
    assert [path for path, _ in scenario.problems()] == [("clients",)]
    with pytest.raises(ConfigurationError, match="not both"):
        run_scenario(scenario, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


def test_a_role_naming_an_unknown_client_is_refused_at_its_line() -> None:
    text = (
        "clients: [{name: x}]\n"
        "session_generator:\n"
        "  session_graph:\n"
        "    type: agent_rounds\n"
        "    role_clients: {moderator: x, judge: nope}\n"
        "    agents: [{id: a}]\n"
    )
    issue = only_issue(text)
    assert (issue.line, issue.path) == (5, "session_generator.session_graph.role_clients.judge")
    assert "unknown client 'nope'" in issue.message


def test_a_later_clients_other_tokenizer_is_its_own() -> None:
    # each client's prompts are sized in its own tokenizer (was: refused, one tokenizer
    # counted a run's prompts, the first client's)
    text = "clients:\n  - {name: a, model: m-a}\n  - {name: b, tokenizer: {type: server}}\n"
    scenario = load(text)
    assert [c.tokenizer.type for _, c in scenario.client_entries()] == ["builtin", "server"]
    assert scenario.tokenizer_sharing() == [0, 1]
    assert scenario.tokenizer_key(1) == "clients[1].tokenizer"


def test_a_trace_replays_later_client_of_another_tokenizer_is_its_own() -> None:
    # each trace row's prompt is built in its own client's tokenizer (was: refused, the rows
    # were counted in the first client's)
    text = (
        "clients:\n  - {name: a, model: m-a}\n  - {name: b, tokenizer: {type: server}}\n"
        "session_generator: {type: trace, trace_file: t.jsonl}\n"
    )
    scenario = load(text)
    assert [c.tokenizer.type for _, c in scenario.client_entries()] == ["builtin", "server"]
    assert scenario.tokenizer_sharing() == [0, 1]


def test_clients_of_one_tokenizer_share_it() -> None:
    text = (
        "clients:\n"
        "  - {name: a}\n"
        "  - {name: b, tokenizer: {type: builtin}}\n"  # (none is builtin: a's)
        "  - {name: c, api_base: http://h:1/v1, model: m, tokenizer: {type: server}}\n"
        "  - {name: d, api_base: http://h:1/v1, model: m, tokenizer: {type: server}}\n"
        "  - {name: e, api_base: http://h:2/v1, model: m, tokenizer: {type: server}}\n"
        "  - {name: f, api_base: http://h:1/v1, model: n, tokenizer: {type: server}}\n"
    )
    # a server tokenizer is its target's: the same config on another target is another one
    assert load(text).tokenizer_sharing() == [0, 0, 2, 2, 4, 5]
    assert load("seed: 1\n").tokenizer_key(0) == "client.tokenizer"


def test_a_later_client_may_repeat_the_first_clients_tokenizer() -> None:
    text = (
        "clients:\n"
        "  - {name: a, tokenizer: {type: server}}\n"
        "  - {name: b, tokenizer: {type: server}}\n"
        "  - {name: c}\n"
    )
    assert [c.tokenizer.type for _, c in load(text).client_entries()] == ["server"] * 2 + [
        "builtin"
    ]
