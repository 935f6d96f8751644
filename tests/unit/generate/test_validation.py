"""Answer checks: regex, JSON, choices; the notes a re-prompt carries; a graph's validation on
every node or a share of them."""

from __future__ import annotations

from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.validation import AnswerCheck
from veeksha.scenario.models import ChoicesValidation, JsonValidation, RegexValidation, Scenario


def test_regex_json_and_choices() -> None:
    regex = AnswerCheck.of(RegexValidation(pattern=r"^(?!INVALID)"))
    assert regex("fine words") is None
    assert "must match ^(?!INVALID)" in (regex("INVALID words") or "")
    as_json = AnswerCheck.of(JsonValidation())
    assert as_json('{"a": [1, 2]}') is None
    assert "not valid JSON" in (as_json("{a: 1") or "")
    choice = AnswerCheck.of(ChoicesValidation(choices=["yes", "no"]))
    assert choice(" yes\n") is None
    assert choice("maybe") == "Your answer must be exactly one of: yes, no. Answer again."


def _linear(**graph: object) -> list[SessionSpec]:
    scenario = Scenario.model_validate(
        {
            "seed": 4,
            "session_generator": {
                "session_graph": {
                    "type": "linear",
                    "num_request_generator": {"type": "fixed", "value": 4},
                    **graph,
                }
            },
        }
    )
    generator = SessionGenerator(scenario, BuiltinTokenizer())
    return [generator.session(i) for i in range(50)]


def _shape(sessions: list[SessionSpec]) -> list[tuple[int, int, float, str]]:
    return [
        (n.prompt_tokens, n.max_tokens, n.wait_after_ready_s, n.prompt)
        for s in sessions
        for n in s.nodes
    ]


def test_a_graph_validation_checks_every_node_or_a_share() -> None:
    regex = {"type": "regex", "pattern": "^(?!INVALID)"}
    plain = _linear()
    every = _linear(validation=regex, max_reprompts=3)
    share = _linear(validation=regex, validation_probability=0.25)
    assert all(n.validation is None for s in plain for n in s.nodes)
    nodes = [n for s in every for n in s.nodes]
    assert all(n.validation is not None and n.max_reprompts == 3 for n in nodes)
    assert nodes[0].validation is not None
    assert nodes[0].validation("INVALID no") is not None
    checked = [n.validation is not None for s in share for n in s.nodes]
    assert 0.15 < sum(checked) / len(checked) < 0.35  # 200 nodes, p = 0.25
    assert all(n.max_reprompts == 2 for s in share for n in s.nodes if n.validation)
    # the draw never reshuffles lengths, think times or prompts, and it is seeded
    assert _shape(every) == _shape(plain) == _shape(share)
    again = _linear(validation=regex, validation_probability=0.25)
    assert [n.validation is not None for s in again for n in s.nodes] == checked


def test_tool_nodes_of_a_branching_graph_are_never_checked() -> None:
    scenario = Scenario.model_validate(
        {
            "session_generator": {
                "session_graph": {
                    "type": "branching",
                    "tool_probability": 0.5,
                    "validation": {"type": "json"},
                }
            }
        }
    )
    generator = SessionGenerator(scenario, BuiltinTokenizer())
    nodes = [n for i in range(30) for n in generator.session(i).nodes]
    assert {n.kind for n in nodes} == {"llm", "tool"}
    assert all((n.validation is None) == (n.kind == "tool") for n in nodes)
