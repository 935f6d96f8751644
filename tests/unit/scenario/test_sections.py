"""Valid and invalid forms of each section of the scenario language."""

from __future__ import annotations

import pytest

from veeksha.scenario.models import (
    BranchingGraph,
    ChatCompletionsClient,
    CompletionsClient,
    ConcurrentScheduler,
    FixedStairLength,
    GammaInterval,
    HfTokenizer,
    LinearGraph,
    RateScheduler,
    ZipfLength,
)

from .helpers import issues_of, load, only_issue


def test_defaults_everywhere() -> None:
    s = load("{}")
    assert s.seed == 42
    assert isinstance(s.traffic_scheduler, RateScheduler)
    assert s.traffic_scheduler.interval_generator.type == "poisson"
    assert isinstance(s.session_generator.session_graph, LinearGraph)  # type: ignore[union-attr]
    assert isinstance(s.client, ChatCompletionsClient)
    assert s.client.api_base is None
    assert s.runtime.max_sessions == 25
    assert s.evaluators[0].type == "performance"
    assert s.output_dir == "benchmark_output"


def test_seed_zero_is_valid_and_negative_is_not() -> None:
    assert load("seed: 0").seed == 0
    issue = only_issue("seed: -1")
    assert issue.path == "seed"
    assert "greater than or equal to 0 (got -1)" in issue.message


# ------------------------------------------------------------------------ traffic_scheduler


def test_rate_scheduler_with_each_interval_generator() -> None:
    gamma = load("traffic_scheduler: {type: rate, interval_generator: {type: gamma, shape: 2}}")
    interval = gamma.traffic_scheduler.interval_generator  # type: ignore[union-attr]
    assert isinstance(interval, GammaInterval)
    assert interval.effective_shape == 2
    fixed = load("traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0}}")
    assert fixed.traffic_scheduler.interval_generator.interval == 0  # type: ignore[union-attr]


def test_concurrent_scheduler() -> None:
    s = load("traffic_scheduler: {type: concurrent, target_concurrent_sessions: 5}")
    assert isinstance(s.traffic_scheduler, ConcurrentScheduler)
    assert s.traffic_scheduler.target_concurrent_sessions == 5
    assert s.traffic_scheduler.rampup_seconds == 10


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        (
            "traffic_scheduler: {type: rate, interval_generator: {type: poisson, arrival_rate: 0}}",
            "traffic_scheduler.interval_generator.arrival_rate",
            "greater than 0 (got 0)",
        ),
        (
            "traffic_scheduler: {type: rate, interval_generator: {type: gamma, cv: 1, shape: 1}}",
            "traffic_scheduler.interval_generator.shape",
            "either cv or shape",
        ),
        (
            "traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: -1}}",
            "traffic_scheduler.interval_generator.interval",
            "greater than or equal to 0",
        ),
        (
            "traffic_scheduler: {type: concurrent, target_concurrent_sessions: 0}",
            "traffic_scheduler.target_concurrent_sessions",
            "greater than or equal to 1",
        ),
        (
            "traffic_scheduler: {type: burst}",
            "traffic_scheduler.type",
            "unknown type 'burst'; expected one of: 'rate', 'concurrent'",
        ),
        ("traffic_scheduler: 5", "traffic_scheduler", "must be a mapping (got 5)"),
    ],
)
def test_invalid_traffic_scheduler(text: str, path: str, fragment: str) -> None:
    issue = only_issue(text)
    assert issue.path == path
    assert fragment in issue.message


def test_missing_type_takes_the_sections_default_type() -> None:
    s = load("traffic_scheduler: {interval_generator: {arrival_rate: 3}}\nclient: {model: m}")
    assert s.traffic_scheduler.interval_generator.arrival_rate == 3  # type: ignore[union-attr]
    assert isinstance(s.client, ChatCompletionsClient)
    issue = only_issue("traffic_scheduler: {target_concurrent_sessions: 3}")
    assert issue.path == "traffic_scheduler.target_concurrent_sessions"
    assert "unknown key" in issue.message


# --------------------------------------------------------------------------- length generators

LENGTH_AT = (
    "session_generator: {type: synthetic, output_spec: {text: {output_length_generator: %s}}}"
)


