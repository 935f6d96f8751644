"""The scenario's ``abandonment``: which requests the seed abandons, and after how long, drawn per
session from the session's id (so neither the order sessions are made in nor any other draw
moves them); tool calls never; the section's rules; a scenario without it keeps its hash."""

from __future__ import annotations

import dataclasses

from tests.unit.scenario.helpers import load, only_issue
from veeksha.generate.abandonment import Abandoner
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.loader import scenario_hash

CHATS = """
seed: 4
session_generator:
  session_graph: {type: linear, num_request_generator: {type: fixed, value: 4}}
abandonment: {probability: 0.25, after_generator: {type: poisson, arrival_rate: 5}}
"""


def _sessions(text: str, ids: range) -> list[SessionSpec]:
    scenario = load(text)
    make = SessionGenerator(scenario, BuiltinTokenizer()).session
    abandon = Abandoner(scenario.abandonment, scenario.seed)
    return [abandon(make(i)) for i in ids]


def _marks(sessions: list[SessionSpec]) -> list[list[float | None]]:
    return [[node.abandon_after_s for node in s.nodes] for s in sessions]


def test_the_seed_abandons_a_share_of_requests_after_drawn_delays() -> None:
    sessions = _sessions(CHATS, range(500))
    delays = [d for marks in _marks(sessions) for d in marks if d is not None]
    assert 0.21 < len(delays) / 2000 < 0.29
    assert 0.17 < sum(delays) / len(delays) < 0.23  # (mean 1/5 s)
    assert len(set(delays)) == len(delays)
    # the same seed: the same marks, whatever the order the sessions are made in
    backwards = _sessions(CHATS, range(499, -1, -1))[::-1]
    assert _marks(backwards) == _marks(sessions)
    assert _marks(_sessions(CHATS.replace("seed: 4", "seed: 5"), range(500))) != _marks(sessions)


def test_marking_changes_no_other_draw_and_leaves_the_source_alone() -> None:
    scenario = load(CHATS)
    make = SessionGenerator(scenario, BuiltinTokenizer()).session
    plain = [make(i) for i in range(50)]
    before = [dataclasses.astuple(node) for s in plain for node in s.nodes]
    marked = [Abandoner(scenario.abandonment, scenario.seed)(s) for s in plain]
    assert [dataclasses.astuple(node) for s in plain for node in s.nodes] == before
    unmarked = [dataclasses.replace(n, abandon_after_s=None) for s in marked for n in s.nodes]
    assert [dataclasses.astuple(node) for node in unmarked] == before
    assert any(s is not p for s, p in zip(marked, plain, strict=True))
    assert all(s is p for s, p in zip(marked, plain, strict=True) if s.nodes == p.nodes)


def test_tool_calls_are_never_abandoned() -> None:
    scenario = load("abandonment: {probability: 1.0, after_generator: {type: fixed, interval: 0}}")
    nodes = [
        NodeSpec(0, (), None, 0.0, "q", 1, 4),
        NodeSpec(1, (0,), 0, 0.0, "result", 1, 0, kind="tool", latency_s=0.1),
        NodeSpec(2, (1,), 1, 0.0, "q", 1, 4),
    ]
    marked = Abandoner(scenario.abandonment, scenario.seed)(SessionSpec(0, nodes)).nodes
    assert [node.abandon_after_s for node in marked] == [0.0, None, 0.0]


def test_the_section_is_checked_and_its_absence_keeps_the_hash() -> None:
    issue = only_issue("abandonment: {probability: 1.5}")
    assert (issue.line, issue.path) == (1, "abandonment.probability")
    assert issue.message == "must be less than or equal to 1 (got 1.5)"
    issue = only_issue("abandonment: {after_generator: {type: fixed, interval: -1}}")
    assert issue.path == "abandonment.after_generator.interval"
    # the default scenario's hash from before the section existed
    assert scenario_hash(load("seed: 42")) == "41a55509ee"
    assert scenario_hash(load("abandonment: {probability: 0}")) == "41a55509ee"
    assert scenario_hash(load("abandonment: {probability: 0.1}")) != "41a55509ee"
