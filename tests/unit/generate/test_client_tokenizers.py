"""Each client's prompts sized in its own tokenizer (``clients:`` with different tokenizers):
exact per client, deterministic per seed, and one tokenizer's prompts unchanged to the byte."""

from __future__ import annotations

import hashlib

from tests.unit.generate.other_words import OtherWords
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.tokenizer import BuiltinTokenizer, TokenizerLike
from veeksha.scenario.loader import load_scenario_text
from veeksha.scenario.models import Scenario

TWO = """
seed: 7
clients:
  - {name: a, model: m-a}
  - {name: b, model: m-b}
session_generator:
  client_selection: {type: weighted, weights: {a: 1, b: 2}}
  session_graph:
    type: linear
    num_request_generator: {type: uniform, min: 1, max: 4}
  channels:
    - body_length_generator: {type: uniform, min: 1, max: 300}
      shared_prefix_ratio: 0.5
      shared_prefix_probability: 0.5
"""

# sha256 of sessions 0-299's (client, target, shared prefix, prompt), as made before clients had
# tokenizers of their own (main at d0c85c6): one tokenizer's prompts must not change a byte
GOLDEN_TWO_CLIENTS = "f42177379eaa41426548011dccadb21527c2c72d5e7f1c228aa90b386d722bf5"
GOLDEN_ONE_CLIENT = "5d636247c9777a4992131da13e6f53bdbd95d498e1b1ca500b57396a66da2d44"


def _digest(generator: SessionGenerator, sessions: int = 300) -> str:
    h = hashlib.sha256()
    for i in range(sessions):
        for node in generator.session(i).nodes:
            h.update(
                f"{node.client}|{node.prompt_tokens}|{node.shared_prefix_tokens}|{node.prompt}\n".encode()
            )
    return h.hexdigest()


def _scenario(text: str) -> Scenario:
    return load_scenario_text(text, "s.yaml")


def test_one_tokenizers_prompts_are_unchanged_to_the_byte() -> None:
    builtin = BuiltinTokenizer()
    one = SessionGenerator(_scenario("seed: 7\n"), builtin)
    assert _digest(one) == GOLDEN_ONE_CLIENT
    # two clients of the one (shared) tokenizer: as when it was the run's only one
    assert _digest(SessionGenerator(_scenario(TWO), builtin)) == GOLDEN_TWO_CLIENTS
    shared = SessionGenerator(_scenario(TWO), builtin, [builtin, builtin])
    assert _digest(shared) == GOLDEN_TWO_CLIENTS


def _words(text: str) -> set[str]:
    return set(text.split())


def test_each_nodes_prompt_is_sized_in_its_clients_tokenizer() -> None:
    builtin, other = BuiltinTokenizer(), OtherWords()
    tokenizers: list[TokenizerLike] = [builtin, other]
    generator = SessionGenerator(_scenario(TWO), builtin, tokenizers)
    others = set(other.vocabulary.words)
    seen = {0: 0, 1: 0}
    for i in range(600):  # (past a block: 256 sessions)
        for node in generator.session(i).nodes:
            seen[node.client] += 1
            words = _words(node.prompt)
            # exactly its target in its client's tokens, and only its client's words
            assert tokenizers[node.client].count(node.prompt) == node.prompt_tokens
            if node.client == 1:
                assert words <= others, node
            else:
                assert not words & others, node
    assert seen[0] > 100
    assert seen[1] > 2 * seen[0] * 0.8  # (weights 1:2)


def test_per_client_sizing_is_deterministic_and_keeps_clients_lengths_and_builtin_prompts() -> None:
    builtin = BuiltinTokenizer()
    mixed = SessionGenerator(_scenario(TWO), builtin, [builtin, OtherWords()])
    fresh: list[TokenizerLike] = [BuiltinTokenizer(), OtherWords()]
    again = SessionGenerator(_scenario(TWO), BuiltinTokenizer(), fresh)
    assert _digest(mixed) == _digest(again)
    plain = SessionGenerator(_scenario(TWO), builtin)
    # random access: a later block first, the same sessions
    assert mixed.session(555) == SessionGenerator(
        _scenario(TWO), builtin, [builtin, OtherWords()]
    ).session(555)
    for i in range(300):
        ours, before = mixed.session(i).nodes, plain.session(i).nodes
        # the clients, lengths and outputs are what they were: only the words differ
        assert [(n.client, n.prompt_tokens, n.max_tokens) for n in ours] == [
            (n.client, n.prompt_tokens, n.max_tokens) for n in before
        ]
        # a builtin client's prompt is the one it had with one tokenizer (its own draws)
        for node, old in zip(ours, before, strict=True):
            if node.client == 0:
                assert node.prompt == old.prompt


def test_round_robin_clients_alternate_tokenizers_within_a_conversation() -> None:
    text = TWO.replace("{type: weighted, weights: {a: 1, b: 2}}", "{type: round_robin}")
    other = OtherWords()
    generator = SessionGenerator(_scenario(text), BuiltinTokenizer(), [BuiltinTokenizer(), other])
    for i in range(50):
        for j, node in enumerate(generator.session(i).nodes):
            assert node.client == (i + j) % 2
            assert (_words(node.prompt) <= set(other.vocabulary.words)) == (node.client == 1)


AGENTS = """
seed: 3
clients:
  - {name: planner, model: m-p}
  - {name: coder, model: m-c}
session_generator:
  session_graph:
    type: agent_rounds
    rounds: 2
    role_clients: {coder: coder}
    agents:
      - {id: plan, role: planner}
      - {id: code, role: coder, speak_after_within_round: [plan]}
  channels: [{body_length_generator: {type: uniform, min: 5, max: 60}}]
"""


def test_an_agents_prompts_are_in_its_clients_tokenizer() -> None:
    other = OtherWords()
    generator = SessionGenerator(_scenario(AGENTS), BuiltinTokenizer(), [BuiltinTokenizer(), other])
    for i in range(20):
        for node in generator.session(i).nodes:
            assert node.client == (1 if node.agent == "code" else 0)
            assert (_words(node.prompt) <= set(other.vocabulary.words)) == (node.client == 1)
            assert len(node.prompt.split()) == node.prompt_tokens
