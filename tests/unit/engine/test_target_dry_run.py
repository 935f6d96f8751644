"""A dry run records the model each client's requests would carry in the run it stands for
(the built-in simulator's or the managed server's when the client names none), so its rows
are the run's rows: a dry run and a run of one scenario differ in answers and measured times
only (docs/engine.md, "Determinism")."""

from __future__ import annotations

import pytest

from veeksha.engine.target import TargetContext
from veeksha.scenario.loader import load_scenario_text


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
