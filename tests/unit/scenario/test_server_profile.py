"""The ``server_profile`` section: its paths are paths, it is refused with a distributed run,
and it leaves the scenario's hash alone (profiling changes no traffic)."""

from __future__ import annotations

from tests.unit.scenario.helpers import load, only_issue
from veeksha.scenario.loader import scenario_hash


def test_the_section_is_checked() -> None:
    issue = only_issue("server_profile: {enabled: true, start_path: start_profile}")
    assert issue.path == "server_profile.start_path"
    assert "must be a path starting with /" in issue.message
    issue = only_issue("server_profile: {stop_timeout: 0}")
    assert issue.path == "server_profile.stop_timeout"
    distributed = "runtime: {distributed: {backend: ray, shards: 2}}\n"
    issue = only_issue(distributed + "server_profile: {enabled: true}")
    assert issue.path == "server_profile.enabled"
    assert "not with runtime.distributed" in issue.message
    load(distributed + "server_profile: {enabled: false}")


def test_profiling_keeps_the_hash() -> None:
    assert scenario_hash(load("server_profile: {enabled: true}")) == "41a55509ee"
