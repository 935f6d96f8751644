"""A recorded run replays as itself: its trace.jsonl, read as a timed_synthetic_session trace,
gives the same sessions, DAGs, lengths and think times (compared in both runs' Parquet)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.engine.outcome import RunOutcome
from veeksha.record.trace import read_trace
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

RECORDED = """
seed: 11
traffic_scheduler:
  type: rate
  interval_generator: {{type: poisson, arrival_rate: 50}}
session_generator:
  type: synthetic
  session_graph:
    type: branching
    num_layers_generator: {{type: uniform, min: 1, max: 3}}
    layer_width_generator: {{type: uniform, min: 1, max: 3}}
    request_wait_generator: {{type: poisson, arrival_rate: 100}}
  channels: [{{type: text, body_length_generator: {{type: uniform, min: 3, max: 40}}}}]
  output_spec: {{text: {{output_length_generator: {{type: uniform, min: 1, max: 9}}}}}}
client: {{api_base: {api_base}, model: veeksha-sim}}
runtime: {{max_sessions: 10, benchmark_timeout: 60, num_workers: 1}}
"""

REPLAY = """
seed: 12
traffic_scheduler: {{type: trace, speedup: 1.0}}
session_generator:
  type: trace
  trace_file: {trace}
  flavor: {{type: timed_synthetic_session}}
  wrap_mode: false
client: {{api_base: {api_base}, model: veeksha-sim}}
runtime: {{max_sessions: 100, benchmark_timeout: 60, num_workers: 1}}
"""


def _shapes(run_dir: Path) -> list[list[tuple]]:  # type: ignore[type-arg]
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert (requests.status == "ok").all()
    shapes = []
    for _, group in requests.sort_values(["session_id", "node_id"]).groupby("session_id"):
        shapes.append(
            [
                (
                    tuple(row.parents),
                    None if pd.isna(row.history_parent) else int(row.history_parent),
                    row.wait_after_ready,
                    row.target_prompt_tokens,
                    row.prompt_tokens_new,
                    row.requested_output_tokens,
                )
                for row in group.itertuples()
            ]
        )
    return shapes


def _run(text: str, folder: Path, name: str = "a.yaml") -> RunOutcome:
    """Run the scenario ``text`` (read as the file ``name``) into ``folder``, in this process."""
    return run_as_the_command(load_scenario_text(text, name), folder, quiet=True, plots=False)


def test_a_recorded_run_replays_as_the_same_sessions(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    api_base = fast_simulator.base_url
    first = tmp_path / "recorded"
    _run(RECORDED.format(api_base=api_base), first)
    second = tmp_path / "replayed"
    outcome = _run(REPLAY.format(api_base=api_base, trace=first / "trace.jsonl"), second, "b.yaml")
    assert outcome.stop_reason == "completed"
    recorded, replayed = _shapes(first), _shapes(second)
    assert len(recorded) == 10
    assert any(len(s) > 2 for s in recorded)  # real DAGs, not only chains
    assert replayed == recorded  # same order: sessions replay in order of arrival
    # the arrivals too: the replay's planned starts are the recorded roots' dispatch times
    starts: dict[int, float] = {}
    for entry in read_trace(first / "trace.jsonl"):
        starts[entry.session_id] = min(starts.get(entry.session_id, 1e18), entry.dispatched_at)
    recorded_starts = np.array(sorted(starts.values()))
    replayed_starts = np.sort(pd.read_parquet(second / "sessions.parquet").started_at.to_numpy())
    assert np.abs(replayed_starts - (recorded_starts - recorded_starts[0])).max() < 1e-6


CLIENTS = """
clients:
  - {name: small, model: m-small}
  - {name: big, model: m-big}
runtime: {max_sessions: 3, benchmark_timeout: 60, num_workers: 1, priority: node}
"""
AGENTS = """
seed: 5
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  session_graph:
    type: agent_rounds
    rounds: 2
    agents:
      - {id: pro, client: big, priority: 2}
      - {id: con, client: small, speak_after_within_round: [pro]}
  channels: [{body_length_generator: {type: uniform, min: 3, max: 20}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 3}}}
"""
AGENTS_REPLAY = """
seed: 6
traffic_scheduler: {{type: trace, speedup: 1.0}}
session_generator:
  type: trace
  trace_file: {trace}
  flavor: {{type: timed_synthetic_session}}
  wrap_mode: false
