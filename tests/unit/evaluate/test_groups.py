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


def _turn(
    session_id: int, node: int, agent: str, round_: int, *, tool: bool = False, attempt: int = 0
) -> dict[str, Any]:
    """A row of an agent_rounds session (a tool's: no client); sent at 0.1 s per node."""
    ready = session_id + 0.1 * node + 0.01 * attempt
    return request(session_id, node, ready=ready, chunks=(ready + 0.05, ready + 0.1)) | {
        "client": None if tool else "default",
        "kind": "tool" if tool else "llm",
        "agent": agent,
        "round": round_,
        "attempt": attempt,
    }


def _debate_rows() -> list[dict[str, Any]]:
    """Two sessions of two rounds of pro, search (a tool) and con, as a replay records them:
    con's round-1 turn re-prompted once; the rows in the order they completed, con first."""
    rows = []
    for sid in (0, 1):
        for round_ in (0, 1):
            first = 3 * round_
            rows += [
                _turn(sid, first + 2, "con", round_),
                _turn(sid, first, "pro", round_),
                _turn(sid, first + 1, "search", round_, tool=True),
            ]
    return [*rows, _turn(0, 5, "con", 1, attempt=1)]


def test_a_replay_of_an_agent_run_reports_its_agents_and_rounds_from_its_rows() -> None:
    # the replayed scenario has no agent_rounds graph (the trace's rows are the sessions), yet
    # its rows name their agent and round: summary.json had no agents and no rounds section
    scen = scenario(
        traffic_scheduler={"type": "trace"},
        session_generator={
            "type": "trace",
            "trace_file": "recorded/trace.jsonl",
            "flavor": {"type": "timed_synthetic_session"},
        },
    )
    sessions = sessions_table([session(i, float(i), i + 0.8) for i in (0, 1)])
    summary = compute_evaluation(
        scen, requests_table(_debate_rows()), sessions, {"run_id": "r"}
    ).summary
    agents = summary["agents"]
    assert list(agents) == ["pro", "search", "con"]  # the recording's order: each's first node
    assert agents["pro"]["kind"] == "llm"
    assert (agents["pro"]["turns"], agents["pro"]["reprompts"]) == (4, 0)
    assert (agents["con"]["turns"], agents["con"]["reprompts"]) == (4, 1)
    assert agents["con"]["e2e_s"]["count"] == 5
    assert agents["search"] == {
        "kind": "tool",
        "turns": 4,
        "call_s": agents["search"]["call_s"],
    }
    assert agents["search"]["call_s"]["count"] == 4
    assert list(summary["rounds"]) == ["0", "1"]
    assert [r["requests"] for r in summary["rounds"].values()] == [4, 5]  # (LLM rows only)
    assert "clients" not in summary  # (one client, no cap: as in the recorded run)


def test_each_phase_has_the_clients_and_agents_sections_of_its_own_rows() -> None:
    scen = scenario(
        clients=[{"name": "default", "max_in_flight": 2}],
        session_generator={
            "type": "synthetic",
            "session_graph": {
                "type": "agent_rounds",
                "rounds": 2,
                "agents": [
                    {"id": "pro"},
                    {
                        "id": "search",
                        "kind": "tool",
                        "speak_after_within_round": ["pro"],
                        "latency_generator": {"type": "fixed", "interval": 0.01},
                        "result_length_generator": {"type": "fixed", "value": 4},
                    },
                    {"id": "con", "speak_after_within_round": ["search"]},
                ],
            },
        },
        phases=[{"name": "slow", "duration": 1}, {"name": "fast", "duration": 1}],
        runtime={"max_sessions": -1, "benchmark_timeout": 60},
    )
    rows = [row | {"phase": "slow" if row["session_id"] == 0 else "fast"} for row in _debate_rows()]
    sessions = sessions_table(
        [session(i, float(i), i + 0.8, phase=("slow", "fast")[i]) for i in (0, 1)]
    )
    summary = compute_evaluation(scen, requests_table(rows), sessions, {"run_id": "r"}).summary
    assert summary["clients"]["default"]["requests"] == 9  # the whole run: both phases
    slow, fast = summary["phases"]["slow"], summary["phases"]["fast"]
    assert slow["clients"]["default"]["requests"] == 5  # session 0: con re-prompted once
    assert fast["clients"]["default"]["requests"] == 4
    assert slow["clients"]["default"]["max_in_flight"] == 2
    assert list(slow["agents"]) == list(fast["agents"]) == ["pro", "search", "con"]
    assert (slow["agents"]["con"]["turns"], slow["agents"]["con"]["reprompts"]) == (2, 1)
    assert (fast["agents"]["con"]["turns"], fast["agents"]["con"]["reprompts"]) == (2, 0)
    assert [r["requests"] for r in fast["rounds"].values()] == [2, 2]
