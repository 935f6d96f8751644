"""Real scenario files of the public veeksha project (project-vajra/veeksha) load unchanged.

data/upstream_files/ holds verbatim copies (each names its source in a header comment) of every
text-benchmark sample in upstream's current configuration language: its docs' quick start,
recipes and configuration sections, and its synthetic-concurrency named benchmark. The files
under parts/ are fragments included by main_config.yaml, not scenarios.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from veeksha.errors import ScenarioError
from veeksha.scenario.loader import load_scenario
from veeksha.scenario.models import Scenario

from .helpers import DATA

FILES = sorted((DATA / "upstream_files").glob("*.yaml"))


def _load(name: str) -> Scenario:
    return load_scenario(DATA / "upstream_files" / name)


def test_the_fixtures_are_there() -> None:
    assert len(FILES) == 8


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_upstream_file_loads_unchanged(path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_scenario(path)
    # The one warning allowed: upstream's thread-count keys, accepted and ignored.
    assert all("is ignored: veeksha uses worker processes" in str(w.message) for w in caught)


def test_multi_turn_recipe_keeps_its_meaning() -> None:
    s = _load("multi_turn.yaml")
    graph = s.session_generator.session_graph  # type: ignore[union-attr]
    assert graph.type == "linear"
    assert graph.inherit_history
    assert (graph.num_request_generator.min, graph.num_request_generator.max) == (2, 4)  # type: ignore[union-attr]
    assert graph.request_wait_generator.arrival_rate == 5  # type: ignore[union-attr]
    channel = s.session_generator.channels[0]  # type: ignore[union-attr]
    assert (channel.shared_prefix_ratio, channel.shared_prefix_probability) == (0.2, 0.5)
    assert s.runtime.max_sessions == -1
    assert s.runtime.benchmark_timeout == 60
    slo = s.evaluators[0].slos[0]
    assert (slo.metric, slo.percentile, slo.value) == ("ttfc", 0.99, 0.5)


def test_agentic_recipe_keeps_skip_connections() -> None:
    graph = _load("agentic.yaml").session_generator.session_graph  # type: ignore[union-attr]
    assert graph.type == "branching"
    assert graph.single_root
    assert graph.connection_dist_generator.max == 2  # type: ignore[union-attr]
    assert graph.request_wait_generator.arrival_rate == 3  # type: ignore[union-attr]


def test_named_benchmark_base_keeps_its_client_and_runtime() -> None:
    s = _load("synthetic_concurrency_base.yaml")
    assert s.traffic_scheduler.type == "concurrent"
    assert s.traffic_scheduler.target_concurrent_sessions == 1  # type: ignore[union-attr]
    assert not s.traffic_scheduler.cancel_session_on_failure
    assert s.client.max_tokens_param == "max_tokens"  # type: ignore[union-attr]
    assert s.runtime.pregenerate_sessions
    assert s.runtime.max_sessions == 8


def test_split_configuration_includes_its_parts() -> None:
    s = _load("main_config.yaml")
    assert s.client.model == "meta-llama/Llama-3-8B-Instruct"  # type: ignore[union-attr]
    assert s.traffic_scheduler.interval_generator.arrival_rate == 5.0  # type: ignore[union-attr]


def test_an_evaluator_without_slos_judges_none() -> None:
    # Upstream fills in two SLOs (P99 TTFC 0.5 s, P90 TBC 0.05 s) when slos is left out; veeksha
    # judges only the SLOs written (docs/scenario.md, "Differences from the public veeksha").
    assert _load("throughput.yaml").evaluators[0].slos == []


def test_a_file_of_upstreams_earlier_language_is_told_so_once(tmp_path: Path) -> None:
    path = tmp_path / "old.yml"
    path.write_text(
        "timeout: 60\n"
        "max_completed_requests: 5\n"
        "client_config:\n"
        "  model: m\n"
        "  num_clients: 2\n"
        "request_generator_config:\n"
        "  type: synthetic\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    (issue,) = caught.value.issues
    assert (issue.file, issue.line) == (str(path), 3)
    assert str(issue).startswith(f"{path}:3:1: client_config, request_generator_config: ")
    assert "earlier configuration language" in issue.message
    assert "client_config → client" in issue.message
