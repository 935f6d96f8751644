"""Trace rows that name their client and priority: NodeSpec.client (an index into the
scenario's clients) and priority; an unknown client name is exit 2 at its row's line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import TraceFileError, open_trace

TOK = BuiltinTokenizer()
CLIENTS = {"clients": [{"name": "small", "model": "a"}, {"name": "big", "model": "b"}]}


def _nodes(path: Path, flavor: str, **extra: Any) -> list[tuple[int, int]]:
    trace = open_trace(trace_scenario(path, flavor, **(CLIENTS | extra)))
    sessions = trace.sessions(0, TOK)
    specs = [sessions.session(i) for i in range(trace.prepared.sessions)]
    return [(n.client, n.priority) for s in specs for n in s.nodes]


def test_request_log_rows_name_their_client_and_priority(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "t.csv",
        "input_length,output_length,client,priority",
        ["5,3,big,2", "5,3,,0", "5,3,small,-1", "5,3,big,0"],
    )
    assert _nodes(path, "request_log") == [(1, 2), (0, 0), (0, -1), (1, 0)]


def test_grouped_request_log_rows_keep_theirs(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "t.csv",
        "session_id,input_length,output_length,client",
        ["s,5,3,big", "s,5,3,small", "t,5,3,big"],
    )
    assert _nodes(path, "request_log") == [(1, 0), (0, 0), (1, 0)]


def test_timed_session_context_wins_over_columns(tmp_path: Path) -> None:
    def row(node: int, parents: list[int], **extra: Any) -> dict[str, Any]:
        context = {"node_id": node, "parent_nodes": parents} | extra.pop("context", {})
        return {"session_id": 1, "new_input_length": 4, "output_length": 2} | {
            "session_context": context,
            **extra,
        }

    path = write_jsonl(
        tmp_path / "t.jsonl",
        [
            row(0, [], client="small", context={"client": "big", "priority": 5}),
            row(1, [0], client="big", priority=3),
            row(2, [1]),
        ],
    )
    assert _nodes(path, "timed_synthetic_session") == [(1, 5), (1, 3), (0, 0)]


def test_the_single_client_is_named_default(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", "input_length,output_length,client", ["5,3,default"])
    trace = open_trace(trace_scenario(path))
    assert trace.sessions(0, TOK).session(0).nodes[0].client == 0


@pytest.mark.parametrize(
    ("rows", "line", "words"),
    [
        (["5,3,small,0", "5,3,medium,0", "5,3,medium,0"], 3, "client 'medium' is not a client"),
        (["5,3,small,0", "5,3,small,high"], 3, "priority"),
    ],
)
def test_bad_routing_names_the_row(tmp_path: Path, rows: list[str], line: int, words: str) -> None:
    path = write_csv(tmp_path / "t.csv", "input_length,output_length,client,priority", rows)
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, **CLIENTS))
    assert f"t.csv:{line}" in str(caught.value)
    assert words in str(caught.value)


def test_a_bad_priority_in_session_context_names_the_row(tmp_path: Path) -> None:
    rows = [
        {"session_id": 1, "new_input_length": 4, "output_length": 2, "session_context": c}
        for c in (
            {"node_id": 0, "parent_nodes": []},
            {"node_id": 1, "parent_nodes": [0], "priority": "x"},
        )
    ]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, "timed_synthetic_session"))
    assert "t.jsonl:2" in str(caught.value)
    assert "priority 'x' is not an integer" in str(caught.value)
