"""client.max_model_len: oversized trace requests skipped (counted) or clipped to fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.generate.traces import TraceFileError, open_trace
from veeksha.generate.traces.fit import ContextLimit, fit_session, linear_contexts
from veeksha.generate.traces.prepare import cache_key


def _open(path: Path, limit: int, oversized: str = "skip", flavor: str = "request_log"):  # type: ignore[no-untyped-def]
    return open_trace(
        trace_scenario(
            path,
            flavor,
            generator={"oversized": oversized},
            client={"type": "openai_completions", "max_model_len": limit},
        )
    )


def _lengths(trace) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    rows = trace.table.rows(0, trace.prepared.sessions)
    return [
        (int(p), int(o))
        for piece in rows
        for p, o in zip(piece.prompt_tokens, piece.output_tokens, strict=True)
    ]


def test_oversized_requests_are_skipped_and_counted_with_their_lines(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "10,10", "2,2"])
    trace = _open(path, 12)
    assert _lengths(trace) == [(5, 3), (2, 2)]
    p = trace.prepared
    assert (p.oversized_rows, p.oversized_sessions, p.oversized_lines) == (1, 1, [3])
    assert p.not_replayed() == {"oversized": 1}
    (warning,) = p.warnings()
    assert "1 not replayed: oversized" in warning
    assert "first lines 3" in warning
    assert trace.summary()["not_replayed"] == {"oversized": 1}


def test_the_summary_says_which_policy_checked_the_rows_and_none_without_a_limit(
    tmp_path: Path,
) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "10,10"])
    unchecked = open_trace(trace_scenario(path, generator={"oversized": "truncate"})).summary()
    assert (unchecked["max_model_len"], unchecked["oversized"]) == (None, None)
    assert unchecked["not_replayed"] == {}
    for policy in ("skip", "truncate", "send"):
        summary = _open(path, 12, policy).summary()
        assert (summary["max_model_len"], summary["oversized"]) == (12, policy)


def test_truncate_clips_the_output_then_a_corpus_prompt(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "10,10", "15,3"])
    trace = _open(path, 12, "truncate")
    assert _lengths(trace) == [(5, 3), (10, 2), (11, 1)]
    assert trace.prepared.not_replayed() == {"truncated": 2}


def test_send_checks_nothing(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "10,10"])
    trace = _open(path, 12, "send")
    assert _lengths(trace) == [(5, 3), (10, 10)]
    assert trace.prepared.not_replayed() == {}


def test_a_chat_is_judged_with_its_history(tmp_path: Path) -> None:
    rows = ["a,5,3", "a,2,3", "b,4,1", "b,2,1", "c,6,6", "c,1,1"]
    path = write_csv(tmp_path / "a.csv", "session_id,input_length,output_length", rows)
    skipped = _open(path, 12)
    assert _lengths(skipped) == [(4, 1), (2, 1)]  # a: 8 then 13 > 12; c: 12 then 14
    assert (skipped.prepared.oversized_rows, skipped.prepared.oversized_sessions) == (4, 2)
    assert skipped.prepared.oversized_lines == [3, 7]  # each chat's first request over
    clipped = _open(path, 12, "truncate")
    # a's second turn clipped to 2 output tokens; c's second turn has no room: c not replayed
    assert _lengths(clipped) == [(5, 3), (2, 2), (4, 1), (2, 1)]
    assert clipped.prepared.not_replayed() == {"oversized": 2, "truncated": 1}


def test_the_not_replayed_lines_name_the_oversized_policy_in_effect(tmp_path: Path) -> None:
    rows = ["a,5,3", "a,2,3", "b,4,1", "b,2,1", "c,6,6", "c,1,1"]
    path = write_csv(tmp_path / "a.csv", "session_id,input_length,output_length", rows)
    (skipped,) = _open(path, 12).prepared.warnings()
    assert skipped == (
        "trace: 4 not replayed: oversized (rows of sessions longer than client.max_model_len"
        " (oversized: skip)); first lines 3, 7"
    )
    oversized, truncated = _open(path, 12, "truncate").prepared.warnings()
    assert oversized == (
        "trace: 2 not replayed: oversized (rows of sessions with a request whose history and"
        " prompt leave no room for an output in client.max_model_len (oversized: truncate clips"
        " outputs, never a later turn's prompt or the trace's own text)); first lines 7"
    )
    assert "(oversized: skip)" not in oversized
    clipped = "truncated (requests clipped to client.max_model_len (oversized: truncate))"
    assert truncated == f"trace: 1 sent clipped: {clipped}"
    assert _open(path, 12, "send").prepared.warnings() == []


def test_a_trace_nothing_of_which_fits_names_the_fix_the_policy_leaves(tmp_path: Path) -> None:
    rows = ["a,11,1", "a,3,1"]  # the second turn has no room: nothing fits even clipped
    path = write_csv(tmp_path / "a.csv", "session_id,input_length,output_length", rows)
    with pytest.raises(TraceFileError) as caught:
        _open(path, 12, "truncate")
    assert str(caught.value).endswith("; raise client.max_model_len")
    with pytest.raises(TraceFileError) as caught:
        _open(path, 12)
    assert str(caught.value).endswith(
        "; raise client.max_model_len or set session_generator.oversized: truncate"
    )


def test_with_clients_the_messages_name_the_window_the_rows_exceeded(tmp_path: Path) -> None:
    """clients: each row is held to its own client's max_model_len, and the messages name that
    key (was: the smallest client's, whichever client the rows went to)."""
    rows = ["a,5,3,", "a,2,3,", "b,4,1,small", "b,2,1,small", "c,6,6,small", "c,1,1,small"]
    header = "session_id,input_length,output_length,client"
    path = write_csv(tmp_path / "a.csv", header, rows)
    clients = [
        {"name": "big", "type": "openai_completions", "max_model_len": 99},
        {"name": "small", "type": "openai_completions", "max_model_len": 12},
    ]
    trace = open_trace(trace_scenario(path, clients=clients))
    (skipped,) = trace.warnings()
    assert "(rows of sessions longer than clients[1].max_model_len (oversized: skip))" in skipped
    assert "first lines 7" in skipped
    nothing = write_csv(tmp_path / "b.csv", header, ["a,11,2,small"])
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(nothing, clients=clients))
    assert "longer than clients[1].max_model_len," in str(caught.value)
    assert "; raise clients[1].max_model_len or set session_generator.oversized" in (
        str(caught.value)
    )
    # rows of both clients over their windows: both named
    both = write_csv(tmp_path / "c.csv", header, ["a,99,2,", "b,11,2,small", "c,1,1,"])
    (skipped,) = open_trace(trace_scenario(both, clients=clients)).warnings()
    assert (
        "longer than their clients' windows (clients[0].max_model_len, clients[1].max_model_len)"
        in skipped
    )


