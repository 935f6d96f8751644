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
        "--set no-equals-sign: expected KEY.PATH=VALUE",
        "--set evaluators.4.stream_metrics=true: evaluators[4]: no item 4 in a list of 1",
        "--set traffic_scheduler.interval_generator.arrival_rate=-2: "
        "traffic_scheduler.interval_generator.arrival_rate: must be greater than 0 (got -2)",
        "--set traffic_scheduler.interval_generator.arival_rate=3: "
        "traffic_scheduler.interval_generator.arival_rate: unknown key; "
        "did you mean 'arrival_rate'?",
    ]


def test_cannot_descend_into_a_scalar() -> None:
    issue = only_issue("seed: 1", ("seed.x=1",))
    assert issue.file == "--set seed.x=1"
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


# a file whose every key sits on its own line, below its section's line
LINES = """\
seed: 3
runtime:
  benchmark_timeout: 30
  max_sessions: 5
session_generator:
  type: synthetic
  output_spec:
    text:
      output_length_generator:
        type: uniform
        min: 4
        max: 9
"""


@pytest.mark.parametrize(
    ("override", "path", "fragment"),
    [
        # in the file with another value: a range check of the key's own (field)
        ("runtime.max_sessions=-3", "runtime.max_sessions", "greater than or equal to -1"),
        # in the file: the 0 refused (once by a check of the whole section)
        ("runtime.max_sessions=0", "runtime.max_sessions", "at least 1, or -1 for no limit"),
        # in the file; refused by a check between two keys, the other one the file's
        (
            "session_generator.output_spec.text.output_length_generator.max=2",
            "session_generator.output_spec.text.output_length_generator.min",
            "must be <= max (got min=4, max=2)",
        ),
        # absent from the file: once refused at the file's first line (seed:)
        ("client.api_base=http://127.0.0.1:8000/v1", "client.model", "required when"),
        ("runtime.warmup_sessions=-1", "runtime.warmup_sessions", "greater than or equal to 0"),
        ("runtime.pregenerate_sessions=true", "runtime.pregenerate_sessions", None),
        # a section the override made (no ramp in the file): its missing key is the override's
        (
            "traffic_scheduler.ramp.end_rate=24",
            "traffic_scheduler.ramp.duration",
            "missing required key",
        ),
    ],
)
def test_a_bad_value_from_set_names_the_override_never_a_line_of_the_file(
    override: str, path: str, fragment: str | None
) -> None:
    overrides = (override, "runtime.max_sessions=-1") if fragment is None else (override,)
    issue = only_issue(LINES, overrides)
    assert (issue.file, issue.line, issue.column) == (f"--set {override}", None, None)
    assert issue.path == path
    assert str(issue).startswith(f"--set {override}: {path}: ")
    assert fragment is None or fragment in issue.message


def test_the_file_keeps_its_lines_beside_an_override_and_the_override_its_name() -> None:
    text = LINES.replace("min: 4", "min: 10")  # the file's own mistake
    issues = issues_of(text, ("runtime.max_sessions=0",))
    assert [str(i) for i in issues] == [
        "s.yaml:11:9: session_generator.output_spec.text.output_length_generator.min: "
        "must be <= max (got min=10, max=9)",
        "--set runtime.max_sessions=0: runtime.max_sessions: must be at least 1, or -1 for no "
        "limit (got 0)",
    ]


def test_the_named_override_hides_an_api_key_and_shortens_a_long_value() -> None:
    secret = "sk-0123456789"
    issue = only_issue("seed: 1", (f"client={{api_key: {secret}, api_base: nourl, model: m}}",))
    assert issue.file == "--set client=***"
    assert issue.path == "client.api_base"
    assert secret not in str(issue)
    long = "x" * 100
    issue = only_issue("seed: 1", (f"runtime.num_workers={long}",))
    assert issue.file == f"--set runtime.num_workers={'x' * 57}..."
