"""Loading files: positions, did-you-mean, every error at once, YAML problems."""

from __future__ import annotations

from pathlib import Path

import pytest

from veeksha.errors import ScenarioError
from veeksha.scenario.loader import load_scenario, load_scenario_text

from .helpers import UPSTREAM_SAMPLES, issues_of, only_issue

BAD = """\
seed: 1
traffic_scheduler:
  type: rate
  interval_generator:
    type: poisson
    arival_rate: 10
runtime:
  max_sessions: -5
client:
  type: openai_chat_completion
health_checks: {strict: maybe, late_treshold_s: 3}
"""


def test_every_error_at_once_with_line_and_column() -> None:
    rendered = [str(i) for i in issues_of(BAD)]
    assert rendered == [
        "s.yaml:6:5: traffic_scheduler.interval_generator.arival_rate: unknown key; "
        "did you mean 'arrival_rate'?",
        "s.yaml:8:3: runtime.max_sessions: must be greater than or equal to -1 (got -5)",
        "s.yaml:10:3: client.type: unknown type 'openai_chat_completion'; expected one of: "
        "'openai_chat_completions', 'openai_completions', 'openai_embeddings'; did you mean "
        "'openai_chat_completions'?",
        "s.yaml:11:17: health_checks.strict: must be a valid boolean (got 'maybe')",
        "s.yaml:11:32: health_checks.late_treshold_s: unknown key; "
        "did you mean 'late_threshold_s'?",
    ]


def test_a_key_that_is_a_part_of_exactly_one_allowed_key_names_it() -> None:
    # difflib finds nothing close to "rate" in "arrival_rate" (the list of keys was the answer);
    # a word that is a whole part of one key's name is that key, of two or more none of them
    rate = only_issue(
        "traffic_scheduler:\n  type: rate\n  interval_generator: {type: poisson, rate: 5}"
    )
    assert rate.message == "unknown key; did you mean 'arrival_rate'?"
    timeout = only_issue("runtime: {timeout: 5}")  # benchmark_timeout, post_timeout_grace_seconds
    assert timeout.message.startswith("unknown key; allowed keys: max_sessions, benchmark_timeout")


def test_unknown_key_without_a_close_match_lists_the_allowed_keys() -> None:
    issue = only_issue("trace_recorder: {zzz: 1}")
    assert issue.message == "unknown key; allowed keys: enabled, include_content"
    top = only_issue("sed: 1\n")
    assert (top.path, top.line, top.column) == ("sed", 1, 1)
    assert "did you mean 'seed'?" in top.message


@pytest.mark.parametrize("api_base", ["localhost:8000/v1", "127.0.0.1:8000", "ftp://host/v1"])
def test_an_api_base_without_http_is_named_with_the_fix(api_base: str) -> None:
    issue = only_issue(f"client: {{type: openai_completions, api_base: '{api_base}', model: m}}\n")
    assert (issue.path, issue.line) == ("client.api_base", 1)
    assert issue.message == (
        f"must be an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1 (got {api_base!r})"
    )
    several = only_issue(f"clients:\n  - {{name: a, model: m, api_base: '{api_base}'}}\n")
    assert several.path == "clients[0].api_base"


def test_missing_key_points_at_the_enclosing_section() -> None:
    issue = only_issue("seed: 1\nsession_generator:\n  type: trace\n")
    assert (issue.line, issue.column, issue.path) == (2, 1, "session_generator.trace_file")


def test_list_items_are_located() -> None:
    issue = only_issue("evaluators:\n  - type: performance\n  - type: performance\n    slos: [3]\n")
    assert (issue.line, issue.column, issue.path) == (4, 12, "evaluators[1].slos[0]")
    assert issue.message == "must be a mapping (got 3)"


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("seed: [1\n", 2, 1, "YAML syntax error: the [ opened at line 1, column 7, is not"),
        (
            "runtime: {max_sessions: 1}\nseed: 1\nruntime: {seed: 2}\n",
            3,
            1,
            "duplicate key 'runtime' in the mapping that starts at line 1; give each key once",
        ),
        ("runtime:\n\tmax_sessions: 1\n", 2, 1, "a tab character; YAML indents with spaces"),
        ("seed: 1\n---\nseed: 2\n", 2, 1, "a second document (---) in the file"),
        # not ruamel's multi-line report: one line, at the place
        ("seed: 1\nruntime: {max_sessions: 2\x00}\n", 2, 26, "the character #x0000 is not"),
        ("seed: *nowhere\n", 1, 7, "found undefined alias 'nowhere'"),
        ("<<: 5\nseed: 1\n", 1, 5, "expected a mapping or list of mappings for merging"),
    ],
)
def test_yaml_syntax_errors_name_line_and_column(
    text: str, line: int, column: int, fragment: str
) -> None:
    issue = only_issue(text)
    assert (issue.line, issue.column) == (line, column)
    assert fragment in issue.message
    assert "\n" not in issue.message
    assert "{" not in issue.message  # (ruamel quotes a duplicate's value as a Python dict)