def test_a_dataset_prompt_is_never_cut(tmp_path: Path) -> None:
    rows = [{"input_length": 20, "output_length": 5, "hash_ids": [0, 1]}]
    rows.append({"input_length": 8, "output_length": 5, "hash_ids": [2]})
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    trace = open_trace(
        trace_scenario(
            path,
            "shared_prefix",
            generator={
                "oversized": "truncate",
                "flavor": {"type": "shared_prefix", "block_size": 16},
            },
            client={"type": "openai_completions", "max_model_len": 12},
        )
    )
    assert _lengths(trace) == [(8, 4)]
    assert trace.prepared.not_replayed() == {"oversized": 1, "truncated": 1}


def test_nothing_that_fits_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["50,3"])
    with pytest.raises(TraceFileError, match=r"longer than client\.max_model_len"):
        _open(path, 12)


def test_dag_contexts_follow_the_history_parent() -> None:
    prompt, output = [4, 5, 3], [4, 5, 3]
    limit = ContextLimit(18, truncate=False)
    # node 1: 8 + 10 = 18; node 2's history is node 0: 8 + 6 = 14
    assert fit_session(prompt, output, [None, 0, 0], [False] * 3, limit) == (True, 0)
    # node 2's history through node 1: 18 + 6 = 24
    assert fit_session(prompt, output, [None, 0, 1], [False] * 3, limit) == (False, 0)


def test_a_tool_node_is_never_oversized_and_passes_on_its_result() -> None:
    limit = ContextLimit(18, truncate=True)
    # node 1 a tool of 20 result tokens: never clipped; node 2 after it: 8 + 20 + 6 > 18
    prompt, output = [4, 20, 3], [4, 20, 3]
    tool = [False, True, False]
    assert fit_session(prompt, output, [None, 0, None], [False] * 3, limit, tool) == (True, 0)
    assert (prompt, output) == ([4, 20, 3], [4, 20, 3])
    assert fit_session(prompt, output, [None, 0, 1], [False] * 3, limit, tool) == (False, 0)
    # a tool of 2 tokens: its history child's context is 8 + 2 + 6 = 16, no clipping
    prompt, output = [4, 2, 3], [4, 2, 3]
    assert fit_session(prompt, output, [None, 0, 1], [False] * 3, limit, tool) == (True, 0)


