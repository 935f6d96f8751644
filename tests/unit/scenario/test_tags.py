"""The YAML tags: !expand makes the points of a sweep, !include splices files; every error names
its file:line, including inside included files."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from veeksha import cli
from veeksha.errors import ScenarioError
from veeksha.scenario.loader import ScenarioSet, load_points, load_scenario

from .helpers import SWEEPS

RATE = "traffic_scheduler.interval_generator.arrival_rate"
PROMPT = "session_generator.channels[0].body_length_generator"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def points_of(folder: Path, text: str, overrides: tuple[str, ...] = ()) -> ScenarioSet:
    return load_points(write(folder, "s.yaml", text), overrides)


def refused(path: Path) -> list[str]:
    with pytest.raises(ScenarioError) as caught:
        load_points(path)
    return [str(issue) for issue in caught.value.issues]


TWO_TAGS = """\
traffic_scheduler:
  interval_generator: {type: poisson, arrival_rate: !expand [1, 2]}
session_generator:
  channels:
    - type: text
      body_length_generator: {type: fixed, value: !expand [8, 16, 32]}
"""


def test_the_product_runs_in_document_order_first_tag_outermost(tmp_path: Path) -> None:
    loaded = points_of(tmp_path, TWO_TAGS)
    assert loaded.is_sweep
    assert loaded.swept_keys == [RATE, f"{PROMPT}.value"]
    assert [p.label for p in loaded.points] == [
        f"arrival_rate={r},value={v}" for r in (1, 2) for v in (8, 16, 32)
    ]
    for point in loaded.points:
        rate = point.scenario.traffic_scheduler.interval_generator.arrival_rate  # type: ignore[union-attr]
        assert rate == point.values[RATE]
        body = point.scenario.session_generator.channels[0].body_length_generator  # type: ignore[union-attr]
        assert body.value == point.values[f"{PROMPT}.value"]  # type: ignore[union-attr]
    assert [p.index for p in loaded.points] == list(range(6))


def test_a_plain_file_is_one_point_and_set_applies_to_every_point(tmp_path: Path) -> None:
    plain = points_of(tmp_path, "seed: 4\n")
    assert not plain.is_sweep
    assert len(plain.points) == 1
    assert plain.points[0].label == ""
    loaded = points_of(tmp_path, TWO_TAGS, ("seed=9", "runtime.max_sessions=3"))
    assert {(p.scenario.seed, p.scenario.runtime.max_sessions) for p in loaded.points} == {(9, 3)}


def test_an_expand_inside_a_chosen_value_applies_to_that_value_only(tmp_path: Path) -> None:
    text = """\
session_generator:
  channels:
    - type: text
      body_length_generator: !expand
        - {type: fixed, value: !expand [8, 16]}
        - {type: uniform, min: 1, max: 4}
