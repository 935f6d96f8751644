"""The timed_synthetic_session flavor: DAGs from session_context, legacy chains, validation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import TraceFileError, open_trace

TOK = BuiltinTokenizer()
FLAVOR = "timed_synthetic_session"


def row(session: Any, node: int, parents: list[int], history: int | None, **extra: Any) -> dict:
    context = {
        "node_id": node,
        "parent_nodes": parents,
        "history_parent": history,
        "wait_after_ready": extra.pop("wait", 0.0),
    }
    return {
        "session_id": session,
        "new_input_length": extra.pop("new", 10 + node),
        "output_length": extra.pop("out", 5),
        "session_context": context,
        **extra,
    }


def _sessions(path: Path) -> list:  # type: ignore[type-arg]
    trace = open_trace(trace_scenario(path, FLAVOR))
    sessions = trace.sessions(0, TOK)
    return [sessions.session(i) for i in range(trace.prepared.sessions)]


def test_a_dag_is_renumbered_in_topological_order(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl",
        [  # node ids 10, 30, 20: given out of order, renumbered 0, 1, 2 by readiness
            row("s", 30, [10, 20], 20, wait=0.5, new=7),
            row("s", 10, [], None, new=3),
            row("s", 20, [10], 10, wait=1.5, new=5),
        ],
    )
    (session,) = _sessions(path)
    assert [n.prompt_tokens for n in session.nodes] == [3, 5, 7]
    assert [n.parents for n in session.nodes] == [(), (0,), (0, 1)]
    assert [n.history_parent for n in session.nodes] == [None, 0, 1]
    assert [n.wait_after_ready_s for n in session.nodes] == [0.0, 1.5, 0.5]
    assert session.children == [[1, 2], [2], []]


def test_veeksha_trace_lines_are_a_valid_input(tmp_path: Path) -> None:
    line = {"phase": "measured", "request_id": 9, "dispatched_at": 1.25}
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [
            {"session_id": 4, "node_id": 0, "parents": [], "history_parent": None,
             "wait_after_ready": 0.0, "target_prompt_tokens": 12,
             "requested_output_tokens": 3, **line},
            {"session_id": 4, "node_id": 1, "parents": [0], "history_parent": 0,
             "wait_after_ready": 0.75, "target_prompt_tokens": 8,
             "requested_output_tokens": 6, **line},
        ],
    )  # fmt: skip
    (session,) = _sessions(path)
    assert [(n.parents, n.history_parent, n.wait_after_ready_s) for n in session.nodes] == [
        ((), None, 0.0),
        ((0,), 0, 0.75),
    ]
    assert [(n.prompt_tokens, n.max_tokens) for n in session.nodes] == [(12, 3), (8, 6)]


def _line(node: int, parents: list[int], **extra: Any) -> dict:
    """A trace.jsonl line of session 4."""
    return {
        "phase": "measured", "session_id": 4, "node_id": node, "request_id": node,
        "parents": parents, "history_parent": parents[0] if parents else None,
        "wait_after_ready": 0.0, "dispatched_at": 0.5, "target_prompt_tokens": 6,
        "requested_output_tokens": 3, **extra,
    }  # fmt: skip


def test_tool_lines_and_reprompts_of_a_trace_replay_as_such(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [
            _line(0, []),
            _line(0, [], attempt=1),
            _line(0, [], attempt=2),
            _line(1, [0], kind="tool", latency_s=0.25, result="the tool said so"),
            _line(2, [0], kind="tool", latency_s=0, requested_output_tokens=6),
            _line(3, [1, 2]),
        ],
    )
    (session,) = _sessions(path)
    assert [n.kind for n in session.nodes] == ["llm", "tool", "tool", "llm"]
    assert [n.latency_s for n in session.nodes] == [0.0, 0.25, 0.0, 0.0]
    assert [n.max_reprompts for n in session.nodes] == [2, 0, 0, 0]
    check = session.nodes[0].validation
    assert check is not None
    assert [check("any answer") is None for _ in range(3)] == [False, False, True]
    assert session.nodes[3].validation is None
    # the recorded result is the tool's result; without one, a placeholder of its tokens
    assert session.nodes[1].prompt == "the tool said so"
    placeholder = session.nodes[2].prompt
    assert len(placeholder.split()) == session.nodes[2].prompt_tokens == 6
    assert session.nodes[2].max_tokens == 6
    (again,) = _sessions(path)
    assert again.nodes[2].prompt == placeholder  # deterministic


def _answers(session: Any) -> list[list[bool]]:
    """Per node, whether each of its replayed attempts passes (as many as it may send)."""
    out = []
    for node in session.nodes:
        check = node.validation
        out.append(
            [] if check is None else [check("x") is None for _ in range(node.max_reprompts + 1)]
        )
    return out


def test_recorded_validity_replays_as_recorded(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [
            _line(0, [], valid=False),
            _line(0, [], attempt=1, valid=False),  # re-prompts ran out: the last fails too
            _line(1, [0], valid=True),
            _line(2, [0], valid=False),  # checked with max_reprompts 0: it failed once
            _line(3, [1, 2]),
            _line(3, [1, 2], attempt=1),  # an old line: no valid, the last attempt passes
        ],
    )
    (session,) = _sessions(path)
    assert [n.max_reprompts for n in session.nodes] == [1, 0, 0, 1]
    assert _answers(session) == [[False, False], [True], [False], [False, True]]
    csv = write_csv(
        tmp_path / "t.csv",
        "session_id,node_id,parents,new_input_length,output_length,attempt,valid",
        ["s,0,[],5,3,,false", "s,0,[],5,3,1,False", "s,1,[0],5,3,,", "s,2,[0],5,3,,true"],
    )
    (session,) = _sessions(csv)
    assert _answers(session) == [[False, False], [], [True]]


def test_a_valid_attempt_that_was_re_prompted_is_refused(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl", [_line(0, [], valid=True), _line(0, [], attempt=1, valid=False)]
    )
    with pytest.raises(TraceFileError, match=":1: attempt 0 of node 0 is valid, yet the node has"):
        open_trace(trace_scenario(path, FLAVOR))


def _speaker(node: int, parents: list[int], agent: str, round_: int, transcript: list[int]):
    """A trace.jsonl line of an agent_rounds node (no history parent)."""
    return {
        **_line(node, parents), "history_parent": None, "agent": agent, "round": round_,
        "transcript": transcript,
    }  # fmt: skip


def test_agent_rounds_lines_replay_with_their_agents_and_transcripts(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "trace.jsonl",
        [
            _speaker(0, [], "pro", 0, []),
            _speaker(1, [0], "search", 0, [0]) | {"kind": "tool", "latency_s": 0.1},
            _speaker(2, [1], "con", 0, [0, 1]),
            _speaker(3, [0, 1, 2], "pro", 1, [0, 1, 2]),
        ],
    )
    (session,) = _sessions(path)
    assert [(n.agent, n.round, n.transcript) for n in session.nodes] == [
        ("pro", 0, ()),
        ("search", 0, (0,)),
        ("con", 0, (0, 1)),
        ("pro", 1, (0, 1, 2)),
    ]
    assert [n.history_parent for n in session.nodes] == [None] * 4
    # an old line (none of them): the history parent's conversation, as before
    (old,) = _sessions(write_jsonl(tmp_path / "old.jsonl", [_line(0, []), _line(1, [0])]))
    assert [(n.agent, n.round, n.transcript) for n in old.nodes] == [(None, -1, None)] * 2
    # a session_context carries them too
    rows = [row("s", 0, [], None), row("s", 1, [0], None)]
    rows[0]["session_context"].update(agent="pro", round=0, transcript=[])
    rows[1]["session_context"].update(agent="con", round=0, transcript=[0])
    (session,) = _sessions(write_jsonl(tmp_path / "context.jsonl", rows))
    assert [(n.agent, n.transcript) for n in session.nodes] == [("pro", ()), ("con", (0,))]
    # a CSV gives the agent as plain text
    csv = write_csv(
        tmp_path / "t.csv",
        "session_id,node_id,parents,new_input_length,output_length,agent,round,transcript",
        ["s,0,[],5,3,pro,0,[]", "s,1,[0],5,3,con,0,[0]"],
    )
    (session,) = _sessions(csv)
    assert [(n.agent, n.round, n.transcript) for n in session.nodes] == [
        ("pro", 0, ()),
        ("con", 0, (0,)),
    ]


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        ({"agent": 7}, ":2: agent 7 must be the agent's id (a string)"),
        ({"round": -1}, ":2: round -1 must be an integer, 0 or more"),
        ({"round": "1"}, ":2: round '1' must be an integer, 0 or more"),
        ({"transcript": [0, "x"]}, ":2: transcript [0, 'x'] must be a list of node ids"),
        ({"transcript": [1]}, ":2: the transcript of node 1 names node 1, which is not an"),
        ({"transcript": [5]}, ":2: the transcript of node 1 names node 5, which is not an"),
        ({"agent": None}, ":2: transcript is given without agent; add the node's agent"),
        ({"transcript": None}, ":2: node 1 has no transcript while other rows of its session"),
    ],
)
def test_bad_agent_rounds_lines_name_the_offending_row(
    tmp_path: Path, second: dict[str, Any], expected: str
) -> None:
    bad = {k: v for k, v in (_speaker(1, [0], "con", 0, [0]) | second).items() if v is not None}
    path = write_jsonl(tmp_path / "trace.jsonl", [_speaker(0, [], "pro", 0, []), bad])
    with pytest.raises(TraceFileError, match=re.escape(expected)) as caught:
        open_trace(trace_scenario(path, FLAVOR))
    assert "trace.jsonl" in str(caught.value)


def test_node_kind_in_a_session_context(tmp_path: Path) -> None:
    rows = [row("s", 0, [], None), row("s", 1, [0], 0)]
    rows[1]["session_context"].update(kind="tool", latency_s="0.5")
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    (session,) = _sessions(path)
    assert [(n.kind, n.latency_s) for n in session.nodes] == [("llm", 0.0), ("tool", 0.5)]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"kind": "robot"}, ":2: kind 'robot' is not a node kind; write llm or tool"),
        ({"kind": "tool"}, ":2: latency_s = None: a tool row needs latency_s"),
        ({"kind": "tool", "latency_s": -1}, ":2: latency_s = -1.0: a tool row needs"),
        ({"latency_s": 1}, ':2: latency_s is given on an LLM row; add "kind": "tool"'),
        ({"kind": "tool", "latency_s": 1, "attempt": 1}, ":2: attempt 1 on a tool row"),
        ({"attempt": -1}, ":2: attempt -1 must be an integer, 0 or more"),
        ({"attempt": 1}, ":2: attempt 1 of node 1 comes without the node's first attempt"),
        ({"valid": "maybe"}, ":2: valid 'maybe' must be true or false"),
        ({"valid": 1}, ":2: valid 1 must be true or false"),
        ({"kind": "tool", "latency_s": 1, "valid": True}, ":2: valid is given on a tool row"),
    ],
)
def test_bad_node_kinds_name_the_offending_row(
    tmp_path: Path, extra: dict[str, Any], expected: str
) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [_line(0, []), _line(1, [0], **extra)])
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, FLAVOR))
    assert expected in str(caught.value), str(caught.value)
    assert str(caught.value).startswith(str(path) + ":")


def test_legacy_rows_form_a_chain_by_turn_index(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "t.csv",
        "session_id,turn_idx,input_length,new_input_length,output_length,"
        "wait_after_previous_response_s",
        ["a,1,50,20,5,2.5", "a,0,30,30,4,9", "b,0,7,7,1,"],
    )
    first, second = _sessions(path)
    assert [n.prompt_tokens for n in first.nodes] == [30, 20]
    assert [n.wait_after_ready_s for n in first.nodes] == [0.0, 2.5]
    assert [n.history_parent for n in first.nodes] == [None, 0]
    assert [n.prompt_tokens for n in second.nodes] == [7]


def test_session_context_as_json_text_in_a_csv(tmp_path: Path) -> None:
    context = (
        '"{""node_id"": 1, ""parent_nodes"": [0], ""history_parent"": 0, ""wait_after_ready"": 2}"'
    )
    root = '"{""node_id"":0,""parent_nodes"":[],""history_parent"":null,""wait_after_ready"":0}"'
    path = write_csv(
        tmp_path / "t.csv",
        "session_id,new_input_length,output_length,session_context",
        [f"x,4,2,{root}", f"x,6,3,{context}"],
    )
    (session,) = _sessions(path)
    assert [n.wait_after_ready_s for n in session.nodes] == [0.0, 2.0]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (
            [row(1, 0, [], None), row(1, 0, [], None)],
            ":2: node_id 0 appears twice in session 1 (first on line 1)",
        ),
        ([row(1, 0, [], None), row(1, 1, [7], 7)], ":2: node 1 has parent 7, which is not"),
        ([row(1, 0, [], None), row(1, 1, [0], 3)], ":2: history_parent 3 of node 1 is not one"),
        (
            [row(1, 0, [], None), row(1, 1, [0, 2], 0), row(1, 2, [1], 1)],
            ":2: node 1 is on a cycle",
        ),
        (
            [row(1, 0, [], None), {"session_id": 1, "new_input_length": 3, "output_length": 1}],
            ":2: some rows of this session give their topology",
        ),
        ([row(1, 0, [], None, wait=-1)], ":1: wait_after_ready = -1 must be 0 or more"),
        ([{"session_id": 1, "output_length": 1}], ":1: no new_input_length (or input_length)"),
    ],
)
def test_bad_topology_names_the_offending_row(
    tmp_path: Path, rows: list[dict], expected: str
) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, FLAVOR))
    assert expected in str(caught.value), str(caught.value)
    assert str(caught.value).startswith(str(path) + ":")