@pytest.mark.parametrize(
    ("generator", "expected"),
    [
        ("{type: fixed, value: 3}", 3),
        ("{type: uniform, min: 4, max: 4}", 4),
        ("{type: zipf, min: 1, max: 9, theta: 1.5}", 1.5),
        ("{type: zipf, min: 1, max: 9, alpha: 1.5}", 1.5),
        ("{type: fixed_stair, values: [1, 2], repeat_each: 2, wrap: false}", [1, 2]),
        ("{type: inverse_gaussian, mean: 100, shape: 50}", 100),
    ],
)
def test_valid_length_generators(generator: str, expected: object) -> None:
    s = load(LENGTH_AT % generator)
    out = s.session_generator.output_spec.text.output_length_generator  # type: ignore[union-attr]
    if isinstance(out, ZipfLength):
        assert out.theta == expected
    elif isinstance(out, FixedStairLength):
        assert out.values == expected
    else:
        assert expected in (
            getattr(out, "value", None),
            getattr(out, "min", None),
            getattr(out, "mean", None),
        )


@pytest.mark.parametrize(
    ("generator", "suffix", "fragment"),
    [
        ("{type: uniform, min: 5, max: 3}", ".min", "must be <= max (got min=5, max=3)"),
        ("{type: zipf, min: 5, max: 3}", ".min", "must be <= max"),
        ("{type: zipf, theta: 1, alpha: 2}", ".alpha", "another spelling of 'theta'"),
        ("{type: fixed_stair, values: []}", ".values", "must not be empty"),
        ("{type: fixed_stair}", ".values", "missing required key"),
        ("{type: fixed, value: -3}", ".value", "greater than or equal to 0 (got -3)"),
        ("{type: inverse_gaussian, mean: 0}", ".mean", "greater than 0"),
        ("{type: lognormal}", ".type", "unknown type 'lognormal'"),
        ("{type: normal, std: 3}", ".mean", "missing required key"),
    ],
)
def test_invalid_length_generators(generator: str, suffix: str, fragment: str) -> None:
    issue = only_issue(LENGTH_AT % generator)
    assert issue.path == "session_generator.output_spec.text.output_length_generator" + suffix
    assert fragment in issue.message


# ----------------------------------------------------------------------------- session graphs


def test_session_graphs() -> None:
    single = load("session_generator: {type: synthetic, session_graph: {type: single_request}}")
    assert single.session_generator.session_graph.type == "single_request"  # type: ignore[union-attr]
    branching = load(
        "session_generator:\n  type: synthetic\n  session_graph:\n    type: branching\n"
        "    connection_dist_generator: {type: uniform, min: 1, max: 2}\n    single_root: false\n"
    )
    graph = branching.session_generator.session_graph  # type: ignore[union-attr]
    assert isinstance(graph, BranchingGraph)
    assert graph.single_root is False
    assert graph.num_layers_generator.min == 2  # type: ignore[union-attr]


def test_invalid_session_graph_and_channels() -> None:
    issues = issues_of(
        "session_generator:\n  type: synthetic\n  session_graph: {type: single_request, turns: 3}\n"
        "  channels:\n    - {type: text, shared_prefix_ratio: 1.5, shared_prefix_probability: -1}\n"
    )
    assert [i.path for i in issues] == [
        "session_generator.session_graph.turns",
        "session_generator.channels[0].shared_prefix_ratio",
        "session_generator.channels[0].shared_prefix_probability",
    ]
    assert "unknown key" in issues[0].message


def test_a_shared_prefix_has_one_length() -> None:
    issue = only_issue(
        "session_generator:\n  channels:\n"
        "    - {type: text, shared_prefix_ratio: 0.2, shared_prefix_tokens: 64}\n"
    )
    assert issue.path == "session_generator.channels[0].shared_prefix_tokens"
    assert "shared_prefix_tokens or shared_prefix_ratio, not both" in issue.message
    issue = only_issue("session_generator:\n  channels: [{type: text, shared_prefix_count: 0}]\n")
    assert issue.path == "session_generator.channels[0].shared_prefix_count"


def test_channels_must_not_be_empty_and_trace_needs_a_file() -> None:
    assert (
        only_issue("session_generator: {type: synthetic, channels: []}").message
        == "must not be empty"
    )
    issue = only_issue("session_generator: {type: trace}")
    assert (issue.path, issue.message) == ("session_generator.trace_file", "missing required key")


# ------------------------------------------------------------------------------------- client


