"""The ``normal`` and ``choice`` length generators as a scenario states them: their checks,
each at its key, and where an output length must be at least 1."""

from __future__ import annotations

import pytest

from tests.unit.scenario.helpers import load, only_issue

_OUTPUT = "session_generator:\n  output_spec: {{text: {{output_length_generator: {gen}}}}}\n"
_BODY = "session_generator:\n  channels: [{{type: text, body_length_generator: {gen}}}]\n"


def test_both_load_with_their_defaults_and_aliases() -> None:
    spec = load(_BODY.format(gen="{type: normal, mean: 300, stddev: 40, max: 600}"))
    body = spec.session_generator.channels[0].body_length_generator
    assert (body.type, body.mean, body.std, body.min, body.max) == ("normal", 300, 40, 1, 600)
    spec = load(_OUTPUT.format(gen="{type: choice, values: [64, 1024], weights: [0.9, 0.1]}"))
    out = spec.session_generator.output_spec.text.output_length_generator
    assert (out.values, out.weights) == ([64, 1024], [0.9, 0.1])


@pytest.mark.parametrize(
    ("gen", "path", "message"),
    [
        ("{type: normal, mean: 300}", "std", "missing required key"),
        ("{type: normal, mean: 300, std: 9, min: 50, max: 40}", "min", "must be <= max"),
        ("{type: normal, mean: -1, std: 9}", "mean", "greater than or equal to 0"),
        ("{type: choice, values: []}", "values", "must not be empty"),
        ("{type: choice, values: [1, 2], weights: [1]}", "weights", "one weight per value"),
        ("{type: choice, values: [1, 2], weights: [0, 0]}", "weights", "more than 0"),
        ("{type: choice, values: [1, 2], weights: [1, -1]}", "weights[1]", "greater than or"),
    ],
)
def test_bad_values_are_named_at_their_key(gen: str, path: str, message: str) -> None:
    issue = only_issue(_BODY.format(gen=gen))
    prefix = "session_generator.channels[0].body_length_generator"
    assert issue.path == f"{prefix}.{path}", issue
    assert message in issue.message, issue


def test_an_output_length_that_can_be_0_is_refused_unless_never_drawn() -> None:
    issue = only_issue(_OUTPUT.format(gen="{type: choice, values: [0, 8]}"))
    assert issue.path.endswith("output_length_generator.values[0]"), issue
    assert "must be at least 1" in issue.message
    issue = only_issue(_OUTPUT.format(gen="{type: normal, mean: 8, std: 2, min: 0}"))
    assert issue.path.endswith("output_length_generator.min"), issue
    ok = load(_OUTPUT.format(gen="{type: choice, values: [0, 8], weights: [0, 1]}"))
    assert ok.session_generator.output_spec.text.output_length_generator.values == [0, 8]


_PAIRS = "session_generator:\n  length_pairs: [{input: 10, output: 2}, {input: 90, output: 9}]\n"


def test_length_pairs_are_checked_and_draw_both_lengths() -> None:
    from veeksha.scenario.loader import scenario_hash

    pairs = load(_PAIRS).session_generator.length_pairs
    assert [(p.input, p.output, p.weight) for p in pairs] == [(10, 2, 1.0), (90, 9, 1.0)]
    issue = only_issue(_PAIRS.replace("9}]", "9, weight: 0}]").replace("2}", "2, weight: 0}"))
    assert (issue.path, issue.message) == (
        "session_generator.length_pairs",
        "at least one pair needs a weight above 0",
    )
    issue = only_issue(_PAIRS.replace("output: 2", "output: 0"))
    assert issue.path == "session_generator.length_pairs[0].output"
    body = _PAIRS + "  channels: [{type: text, body_length_generator: {type: fixed, value: 5}}]\n"
    issue = only_issue(body)
    assert issue.path == "session_generator.channels[0].body_length_generator"
    assert "length_pairs draws it" in issue.message
    out = _PAIRS + "  output_spec: {text: {output_length_generator: {type: fixed, value: 5}}}\n"
    issue = only_issue(out)
    assert issue.path == "session_generator.output_spec.text.output_length_generator"
    agents = _PAIRS + "  session_graph: {type: agent_rounds, agents: [{id: a}]}\n"
    assert only_issue(agents).path == "session_generator.length_pairs"
    plain = scenario_hash(load("seed: 3"))
    assert scenario_hash(load("seed: 3\nsession_generator: {length_pairs: null}")) == plain
    assert scenario_hash(load("seed: 3\n" + _PAIRS)) != plain