def test_an_agent_rounds_node_holds_its_transcripts_turns() -> None:
    # pro (0), search (1, a tool of 6 result tokens), pro again (2): no history parents;
    # node 2 holds pro's answer 4 (its own), "search: " + 6 and its prompt 3 + output 3
    prompt, output = [4, 6, 3], [4, 6, 3]
    tool = [False, True, False]
    merged = ([[], [0], [0, 1]], ["pro", "search", "pro"])
    args = ([None] * 3, [False] * 3)
    assert fit_session(prompt, output, *args, ContextLimit(17, False), tool, merged) == (True, 0)
    assert fit_session(prompt, output, *args, ContextLimit(16, False), tool, merged) == (False, 0)
    # without its transcript, node 2 would hold its own 6 tokens only
    assert fit_session(prompt, output, *args, ContextLimit(16, False), tool) == (True, 0)
    # truncate clips its output to the room its transcript leaves
    assert fit_session(prompt, output, *args, ContextLimit(16, True), tool, merged) == (True, 1)
    assert output == [4, 6, 2]


def test_linear_contexts_restart_at_each_chat() -> None:
    contexts = linear_contexts(np.array([1, 2, 3, 4]), np.array([1, 1, 1, 1]), np.array([0, 2]))
    assert contexts.tolist() == [2, 5, 4, 9]


def test_validate_warns_of_the_rows_a_run_would_not_replay(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from veeksha.cli import main

    path = write_csv(tmp_path / "a.csv", "input_length,output_length", ["5,3", "10,10"])
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"session_generator: {{type: trace, trace_file: {path}}}\n"
        "client: {type: openai_completions, max_model_len: 12}\n"
    )
    result = CliRunner().invoke(main, ["validate", str(scenario)], env={"CI": "true"})
    assert result.exit_code == 0, result.output
    assert f"warning: {scenario}: trace: 1 not replayed: oversized" in result.output


def test_a_replayed_agent_rounds_session_is_fitted_with_its_transcripts(tmp_path: Path) -> None:
    def line(node: int, agent: str, transcript: list[int]) -> dict:  # type: ignore[type-arg]
        return {
            "session_id": 1, "node_id": node, "parents": transcript, "history_parent": None,
            "agent": agent, "round": 0, "transcript": transcript,
            "new_input_length": 4, "output_length": 4,
        }  # fmt: skip

    path = write_jsonl(tmp_path / "t.jsonl", [line(0, "pro", []), line(1, "con", [0])])
    # con holds "pro: " + 4 and its own 4 + 4: 13 tokens
    assert _lengths(_open(path, 13, flavor="timed_synthetic_session")) == [(4, 4), (4, 4)]
    trace = _open(path, 12, "truncate", flavor="timed_synthetic_session")
    assert _lengths(trace) == [(4, 4), (4, 3)]


CLIENTS = [
    {"name": "big", "max_model_len": 100},
    {"name": "small", "max_model_len": 12},
    {"name": "open"},  # (no window: not checked)
]


def test_with_clients_each_row_fits_its_own_clients_window(tmp_path: Path) -> None:
    # each row is held to the window of the client it names (none: the first's); was: the
    # smallest window of the clients judged every row
    rows = ["5,3,small", "10,10,small", "10,10,", "10,10,big", "200,10,open", "200,10,big"]
    path = write_csv(tmp_path / "a.csv", "input_length,output_length,client", rows)
    trace = open_trace(trace_scenario(path, clients=CLIENTS))
    assert trace.summary()["max_model_len"] == {"big": 100, "small": 12, "open": None}
    assert _lengths(trace) == [(5, 3), (10, 10), (10, 10), (200, 10)]
    assert trace.prepared.oversized_lines == [3, 7]
    (skipped,) = trace.warnings()
    assert "their clients' windows (clients[0].max_model_len, clients[1].max_model_len)" in (
        skipped
    )
    plain = write_csv(tmp_path / "b.csv", "input_length,output_length", ["5,3"])
    unchecked = open_trace(trace_scenario(plain, clients=[{"name": "a"}, {"name": "b"}]))
    assert unchecked.summary()["max_model_len"] is None