def test_clients() -> None:
    s = load(
        "client:\n  type: openai_completions\n  api_base: http://h:1/v1\n  model: m\n"
        "  additional_sampling_params: '{\"temperature\": 0}'\n"
        "  tokenizer: {type: hf, path: /tok}\n"
    )
    assert isinstance(s.client, CompletionsClient)
    assert s.client.max_tokens_param == "max_tokens"
    assert s.client.additional_sampling_params == {"temperature": 0}
    assert isinstance(s.client.tokenizer, HfTokenizer)


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("client: {api_base: 'http://h/v1'}", "client.model", "required when client.api_base"),
        ("client: {request_timeout: 0}", "client.request_timeout", "greater than 0"),
        (
            "client: {additional_sampling_params: '{bad'}",
            "client.additional_sampling_params",
            "not a JSON object",
        ),
        ("client: {tokenizer: {type: hf}}", "client.tokenizer.path", "missing required key"),
        ("client: {max_in_flight: 0}", "client.max_in_flight", "greater than or equal to 1"),
    ],
)
def test_invalid_client(text: str, path: str, fragment: str) -> None:
    issue = only_issue(text)
    assert issue.path in (path, "")
    assert fragment in issue.message


def test_api_key_is_never_echoed_in_errors() -> None:
    issue = only_issue("client: {api_key: 12345}")
    assert issue.path == "client.api_key"
    assert "12345" not in issue.message
    assert "***" in issue.message


# -------------------------------------------------------------- runtime, evaluators, the rest


def test_runtime() -> None:
    s = load(
        "runtime: {max_sessions: -1, benchmark_timeout: 10, num_workers: 3, cpu_affinity: [0, 2]}"
    )
    assert (s.runtime.num_workers, s.runtime.cpu_affinity) == (3, [0, 2])
    issue = only_issue("runtime: {max_sessions: -1, benchmark_timeout: 0}")
    assert "needs a benchmark_timeout > 0" in issue.message
    issue = only_issue("runtime: {num_workers: four}")
    assert issue.message == "must be a valid integer or 'auto' (got 'four')"
    issue = only_issue("runtime: {cpu_affinity: [0, x]}")
    assert (issue.path, issue.message) == (
        "runtime.cpu_affinity[1]",
        "must be a valid integer (got 'x')",
    )


def test_ignored_thread_keys_warn() -> None:
    with pytest.warns(UserWarning, match=r"s\.yaml: runtime\.num_client_threads is ignored"):
        s = load("runtime: {num_client_threads: 4}")
    assert s.runtime.num_client_threads == 4


def test_evaluators_trace_recorder_health_checks_simulator() -> None:
    s = load(
        "evaluators:\n  - slos: [{name: a, metric: tpot, percentile: 0.5, value: 0.1}]\n"
        "trace_recorder: {include_content: true}\nhealth_checks: {strict: true}\n"
        "simulator: {preset: realistic}\noutput_dir: out\n"
    )
    assert s.evaluators[0].slos[0].metric == "tpot"
    assert s.trace_recorder.include_content
    assert s.health_checks.strict
    assert s.simulator.preset == "realistic"
    issues = issues_of(
        "evaluators: [{type: performance, slos: "
        "[{name: a, metric: ttft, percentile: 2, value: 1}]}]\n"
        "health_checks: {arrival_ks_alpha: 1}\nsimulator: {preset: slow}\n"
    )
    assert [i.path for i in issues] == [
        "evaluators[0].slos[0].metric",
        "evaluators[0].slos[0].percentile",
        "health_checks.arrival_ks_alpha",
        "simulator.preset",
    ]


# ------------------------------------------------------------------- numbers are not booleans


