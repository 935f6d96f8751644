"""A recorded abandonment replays as itself: trace.jsonl's ``abandon_after`` (written for each
request the scenario's ``abandonment`` chose) becomes the replayed node's ``abandon_after_s``,
in JSON lines, a ``session_context`` or a CSV; a bad value is exit 2 at its line; a trace without
it replays as before; a replay's own ``abandonment`` overrides only the requests it chooses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from tests.unit.record.builders import T0, make_node, ns
from veeksha.dispatch.messages import WorkItem
from veeksha.generate.abandonment import Abandoner
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import TraceFileError, open_trace, prepare
from veeksha.record.trace import TraceWriter
from veeksha.scenario.abandonment import Abandonment

TOK = BuiltinTokenizer()
FLAVOR = "timed_synthetic_session"


def _line(session: int, node: int, after: Any = None, **extra: Any) -> dict[str, Any]:
    """A trace.jsonl line of a linear chat's ``node`` (``after``: its ``abandon_after``)."""
    line: dict[str, Any] = {
        "session_id": session,
        "node_id": node,
        "parents": [] if node == 0 else [node - 1],
        "history_parent": None if node == 0 else node - 1,
        "wait_after_ready": 0.0,
        "target_prompt_tokens": 5,
        "requested_output_tokens": 3,
        **extra,
    }
    if after is not None:
        line["abandon_after"] = after
    return line


def _sessions(path: Path) -> list[SessionSpec]:
    trace = open_trace(trace_scenario(path, FLAVOR))
    sessions = trace.sessions(0, TOK)
    return [sessions.session(i) for i in range(trace.prepared.sessions)]


def _marks(sessions: list[SessionSpec]) -> list[list[float | None]]:
    return [[node.abandon_after_s for node in session.nodes] for session in sessions]


def test_each_marked_row_is_abandoned_after_its_seconds(tmp_path: Path) -> None:
    context_row = {
        "session_id": 1,
        "new_input_length": 5,
        "output_length": 3,
        "abandon_after": 9.0,  # (the session_context's key wins over the column)
        "session_context": {"node_id": 0, "parent_nodes": [], "abandon_after": 0.75},
    }
    rows = [
        _line(0, 2, 1.5),  # (out of order: renumbered, its mark goes with it)
        _line(0, 0),
        _line(0, 1, 0),
        context_row,
        _line(2, 0),
    ]
    path = write_jsonl(tmp_path / "trace.jsonl", rows)
    assert _marks(_sessions(path)) == [[None, 0.0, 1.5], [0.75], [None]]


def test_a_csv_gives_it_as_text_and_an_empty_cell_as_none(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "t.csv",
        "session_id,node_id,parents,new_input_length,output_length,abandon_after",
        ["s,0,[],5,3,0.25", "s,1,[0],5,3,", "s,2,[1],5,3, 3 ", "u,0,[],5,3,"],
    )
    assert _marks(_sessions(path)) == [[0.25, None, 3.0], [None]]


def test_a_re_prompted_node_keeps_its_mark(tmp_path: Path) -> None:
    rows = [_line(0, 0, 0.5, valid=False), _line(0, 0, 0.5, attempt=1), _line(0, 1)]
    (session,) = _sessions(write_jsonl(tmp_path / "trace.jsonl", rows))
    assert [n.max_reprompts for n in session.nodes] == [1, 0]
    assert _marks([session]) == [[0.5, None]]


@pytest.mark.parametrize(
    ("after", "shown"),
    [(-1, "-1"), (-0.5, "-0.5"), ("x", "'x'"), ("0.5", "'0.5'"), (True, "True"), ([1], "[1]")],
)
def test_a_bad_value_is_refused_at_its_line(tmp_path: Path, after: Any, shown: str) -> None:
    path = write_jsonl(tmp_path / "trace.jsonl", [_line(0, 0), _line(0, 1, after)])
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, FLAVOR))
    expected = f"{path}:2: abandon_after = {shown} must be 0 or more seconds (a number)"
    assert str(caught.value).startswith(expected), str(caught.value)