def test_with_clients_truncate_clips_a_row_to_its_own_clients_window(tmp_path: Path) -> None:
    rows = ["10,10,small", "10,200,big", "10,10,big"]
    path = write_csv(tmp_path / "a.csv", "input_length,output_length,client", rows)
    truncate = {"oversized": "truncate"}
    trace = open_trace(trace_scenario(path, clients=CLIENTS, generator=truncate))
    assert _lengths(trace) == [(10, 2), (10, 90), (10, 10)]
    (clipped,) = trace.warnings()
    assert "2 sent clipped: truncated (requests clipped to their clients' windows" in clipped


def test_with_clients_a_chat_is_held_to_each_turns_own_clients_window(tmp_path: Path) -> None:
    # a linear chat (grouped rows) and a DAG (timed sessions): a turn's context, its history
    # included, is its own client's to hold
    rows = ["s,5,5,big", "s,5,5,small", "t,5,5,small", "t,5,5,big", "u,5,5,small", "u,5,5,small"]
    path = write_csv(tmp_path / "a.csv", "session_id,input_length,output_length,client", rows)
    trace = open_trace(trace_scenario(path, clients=CLIENTS))
    # s's second turn holds 20 tokens for small (12): skipped; t's for big (100): kept
    assert _lengths(trace) == [(5, 5), (5, 5)]
    assert trace.prepared.oversized_lines == [3, 7]
    rows = ["v,2,2,big", "v,2,20,small", "w,2,2,small", "w,2,20,big"]
    path = write_csv(tmp_path / "b.csv", "session_id,input_length,output_length,client", rows)
    truncate = open_trace(
        trace_scenario(path, clients=CLIENTS, generator={"oversized": "truncate"})
    )
    # small's turn: 4 of history and 2 of prompt leave it 6 of output; big's all 20
    assert _lengths(truncate) == [(2, 2), (2, 6), (2, 2), (2, 20)]

    def line(node: int, client: str, output: int = 4) -> dict:  # type: ignore[type-arg]
        return {
            "session_id": 1, "node_id": node, "parents": [node - 1] if node else [],
            "history_parent": node - 1 if node else None,
            "new_input_length": 4, "output_length": output, "client": client,
        }  # fmt: skip

    dag = write_jsonl(tmp_path / "t.jsonl", [line(0, "small"), line(1, "big"), line(2, "open")])
    kept = open_trace(trace_scenario(dag, "timed_synthetic_session", clients=CLIENTS))
    assert _lengths(kept) == [(4, 4)] * 3  # (node 1 holds 16 tokens: big's 100, not small's 12)
    over = write_jsonl(tmp_path / "u.jsonl", [line(0, "big", 2), line(1, "small", 20)])
    clipped = open_trace(
        trace_scenario(
            over, "timed_synthetic_session", clients=CLIENTS, generator={"oversized": "truncate"}
        )
    )
    # node 1: 6 of history and 4 of prompt leave 2 of small's 12 for its output
    assert _lengths(clipped) == [(4, 2), (4, 2)]


def test_the_cache_key_holds_each_clients_window_and_one_clients_is_unchanged(
    tmp_path: Path,
) -> None:
    path = write_csv(
        tmp_path / "a.csv", "input_length,output_length,client", ["10,10,small", "5,3,big"]
    )
    assert len(_lengths(open_trace(trace_scenario(path, clients=CLIENTS)))) == 1
    again = open_trace(trace_scenario(path, clients=CLIENTS))
    assert again.prepared.reused
    assert [c["name"] for c in CLIENTS] == ["big", "small", "open"]
    wider = [CLIENTS[0], {"name": "small", "max_model_len": 30}, CLIENTS[2]]
    rebuilt = open_trace(trace_scenario(path, clients=wider))  # (one client's window changed)
    assert not rebuilt.prepared.reused
    assert len(_lengths(rebuilt)) == 2
    assert rebuilt.prepared.windows == {}
    # one client's cache: the key and the meta as before clients had windows of their own
    single = write_csv(tmp_path / "b.csv", "input_length,output_length", ["5,3", "10,10"])
    trace = _open(single, 12)
    settings = trace_scenario(single).session_generator.flavor.model_dump_json()
    key = cache_key(single, f"{settings}|ContextLimit(tokens=12, truncate=False)")
    assert Path(trace.prepared.cache).name == f".b.csv.{key}.veeksha.parquet"
    meta = json.loads(pq.read_metadata(trace.prepared.cache).metadata[b"veeksha.trace"])
    assert "windows" not in meta
    over = open_trace(trace_scenario(path, clients=CLIENTS)).prepared.cache
    assert json.loads(pq.read_metadata(over).metadata[b"veeksha.trace"])["windows"] == {
        "oversized": ["clients[1].max_model_len"]
    }
