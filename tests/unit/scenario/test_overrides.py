"""Command-line overrides: --set a.b=V and --a.b V."""

from __future__ import annotations

import pytest

from veeksha.errors import ScenarioError
from veeksha.scenario.loader import extra_args_to_overrides
from veeksha.scenario.models import ConcurrentScheduler, HfTokenizer, LinearGraph

from .helpers import issues_of, load, only_issue

FILE = """\
traffic_scheduler:
  type: rate
  interval_generator: {type: poisson, arrival_rate: 5}
  cancel_session_on_failure: false
"""


def test_set_is_typed_by_the_model() -> None:
    s = load(
        FILE,
        (
            "traffic_scheduler.interval_generator.arrival_rate=20",
            "seed=7",
            "client.model=123",
            "trace_recorder.enabled=false",
            "runtime.cpu_affinity=[0, 1]",
        ),
    )
    assert s.traffic_scheduler.interval_generator.arrival_rate == 20  # type: ignore[union-attr]
    assert s.seed == 7
    assert s.client.model == "123"
    assert s.trace_recorder.enabled is False
    assert s.runtime.cpu_affinity == [0, 1]


def test_later_overrides_win_and_values_may_be_mappings() -> None:
    s = load(FILE, ("seed=1", "seed=2", "session_generator.session_graph={type: linear}"))
    assert s.seed == 2
    assert isinstance(s.session_generator.session_graph, LinearGraph)  # type: ignore[union-attr]


def test_changing_type_keeps_only_the_keys_the_new_type_accepts() -> None:
    s = load(
        FILE,
        ("traffic_scheduler.type=concurrent", "traffic_scheduler.target_concurrent_sessions=9"),
    )
    assert isinstance(s.traffic_scheduler, ConcurrentScheduler)
    assert s.traffic_scheduler.target_concurrent_sessions == 9
    assert s.traffic_scheduler.cancel_session_on_failure is False  # kept: both types have it
    # the other order works too
    s = load(FILE, ("client.tokenizer.path=/tok", "client.tokenizer.type=hf"))
    assert isinstance(s.client.tokenizer, HfTokenizer)


def test_paths_through_absent_sections_start_from_defaults() -> None:
    s = load("seed: 1", ("evaluators.0.stream_metrics=false", "evaluators[0].slos=[]"))
    assert s.evaluators[0].stream_metrics is False
    s = load("seed: 1", ("session_generator.session_graph.inherit_history=false",))
    assert s.session_generator.session_graph.inherit_history is False  # type: ignore[union-attr]


def test_override_errors_are_reported_with_their_source_alongside_the_files() -> None:
    issues = issues_of(
        "seed: -1\n",
        (
            "traffic_scheduler.interval_generator.arrival_rate=-2",
            "traffic_scheduler.interval_generator.arival_rate=3",
            "no-equals-sign",
            "evaluators.4.stream_metrics=true",
        ),
    )
    assert [str(i) for i in issues] == [
        "s.yaml:1:1: seed: must be greater than or equal to 0 (got -1)",
        "<--set>: bad override 'no-equals-sign': expected KEY.PATH=VALUE",
        "<--set>: evaluators[4]: no item 4 in a list of 1",
        "<--set>: traffic_scheduler.interval_generator.arrival_rate: "
        "must be greater than 0 (got -2)",
        "<--set>: traffic_scheduler.interval_generator.arival_rate: unknown key; "
        "did you mean 'arrival_rate'?",
    ]


def test_cannot_descend_into_a_scalar() -> None:
    issue = only_issue("seed: 1", ("seed.x=1",))
    assert issue.file == "<--set>"
    assert "not a mapping" in issue.message


def test_veeksha_style_arguments() -> None:
    args = [
        "--traffic_scheduler.interval_generator.arrival_rate",
        "20",
        "--seed=3",
        "--runtime.benchmark_timeout",
        "-1",
    ]
    overrides = extra_args_to_overrides(args)
    assert overrides == [
        "traffic_scheduler.interval_generator.arrival_rate=20",
        "seed=3",
        "runtime.benchmark_timeout=-1",
    ]
    s = load(FILE, tuple(overrides))
    assert s.traffic_scheduler.interval_generator.arrival_rate == 20  # type: ignore[union-attr]
    assert s.runtime.benchmark_timeout == -1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["stray"], "unexpected argument 'stray'"),
        (["--seed"], "--seed needs a value"),
        (["--seed", "--runtime.max_sessions", "3"], "--seed needs a value"),
    ],
)
def test_bad_veeksha_style_arguments(args: list[str], fragment: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        extra_args_to_overrides(args)
    assert caught.value.issues[0].file == "<--set>"
    assert fragment in str(caught.value)