"""


def _routes(run_dir: Path) -> list[tuple[int, int, str | None, int | None, int | None]]:
    """(session rank, node, client, priority, prompt length) of every trace.jsonl line."""
    entries = read_trace(run_dir / "trace.jsonl")
    ranks = {s: r for r, s in enumerate(sorted({e.session_id for e in entries}))}
    return sorted(
        (ranks[e.session_id], e.node_id, e.client, e.priority, e.target_prompt_tokens)
        for e in entries
    )


def test_a_recorded_multi_client_run_replays_to_the_same_clients(tmp_path: Path) -> None:
    first = tmp_path / "recorded"
    _run(AGENTS + CLIENTS, first)
    replay = AGENTS_REPLAY.format(trace=first / "trace.jsonl") + CLIENTS
    second = tmp_path / "replayed"
    _run(replay, second, "b.yaml")
    recorded = _routes(first)
    assert len(recorded) == 3 * 2 * 2
    assert {(r[2], r[3]) for r in recorded} == {("big", 2), ("small", None)}
    assert _routes(second) == recorded
    rows = pd.read_parquet(second / "requests.parquet")
    assert (rows.status == "ok").all()
    assert set(zip(rows.client, rows.model, strict=True)) == {
        ("big", "m-big"),
        ("small", "m-small"),
    }


TOOLS = """
seed: 31
simulator: {{seed: 3, ttft_ms: 2, itl_ms: 1, faults: {{invalid_answer_probability: {invalid}}}}}
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.01}}}}
session_generator:
  type: synthetic
  session_graph:
    type: branching
    num_layers_generator: {{type: fixed, value: 4}}
    layer_width_generator: {{type: uniform, min: 1, max: 2}}
    request_wait_generator: {{type: poisson, arrival_rate: 100}}
    tool_probability: 0.5
    tool_latency_generator: {{type: poisson, arrival_rate: 40}}
    validation: {{type: regex, pattern: '^(?!INVALID)'}}
    max_reprompts: 2
  channels: [{{type: text, body_length_generator: {{type: uniform, min: 3, max: 20}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 3}}}}}}