@pytest.mark.parametrize(
    ("text", "at", "message"),
    [
        (
            "runtime:\n  max_sessions: 3\n   benchmark_timeout: 3\n",
            (3, 21),
            "'benchmark_timeout:' is indented more than the line above it, whose key has a value"
            " already, so YAML reads it as more of that value: indent it as the keys beside it"
            " (or quote a value that holds ': ')",
        ),
        (
            "client:\n  model: a: b\n",
            (2, 11),
            "a value holds ': ' ('model: a: b'): quote the value, model: \"a: b\"",
        ),
        (
            "client:\n  api_base: [\n",
            (3, 1),
            "the [ opened at line 2, column 13, is not closed (expected the node content, but "
            "found '<stream end>'): close it with ], or quote a value that starts with [",
        ),
        (
            "client: {api_base: x\nruntime: {}\n",
            (2, 8),
            "the { opened at line 1, column 9, is not closed (expected ',' or '}', but got ':'):"
            " close it with }, or quote a value that starts with {",
        ),
        (
            'client:\n  model: "abc # not a comment [\nseed: 1\n',
            (4, 1),
            "the quote opened at line 2, column 10, is not closed: end the value with the same "
            "quote",
        ),
    ],
)
def test_common_yaml_mistakes_are_said_with_their_fix(
    text: str, at: tuple[int, int], message: str
) -> None:
    """(YAML's own words, "mapping values are not allowed here", name neither the key nor the
    fix)"""
    issue = only_issue(text)
    assert (issue.line, issue.column) == at
    assert issue.message == f"YAML syntax error: {message}"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "the file is empty"),
        ("# only a comment\n", "the file is empty"),
        ("- seed: 1\n", "must be a mapping of sections, not a list"),
        ("just text\n", "must be a mapping of sections, not a single value (got 'just text')"),
        ("42\n", "not a single value (got 42)"),
        ("!include other.yaml\n", "not an !include: a file cannot be only an !include"),
        ("!expand [1, 2]\n", "not a !expand tag (got [1, 2])"),
    ],
)
def test_empty_and_non_mapping_files(text: str, fragment: str) -> None:
    assert fragment in only_issue(text).message


def test_missing_unreadable_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(tmp_path / "nope.yaml")
    with pytest.raises(ScenarioError, match="cannot read the file"):
        load_scenario(tmp_path)
    binary = tmp_path / "b.yaml"
    binary.write_bytes(b"\xff\xfe\x00seed")
    with pytest.raises(ScenarioError, match="not a text file"):
        load_scenario(binary)


def test_bytes_that_are_not_utf8_are_named_at_their_line(tmp_path: Path) -> None:
    latin1 = tmp_path / "l.yaml"
    latin1.write_bytes("seed: 1\nruntime:\n  max_sessions: 3  # caf\xe9\n".encode("latin-1"))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(latin1)
    (issue,) = caught.value.issues
    assert (issue.file, issue.line, issue.column) == (str(latin1), 3, 25)
    assert (
        issue.message == "not a text file in UTF-8 (byte 0xe9 here is not UTF-8); save it as UTF-8"
    )


@pytest.mark.parametrize(
    ("text", "line", "column", "path", "kind"),
    [
        ("runtime: {1: 2}\n", 1, 11, "runtime.1", "a number"),
        ("~: 1\n", 1, 1, "null", "null"),
        ("seed: 1\ntrue: 2\n", 2, 1, "true", "a boolean"),
        ("evaluators:\n  - type: performance\n    !expand name: x\n", 3, 5, None, "a tagged"),
    ],
)
def test_keys_that_are_not_text_are_named_at_their_line(
    text: str, line: int, column: int, path: str | None, kind: str
) -> None:
    """A key that YAML reads as a number, null, a boolean or a tagged value: pydantic said
    "Keys should be strings" at a path holding the key's Python repr (``None``,
    ``TaggedScalar(...)``)."""
    issue = only_issue(text)
    assert (issue.line, issue.column) == (line, column)
    assert path is None or issue.path == path
    assert f"a key is a name, and this one is {kind}" in issue.message
    assert "Keys should be strings" not in issue.message
    assert "TaggedScalar" not in str(issue)
    assert "None" not in str(issue)


