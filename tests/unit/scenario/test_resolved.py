"""The resolved config.yaml, secret redaction, the scenario hash and the run folder."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from veeksha.errors import ConfigurationError
from veeksha.record.run_folder import create_run_folder, write_config
from veeksha.scenario.loader import dump_resolved_yaml, scenario_hash

from .helpers import load

SECRET = "sk-very-secret-123"
WITH_KEY = f"client: {{api_base: 'http://h:1/v1', model: m, api_key: {SECRET}}}\nseed: 3\n"


def test_resolved_yaml_has_every_default_and_no_secret() -> None:
    scenario = load(WITH_KEY)
    text = dump_resolved_yaml(scenario)
    assert SECRET not in text
    data = YAML(typ="safe").load(text)
    assert data["client"]["api_key"] == "***"
    assert data["runtime"]["max_sessions"] == 25
    assert data["traffic_scheduler"]["interval_generator"] == {
        "type": "poisson",
        "arrival_rate": 1.0,
    }
    assert list(data) == list(type(scenario).model_fields)  # the models' order


def test_resolved_yaml_reloads_to_the_same_scenario() -> None:
    scenario = load("session_generator: {type: synthetic, session_graph: {type: branching}}")
    again = load(dump_resolved_yaml(scenario))
    assert again == scenario


def test_a_long_value_stays_on_its_keys_line() -> None:
    folder = "/tmp/pytest-of-someone/pytest-123/popen-gw1/a_rather_long_test_folder_name0/out"
    text = dump_resolved_yaml(load(f"output_dir: {folder}\n"))
    assert f"\noutput_dir: {folder}\n" in text  # (not folded onto a second line)


def test_absent_key_stays_null() -> None:
    data = YAML(typ="safe").load(dump_resolved_yaml(load("seed: 1")))
    assert data["client"]["api_key"] is None


def test_hash_is_short_stable_and_ignores_secrets_and_output_dir() -> None:
    base = load(WITH_KEY)
    digest = scenario_hash(base)
    assert len(digest) == 10
    assert int(digest, 16) >= 0
    assert scenario_hash(load(WITH_KEY)) == digest
    assert scenario_hash(load(WITH_KEY.replace(SECRET, "other"))) == digest
    assert scenario_hash(load(WITH_KEY + "output_dir: elsewhere\n")) == digest
    assert scenario_hash(load(WITH_KEY.replace("seed: 3", "seed: 4"))) != digest
    # spelling out a default does not change what is measured
    assert scenario_hash(load("seed: 42")) == scenario_hash(load("runtime: {max_sessions: 25}"))


def test_a_simulator_that_does_not_think_hashes_as_before_its_reasoning_keys() -> None:
    # the hash of the default scenario from before simulator.reasoning_tokens existed
    assert scenario_hash(load("seed: 42")) == "41a55509ee"
    plain = scenario_hash(load("seed: 42"))
    assert scenario_hash(load("simulator: {reasoning_tokens: 0}")) == plain
    thinking = scenario_hash(load("simulator: {reasoning_tokens: 3}"))
    assert thinking != plain
    assert scenario_hash(
        load("simulator: {reasoning_tokens: 3, reasoning_field: reasoning}")
    ) not in (
        plain,
        thinking,
    )
    # one served model thinks: the key of its thinking counts, the simulator's own 0 too
    model = "simulator: {models: {m2: {reasoning_tokens: 2}}, reasoning_field: %s}"
    assert len({scenario_hash(load(model % f)) for f in ("reasoning", "reasoning_content")}) == 2


def test_run_folder_name_and_no_overwrite(tmp_path: Path) -> None:
    scenario = load(WITH_KEY)
    now = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    first = create_run_folder(tmp_path / "out", scenario, now)
    second = create_run_folder(tmp_path / "out", scenario, now)
    assert first.name == f"20250102T030405Z-{scenario_hash(scenario)}"
    assert second.name == f"{first.name}-2"
    assert first.is_dir()
    assert second.is_dir()
    config = write_config(first, scenario)
    assert config == first / "config.yaml"
    assert SECRET not in config.read_text(encoding="utf-8")
    assert load(config.read_text(encoding="utf-8")).seed == 3


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output_dir(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(ConfigurationError, match=r"locked.*--output-dir"):
        create_run_folder(locked / "out", load("seed: 1"))


def test_output_dir_that_is_a_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"cannot create a run folder in .*file"):
        create_run_folder(blocker, load("seed: 1"))