@pytest.mark.parametrize(
    ("text", "path", "kind"),
    [
        ("seed: true", "seed", "integer"),
        ("runtime: {max_sessions: true}", "runtime.max_sessions", "integer"),
        ("runtime: {warmup_sessions: false}", "runtime.warmup_sessions", "integer"),
        ("runtime: {num_workers: true}", "runtime.num_workers", "integer"),  # (int or 'auto')
        ("runtime: {cpu_affinity: [0, true]}", "runtime.cpu_affinity[1]", "integer"),
        (
            "traffic_scheduler: {type: concurrent, target_concurrent_sessions: true}",
            "traffic_scheduler.target_concurrent_sessions",
            "integer",
        ),
        (LENGTH_AT % "{type: fixed, value: true}", "%s.value", "integer"),
        (LENGTH_AT % "{type: uniform, min: true, max: 9}", "%s.min", "integer"),
        (LENGTH_AT % "{type: fixed_stair, values: [2, true]}", "%s.values[1]", "integer"),
        ("client: {max_model_len: true}", "client.max_model_len", "integer"),  # (int or null)
        ("simulator: {max_num_seqs: true}", "simulator.max_num_seqs", "integer"),
        ("runtime: {benchmark_timeout: true}", "runtime.benchmark_timeout", "number"),
        ("traffic_scheduler: {interval_generator: {arrival_rate: true}}", None, "number"),
    ],
)
def test_a_boolean_is_refused_where_a_number_is_expected(
    text: str, path: str | None, kind: str
) -> None:
    issue = only_issue(text)
    if path is not None:
        generator = "session_generator.output_spec.text.output_length_generator"
        assert issue.path == path.replace("%s", generator)
    got = "false" if "false" in text else "true"
    assert issue.message.startswith(f"must be a valid {kind}, not a boolean"), issue.message
    assert issue.message.endswith(f"(got {got})")


def test_numbers_keep_their_forms() -> None:
    assert load("seed: 1").seed == 1
    assert load("runtime: {max_sessions: 2.0}").runtime.max_sessions == 2  # as before
    assert load("runtime: {benchmark_timeout: 3}").runtime.benchmark_timeout == 3.0
    assert "valid integer" in only_issue("runtime: {max_sessions: 2.5}").message
    assert load("trace_recorder: {enabled: true}").trace_recorder.enabled is True
    assert load("seed: 1", ("seed=5",)).seed == 5
    assert "not a boolean" in only_issue("seed: 1", ("seed=true",)).message


# ------------------------------------------------------------------------ output lengths


@pytest.mark.parametrize(
    ("generator", "suffix"),
    [
        ("{type: fixed, value: 0}", ".value"),
        ("{type: uniform, min: 0, max: 10}", ".min"),
        ("{type: zipf, min: 0, max: 10}", ".min"),
        ("{type: fixed_stair, values: [4, 0, 8]}", ".values[1]"),
    ],
)
def test_an_output_length_generator_that_can_draw_zero_is_refused(
    generator: str, suffix: str
) -> None:
    issue = only_issue(LENGTH_AT % generator)
    assert issue.path == "session_generator.output_spec.text.output_length_generator" + suffix
    assert issue.message == (
        "must be at least 1: a request asks for at least 1 output token (got 0)"
    )
    one = generator.replace(" 0", " 1")
    assert load(LENGTH_AT % one).session_generator.output_spec.text  # type: ignore[union-attr]


def test_an_agents_output_length_of_zero_is_refused() -> None:
    text = (
        "session_generator:\n"
        "  session_graph:\n"
        "    type: agent_rounds\n"
        "    agents:\n"
        "      - {id: a}\n"
        "      - id: b\n"
        "        output_length_generator: {type: uniform, min: 0, max: 3}\n"
    )
    issue = only_issue(text)
    assert issue.path == ("session_generator.session_graph.agents[1].output_length_generator.min")
    assert (issue.line, issue.column) == (7, 50)
    assert "at least 1" in issue.message


def test_a_prompt_body_may_still_start_at_zero() -> None:
    # (only output lengths are refused; a body of 0 tokens is sent as 1, docs/scenario.md)
    text = "session_generator: {channels: [{body_length_generator: {type: uniform, min: 0}}]}"
    assert load(text).session_generator.channels[0].body_length_generator.min == 0  # type: ignore[union-attr]


def test_a_tools_result_length_of_zero_is_refused() -> None:
    # (it was raised to 1 token: the result text the children received was not the file's 0)
    text = (
        "session_generator:\n"
        "  session_graph:\n"
        "    type: agent_rounds\n"
        "    agents:\n"
        "      - {id: a}\n"
        "      - id: search\n"
        "        kind: tool\n"
        "        result_length_generator: {type: fixed, value: 0}\n"
    )
    issue = only_issue(text)
    assert issue.path == ("session_generator.session_graph.agents[1].result_length_generator.value")
    assert issue.line == 8
    assert issue.message == (
        "must be at least 1: a tool's result is at least 1 token, the text its children"
        " receive (got 0)"
    )
    one = text.replace("value: 0", "value: 1")
    agents = load(one).session_generator.session_graph.agents  # type: ignore[union-attr]
    assert agents[1].result_length_generator.value == 1  # type: ignore[union-attr]
