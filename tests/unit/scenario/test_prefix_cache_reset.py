"""The ``prefix_cache_reset`` section: its API is one of the servers' known calls, and a
scenario without it (or with it off) hashes as before the section existed; on, it is another
measurement (a cold cache), so another hash."""

from __future__ import annotations

from tests.unit.scenario.helpers import load, only_issue
from veeksha.scenario.loader import scenario_hash


def test_the_section_is_checked() -> None:
    issue = only_issue("prefix_cache_reset: {enabled: true, api: tgi}")
    assert issue.path == "prefix_cache_reset.api"
    assert "'auto', 'vllm', 'sglang' or 'llama_cpp'" in issue.message
    issue = only_issue("prefix_cache_reset: {enabled: true, path: /x}")
    assert issue.path == "prefix_cache_reset.path"
    assert load("prefix_cache_reset: {enabled: true}").prefix_cache_reset.api == "auto"


def test_off_keeps_the_hash_and_on_changes_it() -> None:
    plain = scenario_hash(load("seed: 3"))
    assert scenario_hash(load("seed: 3\nprefix_cache_reset: {enabled: false, api: vllm}")) == plain
    assert scenario_hash(load("seed: 3\nprefix_cache_reset: {enabled: true}")) != plain
    simulator = "seed: 3\nsimulator: {cache_reset_api: vllm}"
    assert scenario_hash(load(simulator)) == plain
    assert scenario_hash(load("seed: 3\nsimulator: {cache_reset_api: none}")) != plain
