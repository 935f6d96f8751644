"""The capacity search file: keys, flags, the scenario inline or by path, the knob of each
scheduler, a probe's scenario; and bad input through the CLI (exit 2, file:line, no traceback,
no folder made)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from veeksha import cli
from veeksha.errors import ScenarioError
from veeksha.experiment.capacity.config import load_capacity_config
from veeksha.experiment.capacity.measure import RunRequest
from veeksha.experiment.capacity.probe import probe_scenario

SCENARIO = """\
seed: 5
traffic_scheduler: {type: rate, interval_generator: {type: gamma, arrival_rate: 1, cv: 2}}
runtime: {max_sessions: 40, benchmark_timeout: 30}
evaluators:
  - type: performance
    slos: [{name: p99 TTFC, metric: ttfc, percentile: 0.99, value: 0.5}]
"""


def write(folder: Path, text: str, name: str = "search.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def inline(scenario: str = SCENARIO, **keys: object) -> str:
    head = "".join(f"{key}: {value}\n" for key, value in keys.items())
    return head + "benchmark_config:\n" + textwrap.indent(scenario, "  ")


def test_public_keys_flags_and_a_scenario_by_path(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    write(tmp_path / "scenarios", SCENARIO, "rate.yaml")
    path = write(
        tmp_path,
        "output_dir: out\nstart_value: 2\nmax_value: 40\nprecision: 1\n"
        "benchmark_config: scenarios/rate.yaml\n",
    )
    config = load_capacity_config(path, {"max_value": 20.0, "confidence": None})
    assert (config.start_value, config.max_value, config.precision) == (2.0, 20.0, 1)
    assert config.confidence == 0.95
    assert config.benchmark_config == str(tmp_path / "scenarios" / "rate.yaml")
    assert config.knob.path == "traffic_scheduler.interval_generator.arrival_rate"
    assert not config.settings.integer
    assert [s.name for s in config.slos] == ["p99 TTFC"]


def test_the_public_wrapper_and_scenario_overrides(tmp_path: Path) -> None:
    text = "capacity_search_config:\n" + textwrap.indent(inline(start_value=4), "  ")
    config = load_capacity_config(write(tmp_path, text), overrides=["seed=9"])
    assert config.start_value == 4
    assert config.scenario.seed == 9


def test_a_probe_scenario_sets_the_knob_warmup_target_and_extensions(tmp_path: Path) -> None:
    config = load_capacity_config(write(tmp_path, inline()))
    knob = config.knob
    probe = probe_scenario(config.scenario, knob, RunRequest(7.5), 1.0, ("http://h:1/v1", "m"))
    assert probe.traffic_scheduler.interval_generator.arrival_rate == 7.5  # type: ignore[union-attr]
    assert probe.traffic_scheduler.interval_generator.cv == 2  # type: ignore[union-attr]
    assert (probe.client.api_base, probe.client.model) == ("http://h:1/v1", "m")
    assert probe.runtime.warmup_seconds == 1.0
    assert (probe.seed, probe.runtime.max_sessions) == (5, 40)
    extended = probe_scenario(config.scenario, knob, RunRequest(7.5, extension=2), 1.0)
    assert (extended.seed, extended.runtime.max_sessions) == (7, 160)
    assert extended.runtime.benchmark_timeout == 120
    assert extended.client.api_base is None

    own_warmup = SCENARIO.replace(
        "benchmark_timeout: 30", "benchmark_timeout: 30, warmup_sessions: 3"
    )
    config = load_capacity_config(write(tmp_path, inline(own_warmup)))
    probe = probe_scenario(config.scenario, config.knob, RunRequest(2), 1.0)
    assert (probe.runtime.warmup_sessions, probe.runtime.warmup_seconds) == (3, 0)


def test_a_probe_with_clients_aims_each_client_the_shared_simulator_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the probe aimed the unset client: section: its clients went to a simulator of their own
    # each probe, never to the search's shared one
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    clients = (
        "clients:\n"
        "  - {name: a, model: m-a}\n"
        "  - {name: b}\n"
        "  - {name: c, model: m-c, api_base: 'http://other:2/v1'}\n"
    )
    config = load_capacity_config(write(tmp_path, inline(SCENARIO + clients)))
    probe = probe_scenario(config.scenario, config.knob, RunRequest(3), 1.0, ("http://h:1/v1", "m"))
    assert [(name, c.api_base, c.model) for name, c in probe.client_entries()] == [
        ("a", "http://h:1/v1", "m-a"),
        ("b", "http://h:1/v1", config.scenario.simulator.model),
        ("c", "http://other:2/v1", "m-c"),
    ]
    assert probe.problems() == []


def test_the_knob_of_each_scheduler(tmp_path: Path) -> None:
    fixed = SCENARIO.replace("{type: gamma, arrival_rate: 1, cv: 2}", "{type: fixed, interval: 1}")
    config = load_capacity_config(write(tmp_path, inline(fixed)))
    probe = probe_scenario(config.scenario, config.knob, RunRequest(4), 0)
    assert probe.traffic_scheduler.interval_generator.interval == 0.25  # type: ignore[union-attr]
    # the key holds the gap, the value searched is a rate: never printed as "interval=4"
    assert config.knob.describe(4) == "rate=4/s (interval 0.25 s)"
    assert config.knob.title == (
        "the session rate (traffic_scheduler.interval_generator.interval = 1 / rate)"
    )

    concurrent = SCENARIO.replace(
        "{type: rate, interval_generator: {type: gamma, arrival_rate: 1, cv: 2}}",
        "{type: concurrent, rampup_seconds: 0}",
    )
    config = load_capacity_config(write(tmp_path, inline(concurrent), "c.yaml"), {"precision": 2})
    assert config.knob.path == "traffic_scheduler.target_concurrent_sessions"
    assert config.knob.describe(6) == "target_concurrent_sessions=6"
    assert config.knob.title == config.knob.path
    assert config.settings.integer
    assert config.settings.step == 1
    probe = probe_scenario(config.scenario, config.knob, RunRequest(6), 0)
    assert probe.traffic_scheduler.target_concurrent_sessions == 6  # type: ignore[union-attr]
    assert probe.traffic_scheduler.rampup_seconds == 0  # type: ignore[union-attr]
    ramped = load_capacity_config(
        write(tmp_path, inline(concurrent.replace("rampup_seconds: 0", "rampup_seconds: 5")))
    )
    probe = probe_scenario(ramped.scenario, ramped.knob, RunRequest(6), 1.0)
    assert probe.runtime.warmup_seconds == 5  # measured only once the ramp-up is over


# ------------------------------------------------------------------------ bad input, via the CLI

NO_SLO = SCENARIO.split("evaluators:", maxsplit=1)[0] + "evaluators: [{type: performance}]\n"
TRACE = """\
traffic_scheduler: {type: trace}
session_generator: {type: trace, trace_file: t.jsonl}
evaluators: [{slos: [{name: a, metric: ttfc, percentile: 0.5, value: 1}]}]
"""

RAMP = SCENARIO.replace("cv: 2}}", "cv: 2},\n  ramp: {end_rate: 8, duration: 10}}")
PHASES = SCENARIO.replace(
    "runtime:", "phases: [{name: a, duration: 2, arrival_rate: 4}, {name: b}]\nruntime:"
)


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (inline(NO_SLO), ["search.yaml:5:3: benchmark_config.evaluators: no SLO"]),
        (inline(start_value=50, max_value=10), ["search.yaml:1:", "start_value", "max_value (10)"]),
        (inline(start_value=-1), ["search.yaml:1:", "start_value", "greater than 0"]),
        (inline(max_value=0), ["search.yaml:1:", "max_value", "greater than 0"]),
        (inline(expansion_factor=1), ["search.yaml:1:", "expansion_factor", "greater than 1"]),
        (inline(max_iterations=0), ["search.yaml:1:", "max_iterations"]),
        (inline(precision="two"), ["search.yaml:1:", "precision", "must be an integer"]),
        (inline(confidence=1.5), ["search.yaml:1:", "confidence"]),
        (inline(start_valu=3), ["search.yaml:1:", "start_valu", "unknown key"]),
        (
            inline(max_iteration=3),
            ["search.yaml:1:1: max_iteration: unknown key; did you mean 'max_iterations'?"],
        ),
        (
            "seed: 3\n" + inline(),
            ["search.yaml:1:1: seed: a key of the scenario: move it under benchmark_config"],
        ),
        (  # (it resembles expansion_factor: the scenario's key wins)
            "session_generator: {}\n" + inline(),
            ["search.yaml:1:1: session_generator: a key of the scenario: move it under"],
        ),
        (
            "start_value: 1\nbenchmark_config: nowhere.yaml\n",
            ["search.yaml:2:1: benchmark_config: no scenario file", "nowhere.yaml"],
        ),
        (inline(TRACE), ["search.yaml:2:", "benchmark_config.traffic_scheduler.type", "trace"]),
        (
            inline(RAMP),
            ["search.yaml:4:5: benchmark_config.traffic_scheduler.ramp:", "end_rate would stay"],
        ),
        (inline(PHASES), ["search.yaml:4:3: benchmark_config.phases:", "remove phases"]),
        (
            inline(SCENARIO.replace("seed: 5", "seed: -5")),
            ["search.yaml:2:", "benchmark_config.seed"],
        ),
        ("start_value: 1\n", ["search.yaml:1:", "benchmark_config", "missing"]),
        ("- 1\n", ["search.yaml:1:", "mapping"]),
        # a YAML error was ruamel's report over several lines, at no line
        (
            "start_value: 1\n" + inline() + "start_value: 2\n",
            ["search.yaml:", "duplicate key 'start_value' in the mapping that starts at line 1"],
        ),
        (
            "start_value: [1\n" + inline(),
            [
                "search.yaml:2:",
                "YAML syntax error: the [ opened at line 1, column 14, is not closed",
            ],
        ),
        # a value of the wrong kind was quoted as Python writes it (None, TaggedScalar(...))
        (inline(start_value="null"), ["start_value: must be a finite number", "(got null)"]),
        ("start_value: !expand [1, 2]\n" + inline(), ["search.yaml:1:14: !expand: a search key"]),
        ("7: 1\n" + inline(), ["search.yaml:1:1: 7: a key is a name, and this one is a number"]),
    ],
)
def test_bad_input_exits_2_with_file_and_line(
    tmp_path: Path, text: str, needles: list[str]
) -> None:
    path = write(tmp_path, text)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli.main, ["capacity-search", str(path), "--output-dir", str(out)], prog_name="veeksha"
    )
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    for needle in needles:
        assert needle in result.output, (needle, result.output)
    for line in result.output.splitlines():
        assert line.startswith(str(path)), line  # one line per problem, naming the file
        assert "None" not in line, line
        assert "TaggedScalar" not in line, line
    assert not out.exists()  # nothing half-made


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "start_value=2",
            "--set start_value=2: start_value: a key of the search, not of its scenario: "
            "give --start-value 2",
        ),
        (
            "benchmark_config.runtime.max_sessions=9",
            "--set benchmark_config.runtime.max_sessions=9: benchmark_config: --set takes the "
            "scenario's own keys: --set runtime.max_sessions=9",
        ),
        (
            "benchmark_config.client.api_key=sk-secret",
            "--set benchmark_config.client.api_key=***: benchmark_config: --set takes the "
            "scenario's own keys: --set client.api_key=***",
        ),
        (
            "traffic_scheduler.interval_generator.arrival_rate=3",
            "--set traffic_scheduler.interval_generator.arrival_rate=3: traffic_scheduler."
            "interval_generator.arrival_rate: the searched knob: each probe sets it, so this "
            "--set would change nothing; choose the values with --start-value and --max-value",
        ),
    ],
)
def test_an_override_that_cannot_reach_the_scenario_says_what_would(
    tmp_path: Path, override: str, message: str
) -> None:
    path = write(tmp_path, inline())
    with pytest.raises(ScenarioError) as raised:  # (loaded only: a mistake never runs a probe)
        load_capacity_config(path, overrides=[override])
    (issue,) = raised.value.issues
    assert str(issue).startswith(message), str(issue)
    assert "sk-secret" not in str(issue)
    # what the scenario's overrides are for still works, next to the search's flags
    config = load_capacity_config(path, {"start_value": 2.0}, ["runtime.max_sessions=9"])
    assert (config.start_value, config.scenario.runtime.max_sessions) == (2.0, 9)


def test_an_override_of_a_search_key_exits_2_naming_its_flag(tmp_path: Path) -> None:
    path = write(tmp_path, inline())
    result = CliRunner().invoke(
        cli.main, ["capacity-search", str(path), "--set", "max_value=8"], prog_name="veeksha"
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("--set max_value=8: max_value: a key of the search, not of ")
    assert "give --max-value 8" in result.output


def test_bad_flags_and_the_public_form(tmp_path: Path) -> None:
    path = write(tmp_path, inline())
    runner = CliRunner()
    result = runner.invoke(
        cli.main,
        ["capacity-search", "--config", str(path), "--start-value", "500", "--max-value", "20"],
        prog_name="veeksha",
    )
    assert result.exit_code == 2, result.output
    assert "<--start-value>: start_value:" in result.output
    result = runner.invoke(cli.main, ["capacity-search"], prog_name="veeksha")
    assert result.exit_code == 2
    assert "FILE or --config FILE" in result.output
    result = runner.invoke(
        cli.main, ["capacity-search", str(tmp_path / "missing.yaml")], prog_name="veeksha"
    )
    assert result.exit_code == 2
    assert "missing.yaml" in result.output
    assert "cannot read" in result.output


def test_the_shipped_search_file_is_valid() -> None:
    shipped = Path(__file__).parents[3] / "scenarios" / "capacity_search.yaml"
    config = load_capacity_config(shipped)
    assert config.knob.path == "traffic_scheduler.interval_generator.arrival_rate"
    assert config.scenario.client.api_base is None  # the built-in simulator, from a fresh clone
    assert config.slos


def test_problems_of_the_search_and_its_scenario_file_are_reported_together(
    tmp_path: Path,
) -> None:
    write(tmp_path, "seed: -1\n", "broken.yaml")
    path = write(tmp_path, "start_value: 0\nbenchmark_config: broken.yaml\n")
    result = CliRunner().invoke(cli.main, ["capacity-search", str(path)], prog_name="veeksha")
    assert result.exit_code == 2
    assert "search.yaml:1:1: start_value: must be greater than 0" in result.output
    assert "broken.yaml:1:1: seed:" in result.output


def test_validate_recognises_a_search_file_and_checks_it(tmp_path: Path) -> None:
    shipped = Path(__file__).parents[3] / "scenarios" / "capacity_search.yaml"
    runner = CliRunner()
    result = runner.invoke(cli.main, ["validate", str(shipped)], prog_name="veeksha")
    assert result.exit_code == 0, result.output
    assert "ok, a capacity search of traffic_scheduler.interval_generator.arrival_rate" in (
        result.output
    )
    bad = write(tmp_path, "start_value: 0\nbenchmark_config: broken.yaml\n")
    write(tmp_path, "seed: -1\n", "broken.yaml")
    result = runner.invoke(cli.main, ["validate", str(bad)], prog_name="veeksha")
    assert result.exit_code == 2
    assert "search.yaml:1:1: start_value: must be greater than 0" in result.output
    assert "broken.yaml:1:1: seed:" in result.output


def test_run_of_a_search_file_names_the_command_that_runs_it(tmp_path: Path) -> None:
    shipped = Path(__file__).parents[3] / "scenarios" / "capacity_search.yaml"
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli.main, ["run", str(shipped), "--output-dir", str(out)], prog_name="veeksha"
    )
    assert result.exit_code == 2
    assert f"{shipped} is a capacity search file" in result.output
    assert f"run it with `veeksha capacity-search {shipped}`" in result.output
    assert "unknown key" not in result.output
    assert not out.exists()


def test_a_benchmark_config_naming_another_search_file_says_so(tmp_path: Path) -> None:
    # each key of the other search file was reported as an unknown key of a scenario
    (tmp_path / "searches").mkdir()
    write(tmp_path / "searches", SCENARIO, "rate.yaml")
    write(tmp_path / "searches", "start_value: 2\nbenchmark_config: rate.yaml\n", "other.yaml")
    path = write(tmp_path, "max_value: 8\nbenchmark_config: searches/other.yaml\n")
    result = CliRunner().invoke(cli.main, ["capacity-search", str(path)], prog_name="veeksha")
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        f"{path}:2:1: benchmark_config: 'searches/other.yaml' is a capacity-search file (it has "
        "benchmark_config), not a scenario: give the scenario file it names: "
        "benchmark_config: searches/rate.yaml"
    )
    assert "unknown key" not in result.output
    assert not (tmp_path / "capacity_search_output").exists()
    # one whose scenario is inline (here under the public wrapper)
    inline_search = "capacity_search_config:\n" + textwrap.indent(inline(), "  ")
    write(tmp_path / "searches", inline_search, "inline.yaml")
    path = write(tmp_path, "benchmark_config: searches/inline.yaml\n")
    with pytest.raises(ScenarioError) as caught:
        load_capacity_config(path)
    (issue,) = caught.value.issues
    assert (issue.line, issue.path) == (1, "benchmark_config")
    assert issue.message.endswith(
        "not a scenario: give a scenario: its benchmark_config mapping, here or in a file of "
        "its own"
    )