runtime: {{max_sessions: 6, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{include_content: true}}
"""
TOOLS_REPLAY = """
seed: 32
client: {{api_base: {api_base}, model: veeksha-sim}}
traffic_scheduler: {{type: trace, speedup: 1.0}}
session_generator:
  type: trace
  trace_file: {trace}
  flavor: {{type: timed_synthetic_session}}
  wrap_mode: false
runtime: {{max_sessions: 100, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{include_content: true}}
"""


def _results(run_dir: Path) -> dict[tuple[int, int], str | None]:
    """(session rank, tool node) → its result, from trace.jsonl; checks that each history
    child of a tool was sent the tool's result."""
    entries = read_trace(run_dir / "trace.jsonl")
    ranks = {s: r for r, s in enumerate(sorted({e.session_id for e in entries}))}
    results = {(e.session_id, e.node_id): e.result for e in entries if e.kind == "tool"}
    children = 0
    for e in entries:
        if (e.session_id, e.history_parent) in results and e.kind is None and not e.attempt:
            assert e.messages is not None
            assert e.messages[-2] == ("user", results[(e.session_id, e.history_parent)])
            children += 1
    assert children
    return {(ranks[s], n): text for (s, n), text in results.items()}


def _nodes(run_dir: Path) -> dict[tuple[int, int], tuple]:  # type: ignore[type-arg]
    """(session rank, node) → (kind, attempts, planned tool latency or prompt length)."""
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert (rows.status == "ok").all()
    ranks = {s: r for r, s in enumerate(sorted(rows.session_id.unique()))}
    nodes = {}
    for (session, node), group in rows.groupby(["session_id", "node_id"]):
        first = group.sort_values("attempt").iloc[0]
        tool = first.kind == "tool"
        if tool:  # no request: no worker, no client, no prompt sent
            assert len(group) == 1
            assert pd.isna(first.worker_id)
            assert pd.isna(first.client)
        nodes[(ranks[session], int(node))] = (
            first.kind,
            len(group),
            tuple(first.parents),
            first.target_prompt_tokens if not tool else None,
            _valid(group),
        )
    # dependency order: a node starts after each of its parents' last attempt completed
    done = rows.groupby(["session_id", "node_id"]).completed_at.max()
    for row in rows[rows.attempt == 0].itertuples():
        for parent in row.parents:
            assert row.sent_at >= done[(row.session_id, parent)] - 1e-9
    return nodes


def _valid(group: pd.DataFrame) -> tuple[bool | None, ...]:
    """Each attempt's ``valid`` of one node's rows, in attempt order."""
    return tuple(None if pd.isna(v) else bool(v) for v in group.sort_values("attempt").valid)


def test_a_recorded_run_with_tools_and_reprompts_replays_as_itself(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    first = tmp_path / "recorded"
    _run(TOOLS.format(invalid=0.4), first)
    entries = read_trace(first / "trace.jsonl")
    tools = [e for e in entries if e.kind == "tool"]
    assert tools
    assert all(e.latency_s and e.client is None for e in tools)
    assert any(e.attempt for e in entries)  # re-prompts were recorded
    replay = TOOLS_REPLAY.format(trace=first / "trace.jsonl", api_base=fast_simulator.base_url)
    second = tmp_path / "replayed"
    outcome = _run(replay, second, "b.yaml")
    assert outcome.stop_reason == "completed"
    recorded, replayed = _nodes(first), _nodes(second)
    # same nodes, kinds, attempts (each as valid as recorded), DAGs and prompt lengths
    assert replayed == recorded
    # the same tool calls, each as long as recorded (planned: the call's sent→completed)
    latency = {}
    for path in (first, second):
        rows = pd.read_parquet(path / "requests.parquet")
        tool_rows = rows[rows.kind == "tool"].sort_values(["session_id", "node_id"])
        latency[path] = (tool_rows.completed_at - tool_rows.sent_at).to_numpy()
    recorded_latency = sorted(e.latency_s for e in tools)
    assert np.allclose(sorted(latency[first]), recorded_latency, atol=1e-6)
    assert np.allclose(sorted(latency[second]), recorded_latency, atol=1e-6)
    # the replay sent requests for the LLM attempts only
    llm_attempts = sum(1 for e in entries if e.kind is None)
    replayed_rows = pd.read_parquet(second / "requests.parquet")
    assert replayed_rows.worker_id.notna().sum() == llm_attempts
    # with include_content, a tool's recorded result is its result in the replay too
    recorded_results = _results(first)
    assert all(recorded_results.values())
    assert _results(second) == recorded_results


NEVER_VALID = """
seed: 41
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.01}}}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: fixed, value: 2}}
    request_wait_generator: {{type: fixed, interval: 0.01}}
    validation: {{type: regex, pattern: '^NEVER MATCHED$'}}
    max_reprompts: 1
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 5}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 2}}}}}}
client: {{api_base: {api_base}, model: veeksha-sim}}
runtime: {{max_sessions: 2, benchmark_timeout: 60, num_workers: 1}}
"""


def _attempts(run_dir: Path) -> dict[tuple[int, int, int], bool | None]:
    """(session rank, node, attempt) → valid, of every row."""
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert (rows.status == "ok").all()
    ranks = {s: r for r, s in enumerate(sorted(rows.session_id.unique()))}
    return {
        (ranks[row.session_id], row.node_id, row.attempt): None if pd.isna(row.valid) else row.valid
        for row in rows.itertuples()
    }


def test_a_node_whose_reprompts_ran_out_replays_as_failed(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    api_base = fast_simulator.base_url
    first = tmp_path / "recorded"
    _run(NEVER_VALID.format(api_base=api_base), first)
    recorded = _attempts(first)
    assert len(recorded) == 2 * 2 * 2  # every node re-prompted once, and failed both times
    assert set(recorded.values()) == {False}
    assert {e.valid for e in read_trace(first / "trace.jsonl")} == {False}

    def replay(trace: Path, name: str) -> dict[tuple[int, int, int], bool | None]:
        text = REPLAY.format(api_base=api_base, trace=trace)
        outcome = _run(text, tmp_path / name, "b.yaml")
        assert outcome.stop_reason == "completed"
        return _attempts(tmp_path / name)

    assert replay(first / "trace.jsonl", "replayed") == recorded
    # a failed node still released its child, after its last attempt (with its final answer)
    rows = pd.read_parquet(tmp_path / "replayed" / "requests.parquet")
    last = rows[(rows.node_id == 0) & (rows.attempt == 1)].set_index("session_id")
    child = rows[(rows.node_id == 1) & (rows.attempt == 0)].set_index("session_id")
    assert (child.sent_at >= last.completed_at.reindex(child.index)).all()
    # an old trace.jsonl (no valid): the same attempts, the last one passing, as before
    old = tmp_path / "old.jsonl"
    old.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k != "valid"}) + "\n"
            for line in (first / "trace.jsonl").read_text().splitlines()
        )
    )
    assert replay(old, "old") == {key: bool(key[2]) for key in recorded}