@pytest.mark.parametrize("path", UPSTREAM_SAMPLES, ids=lambda p: p.name)
def test_upstream_samples_validate_unchanged(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.client.model == "meta-llama/Llama-3.2-1B-Instruct"
    assert scenario.evaluators[0].slos


def test_branching_sample_has_skip_connections() -> None:
    scenario = load_scenario(next(p for p in UPSTREAM_SAMPLES if "branching" in p.name))
    graph = scenario.session_generator.session_graph  # type: ignore[union-attr]
    assert graph.type == "branching"
    assert graph.connection_dist_generator.max == 2  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- phases


def test_phase_errors_name_file_line_and_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from veeksha.errors import ScenarioError
    from veeksha.scenario.loader import load_scenario

    path = tmp_path / "bad.yaml"
    path.write_text(
        "traffic_scheduler: {type: rate, interval_generator: {type: poisson, arrival_rate: 4}}\n"
        "runtime: {max_sessions: 10}\n"
        "phases:\n"
        "  - {name: a, duration: 2, max_sessions: 4}\n"
        "  - {name: a, duration: 1, interval: 3}\n"
        "  - {name: b, duration: 1, traffic_scheduler: {type: concurrent}}\n"
        "  - {name: warmup, max_sessions: 20}\n"
        "  - {name: open}\n",
        encoding="utf-8",
    )
    try:
        load_scenario(path)
    except ScenarioError as exc:
        lines = [str(issue) for issue in exc.issues]
    else:
        raise AssertionError("invalid phases were accepted")
    expected = [
        f"{path}:4:5: phases[0]: give one of duration and max_sessions, not both",
        f"{path}:5:6: phases[1].name: phase names must be unique ('a' again)",
        f"{path}:5:28: phases[1].interval: the interval generator is not fixed",
        f"{path}:6:48: phases[2].traffic_scheduler.type: cannot change between phases",
        f"{path}:7:6: phases[3].name: a warmup phase can only be the first phase",
    ]
    for want in expected:
        assert any(line.startswith(want) for line in lines), (want, lines)
    assert len(lines) == len(expected)  # the open last phase is fine: runtime ends the run


def test_a_burst_phase_needs_a_session_count() -> None:
    from veeksha.errors import ScenarioError
    from veeksha.scenario.loader import load_scenario_text

    text = (
        "traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 1}}\n"
        "phases:\n"
        "  - {name: a, duration: 2, interval: 0}\n"
        "  - {name: b, max_sessions: 3, interval: 0}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(text, "s.yaml")
    assert [str(issue) for issue in caught.value.issues] == [
        "s.yaml:3:5: phases[0]: a fixed interval of 0 starts all its sessions at once:"
        " give max_sessions"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a rate whose gaps round to 0 ns is a burst too: the phase's arrivals never reached
        # its end, and the run started sessions without end (a dry run ran past 400 s)
        (
            "traffic_scheduler: {type: rate, interval_generator: {arrival_rate: 1.0e+300}}\n"
            "phases:\n  - {name: a, duration: 2}\n  - {name: b, duration: 2, arrival_rate: 4}\n",
            "s.yaml:3:5: phases[0]: an arrival rate of 1e+300/s (gaps under a nanosecond) starts"
            " all its sessions at once: give max_sessions",
        ),
        # the warmup of runtime.warmup_seconds is such a phase: it never ended
        (
            "traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0}}\n"
            "runtime: {max_sessions: -1, benchmark_timeout: 3, warmup_seconds: 2}\n",
            "s.yaml:2:51: runtime.warmup_seconds: a fixed interval of 0 starts every session at"
            " once, so a warmup of seconds never ends: give warmup_sessions instead",
        ),
    ],
)
def test_a_burst_never_ends_a_phase_of_seconds(text: str, expected: str) -> None:
    assert str(only_issue(text)) == expected


@pytest.mark.parametrize(
    ("api_base", "message"),
    [
        ("http://[::1/v1", "is not a valid URL (Invalid IPv6 URL)"),
        ("http://127.0.0.1:99999/v1", "is not a valid URL (Port out of range 0-65535)"),
        ("http://127.0.0.1:abc/v1", "is not a valid URL (Port could not be cast"),
        ("http:///v1", "has no host"),
        ("http://127.0.0.1:8000/v1?x=1", "takes no query or fragment"),
        ("http://127.0.0.1:8000/v1#top", "takes no query or fragment"),
        ("http://me:hunter2@127.0.0.1:8000/v1", "must not hold credentials (user:password@)"),
        ("http://me:hunter2@127.0.0.1:abc/v1", "is not a valid URL (Port could not be cast"),
        ("http://my host:8000/v1", "has a host that is not one (' ' in 'my host': a host name"),
        ("http://h%20st:8000/v1", "has a host that is not one ('%' in 'h%20st'"),
        ("http://a,b:8000/v1", "has a host that is not one (',' in 'a,b'"),
        ("http://me:hunter2@my$host/v1", "has a host that is not one ('$' in 'my$host'"),
        ("http://127.0.0.1:8000/my v1", "holds ' ': a URL holds no space or control character"),
        # (sent as is, its Host header would not be ASCII: the form to write is named)
        (
            "http://bücher.example:8000/v1",
            "has a host with a non-ASCII character ('ü' in 'bücher.example'): write the host"
            " IDNA-encoded, 'http://xn--bcher-kva.example:8000/v1'",
        ),
    ],
)
def test_an_api_base_that_cannot_be_one_is_named_before_anything_starts(
    api_base: str, message: str
) -> None:
    issue = only_issue(f"client: {{model: m, api_base: '{api_base}'}}\n")
    assert issue.path == "client.api_base"
    assert issue.message.startswith(message), issue.message
    assert "hunter2" not in issue.message  # (the password is masked where the URL is quoted)
    for good in (
        "http://[::1]:8000/v1",
        "http://my_host-2.lan:8000/v1",
        "http://xn--bcher-kva.example/v1",
    ):
        fine = f"client: {{model: m, api_base: '{good}'}}\n"
        assert load_scenario_text(fine, "s.yaml").client.api_base == good


@pytest.mark.parametrize(
    ("text", "where", "path"),
    [
        # a range check of one key: the key's line, not its section's (runtime: is line 2)
        ("seed: 1\nruntime:\n  benchmark_timeout: 30\n  max_sessions: 0\n", (4, 3), "max_sessions"),
        # checks between keys: at the key they name first
        (
            "seed: 1\nruntime:\n  benchmark_timeout: 0\n  max_sessions: -1\n",
            (4, 3),
            "max_sessions",
        ),
        (
            "seed: 1\nruntime:\n  max_sessions: -1\n  pregenerate_sessions: true\n",
            (4, 3),
            "pregenerate_sessions",
        ),
        (
            "seed: 1\ntraffic_scheduler:\n  interval_generator:\n    type: gamma\n    cv: 1\n"
            "    shape: 2\n",
            (6, 5),
            "interval_generator.shape",
        ),
        # a key the file leaves out: its section's line, not the file's first line (seed:)
        ("seed: 1\nruntime: {}\nclient:\n  api_base: http://h:8000/v1\n", (3, 1), "model"),
    ],
)
def test_a_checked_key_is_reported_at_its_own_line(
    text: str, where: tuple[int, int], path: str
) -> None:
    issue = only_issue(text)
    assert (issue.line, issue.column) == where, str(issue)
    assert issue.path.endswith(path)


def test_a_ramp_with_phases_is_refused_at_both_keys() -> None:
    text = (
        "traffic_scheduler:\n"
        "  type: rate\n"
        "  ramp: {end_rate: 8, duration: 5}\n"
        "phases:\n"
        "  - {name: a, duration: 2}\n"
        "  - {name: b, duration: 2, traffic_scheduler: {ramp: {end_rate: 3, duration: 1}}}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario_text(text, "s.yaml")
    lines = [str(issue) for issue in caught.value.issues]
    fix = "a ramp cannot be combined with phases: remove traffic_scheduler.ramp or phases"
    assert lines[0].startswith(f"s.yaml:3:3: traffic_scheduler.ramp: {fix}"), lines
    assert lines[1].startswith(f"s.yaml:6:48: phases[1].traffic_scheduler.ramp: {fix}"), lines
    assert len(lines) == 2


def test_a_ramp_from_a_zero_interval_is_refused_at_its_key() -> None:
    issue = only_issue(
        "traffic_scheduler:\n"
        "  type: rate\n"
        "  interval_generator: {type: fixed, interval: 0}\n"
        "  ramp: {end_rate: 8, duration: 5}\n"
    )
    assert issue.path == "traffic_scheduler.ramp"
    assert issue.message.startswith("a fixed interval of 0 has no start rate to ramp from")
    assert issue.line == 4


def test_a_ramp_key_is_checked_like_any_other() -> None:
    issue = only_issue("traffic_scheduler: {type: rate, ramp: {end_rate: 8, duration: 0}}\n")
    assert issue.path == "traffic_scheduler.ramp.duration"


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        # NaN passed every bound (a comparison with NaN is false): an unbounded run
        (
            "runtime: {max_sessions: -1, benchmark_timeout: .nan}\n",
            "runtime.benchmark_timeout",
            "must be a finite number (got .nan)",
        ),
        # an infinite phase crashed the run (OverflowError making it nanoseconds)
        (
            "phases: [{name: a, duration: .inf, arrival_rate: 5}]\n",
            "phases[0].duration",
            "must be a finite number (got .inf)",
        ),
        # a length of 10**30 overflowed the draws' array, one of 10**12 exhausted the memory
        (
            "session_generator:\n  channels:\n"
            "    - {type: text, body_length_generator: {type: fixed, value: 1000000000000}}\n",
            "session_generator.channels[0].body_length_generator.value",
            "must be less than or equal to 16777216 (got 1000000000000)",
        ),
        (
            "session_generator:\n  session_graph:\n    type: linear\n    num_request_generator:"
            " {type: fixed_stair, values: [1], repeat_each: 1000000000000000000000000000000}\n",
            "session_generator.session_graph.num_request_generator.repeat_each",
            "must be less than or equal to 16777216 (got 1000000000000000000000000000000)",
        ),
        # a block of 10**30 tokens: "Maximum allowed size exceeded" as the trace was read
        (
            "session_generator:\n  type: trace\n  trace_file: t.jsonl\n"
            "  flavor: {type: rag, block_size: 1000000000000000000000000000000}\n",
            "session_generator.flavor.block_size",
            "must be less than or equal to 16777216 (got 1000000000000000000000000000000)",
        ),
        # times past the int64 nanosecond clock: a hang (a deadline's thread died) or a crash
        (
            "runtime: {max_sessions: 3, benchmark_timeout: 1.0e+300}\n",
            "runtime.benchmark_timeout",
            "must be less than or equal to 1000000000 (got 1e+300)",
        ),
        (
            "traffic_scheduler: {type: concurrent, rampup_seconds: 1.0e+300}\n",
            "traffic_scheduler.rampup_seconds",
            "must be less than or equal to 1000000000 (got 1e+300)",
        ),
        # k = 1/cv² divided by zero (cv² of 1e-300 is 0)
        (
            "traffic_scheduler:\n  interval_generator: {type: gamma, cv: 1.0e-300}\n",
            "traffic_scheduler.interval_generator.cv",
            "must be greater than or equal to 0.000001 (got 1e-300)",
        ),
        # pydantic's tag is str() of the value: "unknown type 'None'", "{'a': 1}"
        (
            "traffic_scheduler: {type: null}\n",
            "traffic_scheduler.type",
            "must be one of: 'rate', 'concurrent', 'trace' (got null)",
        ),
        (
            "traffic_scheduler: {type: {a: 1}}\n",
            "traffic_scheduler.type",
            "must be one of: 'rate', 'concurrent', 'trace' (got {a: 1})",
        ),
        # pydantic's own wording: "Unable to parse input string as an integer, exceeded ..."
        (
            "runtime: {max_sessions: 1e300}\n",
            "runtime.max_sessions",
            "must be a valid integer, and this one is too large (got 1e+300)",
        ),
        (
            "traffic_scheduler: {type: concurrent}\n"
            "phases: [{name: a, duration: 1, target_concurrent_sessions: 1e300}]\n",
            "phases[0].target_concurrent_sessions",
            "must be a valid integer, and this one is too large (got 1e+300)",
        ),
    ],
)
def test_values_are_worded_as_veeksha_words_them(text: str, path: str, message: str) -> None:
    issue = only_issue(text)
    assert (issue.path, issue.message) == (path, message)
