"""summary.json's ``clients`` section (evaluate/groups): each client's model is the one its
requests named, also when the scenario leaves it to the target."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.evaluate.builders import request, requests_table, scenario, session, sessions_table
from veeksha.evaluate import compute_evaluation
from veeksha.evaluate.groups import resolved_models


def _rows() -> list[dict[str, Any]]:
    return [request(i, ready=0.1 * i) | {"client": "default", "kind": "llm"} for i in range(6)]


def _clients(client: dict[str, Any], target: str | None) -> dict[str, Any]:
    scen = scenario(client=client)
    sessions = sessions_table([session(i, 0.1 * i, 0.1 * i + 0.5) for i in range(6)])
    info = {"run_id": "r"} if target is None else {"run_id": "r", "target": target}
    evaluation = compute_evaluation(scen, requests_table(_rows()), sessions, info)
    return evaluation.summary["clients"]  # type: ignore[no-any-return]


def test_a_client_without_a_model_reports_the_model_the_target_resolved() -> None:
    # the built-in simulator served the run: the scenario names no model, the requests went
    # out as veeksha-sim (requests.parquet's model column)
    target = json.dumps({"kind": "simulator", "api_base": "http://h/v1", "model": "veeksha-sim"})
    clients = _clients({"max_in_flight": 2}, target)
    assert clients["default"]["model"] == "veeksha-sim"
    assert clients["default"]["requests"] == 6


def test_the_scenario_model_wins_and_no_target_leaves_it_unknown() -> None:
    target = json.dumps({"kind": "endpoint", "api_base": "http://h/v1", "model": "m"})
    named = {"api_base": "http://h/v1", "model": "m", "max_in_flight": 2}
    assert _clients(named, target)["default"]["model"] == "m"
    assert _clients({"max_in_flight": 2}, None)["default"]["model"] is None


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (json.dumps({"model": "x"}), {"default": "x"}),
        (
            json.dumps({"model": "a", "clients": [{"name": "p", "model": "a"}, {"name": "q"}]}),
            {"p": "a"},
        ),
        ("not json", {}),
        (json.dumps([1, 2]), {}),
        (None, {}),
    ],
)
def test_resolved_models(target: str | None, expected: dict[str, str]) -> None:
    assert resolved_models(target) == expected


def test_a_multi_phase_run_counts_every_phase_but_the_warmup() -> None:
    # rows of named phases (no row is "measured" there): the clients section is theirs
    phases = ["warmup", "warmup", "slow", "slow", "fast", "fast"]
    rows = [
        request(i, ready=0.5 * i, phase=phase) | {"client": "default", "kind": "llm"}
        for i, phase in enumerate(phases)
    ]
    scen = scenario(
        client={"max_in_flight": 2},
        phases=[
            {"name": "warmup", "duration": 1},
            {"name": "slow", "duration": 1},
            {"name": "fast", "duration": 1, "arrival_rate": 20},
        ],
        runtime={"max_sessions": -1, "benchmark_timeout": 60},
    )
    sessions = sessions_table(
        [session(i, 0.5 * i, 0.5 * i + 0.5, phase=phase) for i, phase in enumerate(phases)]
    )
    summary = compute_evaluation(scen, requests_table(rows), sessions, {"run_id": "r"}).summary
    clients = summary["clients"]
    assert clients["default"]["requests"] == 4 == summary["requests"]["total"]
    assert clients["default"]["ok"] == 4
    assert clients["default"]["ttfc_s"]["count"] == 4
