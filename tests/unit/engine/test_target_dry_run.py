"""A dry run records the model each client's requests would carry in the run it stands for
(the built-in simulator's or the managed server's when the client names none), so its rows
are the run's rows: a dry run and a run of one scenario differ in answers and measured times
only (docs/engine.md, "Determinism")."""

from __future__ import annotations

from pathlib import Path

import pytest

from veeksha.engine.target import TargetContext
from veeksha.errors import ConfigurationError
from veeksha.scenario.loader import load_scenario, load_scenario_text


def _dry_models(text: str) -> dict[str, str]:
    scenario = load_scenario_text(text, "s.yaml")
    with TargetContext(scenario, dry_run=True) as target:
        return {client.name: client.model for client in target.clients}


@pytest.fixture(autouse=True)
def _no_endpoint_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)


def test_a_client_without_a_model_served_by_the_simulator_records_the_simulators() -> None:
    assert _dry_models("seed: 1\n") == {"default": "veeksha-sim"}
    assert _dry_models("simulator: {model: my-model}\n") == {"default": "my-model"}


def test_several_clients_record_their_own_model_or_the_simulators() -> None:
    text = "clients:\n  - {name: a, model: m-a}\n  - {name: b}\nsimulator: {model: s}\n"
    assert _dry_models(text) == {"a": "m-a", "b": "s"}


def test_a_managed_server_records_its_model() -> None:
    text = "server: {type: veeksha_sim}\nsimulator: {model: sim-m}\n"
    assert _dry_models(text) == {"default": "sim-m"}
    text = "server: {type: vllm, model: org/served}\n"
    assert _dry_models(text) == {"default": "org/served"}


def test_a_clients_own_model_wins_and_an_endpoint_without_one_stays_dry_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _dry_models("client: {model: mine}\n") == {"default": "mine"}
    # (OPENAI_API_BASE without a model: a run refuses it; the dry run has no model to name)
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:9/v1")
    assert _dry_models("seed: 1\n") == {"default": "dry-run"}


def test_an_unset_header_variable_is_refused_as_the_run_would_refuse_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run sends nothing, but the run it stands for reads each ``${NAME}`` of the
    headers before t0: a dry run that checks a scenario refuses an unset one alike."""
    monkeypatch.delenv("S21B_GATEWAY_KEY", raising=False)
    path = tmp_path / "s.yaml"
    path.write_text("seed: 1\nclient:\n  headers:\n    X-Api-Key: ${S21B_GATEWAY_KEY}\n")
    scenario = load_scenario(path)
    with pytest.raises(ConfigurationError) as error, TargetContext(scenario, dry_run=True):
        pass
    assert str(error.value) == (
        f"{path}:4:5: client.headers.X-Api-Key: ${{S21B_GATEWAY_KEY}} is not set (or is empty) "
        "in this environment: export S21B_GATEWAY_KEY, or write the header's value in the "
        "scenario"
    )
    monkeypatch.setenv("S21B_GATEWAY_KEY", "k")
    with TargetContext(scenario, dry_run=True) as target:
        assert target.kind == "dry_run"