ROUNDS = """
seed: 51
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.01}}}}
client: {{api_base: {api_base}, model: veeksha-sim}}
session_generator:
  type: synthetic
  session_graph:
    type: agent_rounds
    rounds: 2
    agents:
      - {{id: pro}}
      - id: search
        kind: tool
        latency_generator: {{type: fixed, interval: 0.01}}
        result_length_generator: {{type: fixed, value: 4}}
        speak_after_within_round: [pro]
      - {{id: con, speak_after_within_round: [search]}}
  channels: [{{body_length_generator: {{type: fixed, value: 5}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 3}}}}}}
runtime: {{max_sessions: 2, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{include_content: true}}
"""


def _turns(run_dir: Path) -> dict[tuple[int, int], tuple]:  # type: ignore[type-arg]
    """(session rank, node) → (agent, round, each message's role and "<id>: " speaker), from
    trace.jsonl, and the same agent and round in requests.parquet."""
    entries = read_trace(run_dir / "trace.jsonl")
    ranks = {s: r for r, s in enumerate(sorted({e.session_id for e in entries}))}
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert (rows.status == "ok").all()
    rows = rows.set_index(["session_id", "node_id"])
    turns = {}
    for e in entries:
        row = rows.loc[(e.session_id, e.node_id)]
        agent, number = (None if pd.isna(v) else v for v in (row.agent, row["round"]))
        assert (agent, number) == (e.agent, e.round)
        speakers = tuple(
            (role, text.split(": ", 1)[0] if role == "user" and ": " in text else None)
            for role, text in e.messages or ()
        )
        turns[(ranks[e.session_id], e.node_id)] = (e.agent, e.round, e.kind, speakers)
    return turns


def test_a_recorded_agent_rounds_run_replays_with_the_same_conversations(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    api_base = fast_simulator.base_url
    first = tmp_path / "recorded"
    _run(ROUNDS.format(api_base=api_base), first)
    recorded = _turns(first)
    assert len(recorded) == 2 * 2 * 3
    # con of round 1 sees pro, search and con of round 0 and pro and search of its own round
    assert recorded[(0, 5)] == (
        "con",
        1,
        None,
        (
            *(("user", "pro"), ("user", "search"), ("assistant", None)),  # round 0
            *(("user", "pro"), ("user", "search"), ("user", None)),  # round 1, its prompt
        ),
    )

    def replay(trace: Path, name: str) -> dict[tuple[int, int], tuple]:  # type: ignore[type-arg]
        text = TOOLS_REPLAY.format(api_base=api_base, trace=trace)
        outcome = _run(text, tmp_path / name, "b.yaml")
        assert outcome.stop_reason == "completed"
        return _turns(tmp_path / name)

    assert replay(first / "trace.jsonl", "replayed") == recorded
    # summary.json: the replay's agents and rounds, from its rows (its scenario has no graph)
    assert _agent_counts(tmp_path / "replayed") == _agent_counts(first)
    assert list(_agent_counts(first)[0]) == ["pro", "search", "con"]
    # the tools' recorded results are merged as they were: "search: <result>"
    for path in (first, tmp_path / "replayed"):
        entries = read_trace(path / "trace.jsonl")
        results = {(e.session_id, e.node_id): e.result for e in entries if e.kind == "tool"}
        con = next(e for e in entries if e.agent == "con" and e.round == 0)
        assert con.messages is not None
        assert con.messages[1] == ("user", f"search: {results[(con.session_id, 1)]}")
    # an old trace.jsonl (none of them): each node sends its own prompt only, as before
    old = tmp_path / "old.jsonl"
    old.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k not in _AGENT_KEYS}) + "\n"
            for line in (first / "trace.jsonl").read_text().splitlines()
        )
    )
    assert set(replay(old, "old").values()) == {
        (None, None, None, (("user", None),)),
        (None, None, "tool", ()),
    }


_AGENT_KEYS = {"agent", "round", "transcript"}


def _agent_counts(run_dir: Path) -> tuple[dict[str, tuple], dict[str, int]]:  # type: ignore[type-arg]
    """summary.json's agents (kind, turns, re-prompts) and rounds (requests), in its order."""
    summary = json.loads((run_dir / "summary.json").read_text())
    agents = {
        name: (a["kind"], a["turns"], a.get("reprompts")) for name, a in summary["agents"].items()
    }
    return agents, {r: v["requests"] for r, v in summary["rounds"].items()}