@pytest.mark.parametrize(
    ("cell", "shown"),
    [("-2", "-2"), ("nan", "'nan'"), ("inf", "'inf'"), ("soon", "'soon'"), ("1e999", "'1e999'")],
)
def test_a_bad_csv_cell_is_refused_at_its_line(tmp_path: Path, cell: str, shown: str) -> None:
    path = write_csv(
        tmp_path / "t.csv",
        "session_id,node_id,parents,new_input_length,output_length,abandon_after",
        ["s,0,[],5,3,", "s,1,[0],5,3,0.5", f"s,2,[1],5,3,{cell}"],
    )
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, FLAVOR))
    expected = f"{path}:4: abandon_after = {shown} must be 0 or more seconds"
    assert str(caught.value).startswith(expected), str(caught.value)


def test_a_tool_row_cannot_be_abandoned(tmp_path: Path) -> None:
    tool = _line(0, 1, 0.5, kind="tool", latency_s=0.2)
    path = write_jsonl(tmp_path / "trace.jsonl", [_line(0, 0), tool])
    with pytest.raises(TraceFileError) as caught:
        open_trace(trace_scenario(path, FLAVOR))
    assert str(caught.value) == (
        f"{path}:2: abandon_after is given on a tool row; a tool sends no request to abandon,"
        " drop it"
    )


def test_a_trace_without_the_column_abandons_nothing(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "trace.jsonl", [_line(0, 0), _line(0, 1), _line(1, 0)])
    trace = open_trace(trace_scenario(path, FLAVOR))
    assert pq.read_table(trace.prepared.cache).column("abandon_after").null_count == 3
    assert _marks(_sessions(path)) == [[None, None], [None]]


def test_marks_survive_sessions_across_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # row groups of a few rows: most hold no mark, and a piece's sessions span several
    monkeypatch.setattr(prepare, "ROW_GROUP_ROWS", 4)
    expected = [[0.25 * s if s % 9 == 0 and n == 1 else None for n in range(2)] for s in range(60)]
    rows = [_line(s, n, marks[n]) for s, marks in enumerate(expected) for n in range(2)]
    trace = open_trace(trace_scenario(write_jsonl(tmp_path / "trace.jsonl", rows), FLAVOR))
    assert trace.table.num_groups > 10
    sessions = trace.sessions(0, TOK)
    assert _marks([sessions.session(i) for i in range(60)]) == expected


def test_the_trace_writer_records_the_mark_and_its_lines_replay_it(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = TraceWriter(path, include_content=False, t0_ns=T0)
    marked = make_node(0, abandon_after_s=0.125)
    plain = make_node(1)
    trace.add("measured", 3, marked, WorkItem(7, [], 3, ns(1.0)))
    trace.add("measured", 3, plain, WorkItem(8, [], 3, ns(1.5)))
    trace.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["abandon_after"] == 0.125
    assert "abandon_after" not in lines[1]
    assert _marks(_sessions(path)) == [[0.125, None]]


def test_a_replays_own_abandonment_overrides_only_the_requests_it_chooses(
    tmp_path: Path,
) -> None:
    recorded = [[0.5 + s + 0.1 * n if (s + n) % 2 else None for n in range(4)] for s in range(20)]
    rows = [_line(s, n, recorded[s][n]) for s in range(20) for n in range(4)]
    replayed = _sessions(write_jsonl(tmp_path / "trace.jsonl", rows))
    config = Abandonment.model_validate(
        {"probability": 0.3, "after_generator": {"type": "fixed", "interval": 0.05}}
    )
    drawn = _marks([Abandoner(config, 7)(s) for s in _sessions(_unmarked(tmp_path, rows))])
    both = _marks([Abandoner(config, 7)(s) for s in replayed])
    chosen = [(s, n) for s in range(20) for n in range(4) if drawn[s][n] is not None]
    assert 10 <= len(chosen) <= 40  # (the seed chooses some requests, not all)
    for s in range(20):
        for n in range(4):
            assert both[s][n] == (0.05 if (s, n) in chosen else recorded[s][n]), (s, n)


def _unmarked(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    """The same trace without its marks (its sessions draw the same choices)."""
    plain = [{k: v for k, v in row.items() if k != "abandon_after"} for row in rows]
    return write_jsonl(tmp_path / "plain.jsonl", plain)