"""
    loaded = points_of(tmp_path, text)
    kinds = [p.scenario.session_generator.channels[0].body_length_generator for p in loaded.points]  # type: ignore[union-attr]
    assert [(k.type, getattr(k, "value", None)) for k in kinds] == [
        ("fixed", 8),
        ("fixed", 16),
        ("uniform", None),
    ]
    assert list(loaded.points[0].values) == [PROMPT, f"{PROMPT}.value"]
    assert list(loaded.points[2].values) == [PROMPT]
    assert loaded.short_names == {PROMPT: "body_length_generator", f"{PROMPT}.value": "value"}


def test_includes_are_relative_to_the_including_file_and_carry_their_tags(tmp_path: Path) -> None:
    write(tmp_path, "parts/traffic.yaml", "type: rate\ninterval_generator: !include gaps.yaml\n")
    write(tmp_path, "parts/gaps.yaml", "type: poisson\narrival_rate: !expand [3, 6]\n")
    main = write(
        tmp_path, "main/s.yaml", "seed: 1\ntraffic_scheduler: !include ../parts/traffic.yaml\n"
    )
    loaded = load_points(main)
    assert [p.values[RATE] for p in loaded.points] == [3, 6]
    # sweep.yaml holds the composed file: no !include left, the !expand kept
    assert "!include" not in loaded.source_yaml
    assert "arrival_rate: !expand [3, 6]" in loaded.source_yaml


def test_an_error_inside_an_included_file_names_that_file_and_line(tmp_path: Path) -> None:
    gaps = write(tmp_path, "gaps.yaml", "type: poisson\n\narrival_rate: -2\n")
    main = write(
        tmp_path, "s.yaml", "traffic_scheduler:\n  interval_generator: !include gaps.yaml\n"
    )
    (issue,) = refused(main)
    assert issue.startswith(f"{gaps}:3:1: {RATE}: must be greater than 0")


def test_an_error_of_some_points_names_those_points(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "s.yaml",
        "traffic_scheduler:\n  interval_generator:\n    arrival_rate: !expand [1, -1]\n",
    )
    (issue,) = refused(path)
    assert issue.startswith(f"{path}:3:5: {RATE}: must be greater than 0 (got -1)")
    assert issue.endswith("[sweep point 1 (arrival_rate=-1)]")


def test_include_cycles_are_refused_naming_both_files_and_lines(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", "seed: 1\nclient: !include b.yaml\n")
    b = write(tmp_path, "b.yaml", "model: m\nextra: !include a.yaml\n")
    (issue,) = refused(a)
    assert issue.startswith(f"{b}:2:8: !include cycle: {a}:2:9 !include b.yaml -> {b}:2:8")
    assert "comes back to" in issue
    itself = write(tmp_path, "self.yaml", "client: !include self.yaml\n")
    (issue,) = refused(itself)
    assert issue.startswith(f"{itself}:1:9: !include cycle")


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("seed: 1\nclient: !include nowhere.yaml\n", "2:9", "!include nowhere.yaml: cannot read"),
        ("seed: 1\nclient: !include [a.yaml]\n", "2:9", "!include takes one file path"),
        ("seed: !expand []\n", "1:7", "seed: !expand of an empty list makes no run"),
        (
            "seed: !expand 3\n",
            "1:7",
            "seed: !expand takes a list of values, e.g. !expand [4, 8, 16] (got '3')",
        ),
        (
            "runtime:\n  max_sessions: !expand {a: 1}\n",
            "2:17",
            "runtime.max_sessions: !expand takes a list of values",
        ),
        ("runtime:\n  max_sessions: !sweep [1]\n", "2:17", "unknown tag !sweep"),
    ],
)
def test_bad_tags_are_refused_at_their_file_and_line(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    path = write(tmp_path, "s.yaml", text)
    (issue,) = refused(path)
    assert issue.startswith(f"{path}:{where}: {message}"), issue


def test_one_scenario_loaders_refuse_a_sweep(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", "seed: !expand [1, 2]\n")
    with pytest.raises(ScenarioError, match=r"s.yaml:1:7: seed: !expand makes a sweep of 2 runs"):
        load_scenario(path)


def test_secrets_never_reach_the_composed_source(tmp_path: Path) -> None:
    loaded = points_of(tmp_path, "client: {api_key: sk-hidden, model: !expand [a, b]}\n")
    assert "sk-hidden" not in loaded.source_yaml
    assert "***" in loaded.source_yaml


def test_validate_lists_the_points_and_refuses_bad_tags_with_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    good = runner.invoke(cli.main, ["validate", *map(str, SWEEPS)], prog_name="veeksha")
    assert good.exit_code == 0, good.output
    sweep = write(tmp_path, "s.yaml", TWO_TAGS)
    shown = runner.invoke(cli.main, ["validate", str(sweep), "--set", "seed=3"])
    assert shown.exit_code == 0
    assert f"{sweep}: ok, a sweep of 6 points" in shown.stdout
    assert "    5  arrival_rate=2,value=32" in shown.stdout
    empty = write(tmp_path, "e.yaml", "seed: !expand []\n")
    bad = runner.invoke(cli.main, ["validate", str(empty)])
    assert bad.exit_code == 2
    assert (
        bad.stderr.strip()
        == f"{empty}:1:7: seed: !expand of an empty list makes no run; give at least one value"
    )
    ran = runner.invoke(cli.main, ["run", str(empty), "--output-dir", str(tmp_path / "out")])
    assert ran.exit_code == 2
    assert "Traceback" not in ran.output
    assert not (tmp_path / "out").exists()


def test_an_override_of_a_swept_key_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "s.yaml", TWO_TAGS)
    for override in (f"{RATE}=3", "traffic_scheduler.interval_generator={type: fixed}"):
        with pytest.raises(ScenarioError) as caught:
            load_points(path, (override,))
        (issue,) = caught.value.issues
        assert str(issue).startswith(f"--set {override}: traffic_scheduler.interval_generator")
        assert f"swept by !expand at {path}:2" in str(issue)


def test_an_override_of_a_type_that_drops_a_swept_key_is_refused(tmp_path: Path) -> None:
    # (a type's change keeps only the keys the new type accepts: the swept key would vanish)
    text = "traffic_scheduler:\n  type: rate\n" + TWO_TAGS.removeprefix("traffic_scheduler:\n")
    path = write(tmp_path, "s.yaml", text)
    generator = "traffic_scheduler.interval_generator"
    for override in ("traffic_scheduler.type=concurrent", f"{generator}.type=fixed"):
        with pytest.raises(ScenarioError) as caught:
            load_points(path, (override,))
        (issue,) = caught.value.issues
        where = override.split("=")[0]
        assert str(issue).startswith(
            f"--set {override}: {where}: changes the section's type, which drops"
        )
        assert f"{RATE}, swept by !expand at {path}:3" in str(issue)
    # a type that keeps the swept key is a normal override: gamma takes arrival_rate too
    kept = load_points(path, (f"{generator}.type=gamma",))
    rates = [p.scenario.traffic_scheduler.interval_generator.arrival_rate for p in kept.points]
    assert rates == [1, 1, 1, 2, 2, 2]
