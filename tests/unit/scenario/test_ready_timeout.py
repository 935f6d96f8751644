"""``client.ready_timeout`` (how long to wait for a server that is starting) and the
simulator's ``loading_s`` (the 503s of a server that loads): both checked, and neither moves the
scenario's hash at its default; how long a run waits for its server measures nothing, so any
value keeps it."""

from __future__ import annotations

from tests.unit.scenario.helpers import load, only_issue
from veeksha.scenario.loader import scenario_hash


def test_the_keys_are_checked() -> None:
    issue = only_issue("client: {ready_timeout: -1}")
    assert issue.path == "client.ready_timeout"
    assert "greater than or equal to 0" in issue.message
    issue = only_issue("simulator: {loading_s: -2}")
    assert issue.path == "simulator.loading_s"
    assert load("client: {ready_timeout: 600}").client.ready_timeout == 600
    assert load("seed: 1").client.ready_timeout == 0


def test_the_wait_never_moves_the_hash_and_loading_does_only_when_set() -> None:
    plain = scenario_hash(load("seed: 3"))
    assert scenario_hash(load("seed: 3\nclient: {ready_timeout: 600}")) == plain
    many = "seed: 3\nclients: [{name: a, ready_timeout: 60}, {name: b}]"
    without = "seed: 3\nclients: [{name: a}, {name: b}]"
    assert scenario_hash(load(many)) == scenario_hash(load(without))
    assert scenario_hash(load("seed: 3\nsimulator: {loading_s: 0}")) == plain
    assert scenario_hash(load("seed: 3\nsimulator: {loading_s: 5}")) != plain
