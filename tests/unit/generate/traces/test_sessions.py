"""Trace sessions: exact prompts, determinism, pieces across row groups, wrap, the timeline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.unit.generate.traces.helpers import trace_scenario, write_csv, write_jsonl
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.generate.traces import TraceFileError, open_trace, prepare, reader
from veeksha.generate.traces.sessions import PIECE

TOK = BuiltinTokenizer()


def _log(path: Path, n: int, timed: bool = True) -> Path:
    rows = [(f"{0.5 * i:.3f}," if timed else "") + f"{1 + i % 37},{1 + i % 11}" for i in range(n)]
    header = ("timestamp," if timed else "") + "input_length,output_length"
    return write_csv(path, header, rows)


def test_prompts_have_exactly_the_trace_lengths(tmp_path: Path) -> None:
    trace = open_trace(trace_scenario(_log(tmp_path / "t.csv", 40)))
    sessions = trace.sessions(7, TOK)
    for i in range(40):
        (node,) = sessions.session(i).nodes
        assert TOK.count(node.prompt) == node.prompt_tokens == 1 + i % 37
        assert node.max_tokens == 1 + i % 11
        assert sessions.session(i).session_id == i


def test_same_file_and_seed_same_sessions_whatever_the_access_order(tmp_path: Path) -> None:
    trace = open_trace(trace_scenario(_log(tmp_path / "t.csv", 600)))
    picked = range(0, 1200, 5)  # across pieces and the wrap; a fresh object for each
    forward = [trace.sessions(3, TOK).session(i) for i in picked]
    backward = trace.sessions(3, TOK)
    assert [backward.session(i) for i in reversed(picked)][::-1] == forward
    other_seed = trace.sessions(4, TOK).session(5)
    assert other_seed.nodes[0].prompt != forward[5].nodes[0].prompt


def test_pieces_read_across_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prepare, "ROW_GROUP_ROWS", 100)
    trace = open_trace(trace_scenario(_log(tmp_path / "t.csv", 3 * PIECE)))
    assert trace.table.num_groups > 3
    sessions = trace.sessions(1, TOK)
    lengths = [sessions.session(i).nodes[0].prompt_tokens for i in range(3 * PIECE)]
    assert lengths == [1 + i % 37 for i in range(3 * PIECE)]


def test_wrap_starts_over_reshuffled_with_fresh_ids(tmp_path: Path) -> None:
    n = 2 * PIECE + 10
    trace = open_trace(trace_scenario(_log(tmp_path / "t.csv", n)))
    sessions = trace.sessions(0, TOK)
    first = [sessions.session(i).nodes[0].prompt_tokens for i in range(n)]
    second = [sessions.session(n + i).nodes[0].prompt_tokens for i in range(n)]
    assert sorted(first) == sorted(second)  # the same sessions...
    assert first != second  # ...in another order
    assert sessions.session(n + 3).session_id == n + 3
    again = open_trace(trace_scenario(tmp_path / "t.csv")).sessions(0, TOK)
    assert [again.session(n + i).nodes[0].prompt_tokens for i in range(n)] == second


def test_without_wrap_the_trace_ends(tmp_path: Path) -> None:
    path = _log(tmp_path / "t.csv", 5)
    trace = open_trace(trace_scenario(path, generator={"wrap_mode": False}))
    sessions = trace.sessions(0, TOK)
    assert sessions.limit == 5
    sessions.session(4)
    with pytest.raises(IndexError):
        sessions.session(5)


def _timed(path: Path, **scheduler: object):  # type: ignore[no-untyped-def]
    return open_trace(trace_scenario(path, traffic_scheduler={"type": "trace", **scheduler}))


def test_the_timeline_is_the_trace_scaled(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "t.csv",
        "timestamp,input_length,output_length",
        ["100.0,1,1", "100.5,1,1", "102.0,1,1", "102.0,1,1", "104.0,1,1"],
    )
    timeline = _timed(path, speedup=2.0).timeline()
    assert timeline.offsets(5).tolist() == [0.0, 0.25, 1.0, 1.0, 2.0]
    # wrap: the next pass repeats the slots after one mean gap (4 s / 4 gaps, scaled)
    assert timeline.offsets(7).tolist()[5:] == [2.5, 2.75]


def test_the_window_picks_sessions_by_trace_time(tmp_path: Path) -> None:
    path = _log(tmp_path / "t.csv", 20)  # one session every 0.5 s
    trace = _timed(path, start_offset=2.0, max_duration=3.0)
    assert (trace.lo, trace.hi) == (4, 10)
    assert trace.sessions(0, TOK).session(0).nodes[0].prompt_tokens == 1 + 4
    assert np.allclose(trace.timeline().offsets(6), [0, 0.5, 1, 1.5, 2, 2.5])


def test_an_empty_window_says_why_in_words_with_and_without_max_duration(
    tmp_path: Path,
) -> None:
    path = write_csv(  # sessions at 10, 12.5, 30.25 and 130.3125 s (trace seconds)
        tmp_path / "t.csv",
        "timestamp,input_length,output_length",
        ["10,1,1", "12.5,1,1", "30.25,1,1", "130.3125,1,1"],
    )
    past = (
        f"{path}: traffic_scheduler.start_offset 500 s is past the trace's last session arrival"
        " (120.312 s after its first); lower start_offset to 120.312 or less"
    )
    for scheduler in ({}, {"max_duration": 60.0}):
        with pytest.raises(TraceFileError) as caught:
            _timed(path, start_offset=500.0, **scheduler)
        assert str(caught.value) == past
        assert caught.value.exit_code == 2
    assert _timed(path, start_offset=120.312).lo == 3  # (the bound it gives is true)
    with pytest.raises(TraceFileError) as caught:  # a gap: the window ends before the next
        _timed(path, start_offset=5.0, max_duration=10.0)
    assert str(caught.value) == (
        f"{path}: no session arrives within traffic_scheduler.start_offset 5 s and max_duration"
        " 10 s of the trace's first arrival (the next arrives 20.250 s after it); raise"
        " max_duration above 15.25 or move start_offset"
    )
    assert "None" not in str(caught.value)
    assert _timed(path, start_offset=5.0, max_duration=15.26).lo == 2


def test_the_trace_scheduler_needs_sorted_timestamps(tmp_path: Path) -> None:
    untimed = _log(tmp_path / "u.csv", 3, timed=False)
    with pytest.raises(Exception, match=r"u.csv:1: .*needs arrival times"):
        _timed(untimed)
    unsorted = write_csv(
        tmp_path / "s.csv", "timestamp,input_length,output_length", ["1,1,1", "3,1,1", "2,1,1"]
    )
    with pytest.raises(Exception, match=r"s.csv:4: this row arrives before the row above"):
        _timed(unsorted)


def test_grouped_chats_span_row_groups_and_drop_unservable_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prepare, "ROW_GROUP_ROWS", 7)
    rows = [f"{i % 13},{i},{1 + i % 5},{(i % 40) and 2}" for i in range(120)]  # row 0, 40, 80: 0
    path = write_csv(tmp_path / "t.csv", "session_id,timestamp,input_length,output_length", rows)
    trace = open_trace(trace_scenario(path))
    prepared = trace.prepared
    assert trace.table.num_groups > 5
    # sessions 0, 1 and 2 (mod 13) hold the rows with output 0: not replayed, counted
    assert prepared.sessions == 10
    assert prepared.unservable_sessions == 3
    assert prepared.unservable_lines == [2, 42, 82]
    assert prepared.unservable_rows == sum(1 for i in range(120) if i % 13 in (0, 1, 2))
    sessions = trace.sessions(0, TOK)
    for k in range(10):
        session = sessions.session(k)
        sid = k + 3  # in order of arrival: session_id 3, 4, ...
        expected = [1 + i % 5 for i in range(120) if i % 13 == sid]
        assert [n.prompt_tokens for n in session.nodes] == expected
        assert [n.parents for n in session.nodes] == [()] + [(j,) for j in range(len(expected) - 1)]


def test_the_trace_scheduler_needs_a_timestamp_on_every_session(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "t.csv", "timestamp,input_length,output_length", ["1,1,1", ",1,1", "2,1,1"]
    )
    with pytest.raises(Exception, match=r"t.csv:3: this session has no timestamp"):
        _timed(path)


def test_a_cold_and_a_warm_start_give_the_same_sessions_and_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # many row groups: the conversion hands them from its reading thread to the writer
    monkeypatch.setattr(prepare, "ROW_GROUP_ROWS", 50)
    scenario = trace_scenario(
        _log(tmp_path / "t.csv", PIECE + 90), traffic_scheduler={"type": "trace"}
    )
    cold = open_trace(scenario)
    warm = open_trace(scenario)
    assert (cold.prepared.reused, warm.prepared.reused) == (False, True)
    assert cold.table.num_groups > 5
    n = 2 * (PIECE + 90)  # two passes: the wrap too
    a, b = cold.sessions(5, TOK), warm.sessions(5, TOK)
    assert [a.session(i) for i in range(n)] == [b.session(i) for i in range(n)]
    assert cold.timeline().offsets(n).tolist() == warm.timeline().offsets(n).tolist()


def test_a_bad_row_past_the_first_row_groups_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the bad row is read on the conversion's thread, many batches after the first
    monkeypatch.setattr(prepare, "ROW_GROUP_ROWS", 10)
    monkeypatch.setattr(prepare, "_AHEAD", 1)
    monkeypatch.setattr(reader, "BATCH_ROWS", 10)
    rows = [{"input_length": 1 + i % 7, "output_length": 1 + i % 5} for i in range(300)]
    rows.append({"input_length": 4, "output_length": -1})
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceFileError, match=":301: output_length = -1 is negative"):
        open_trace(trace_scenario(path))
    assert not list(tmp_path.glob(".t.jsonl.*"))  # nothing half-made


@pytest.mark.parametrize(
    ("first", "then", "expected"),
    [  # (was, at line 1: "this row has no session_id where earlier rows differ")
        ({}, {"session_id": "a"}, ":1: this row has no session_id where line 2 has one"),
        ({"session_id": "a"}, {}, ":2: this row has no session_id where line 1 has one"),
    ],
)
def test_a_session_id_on_some_rows_only_names_a_row_that_has_one(
    tmp_path: Path, first: dict[str, str], then: dict[str, str], expected: str
) -> None:
    rows = [first | {"input_length": 3, "output_length": 1}]
    rows.append(then | {"input_length": 4, "output_length": 2})
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(TraceFileError, match=f"{expected}; give it on every row or none"):
        open_trace(trace_scenario(path))


def test_a_session_id_first_seen_past_the_first_batch_names_a_row_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the first batch has none: the trace is read as single requests, streamed
    monkeypatch.setattr(reader, "BATCH_ROWS", 10)
    monkeypatch.setattr(reader, "_JSONL_BLOCK", 64)  # (bytes: a few lines a block)
    rows: list[dict[str, object]] = [{"input_length": 2, "output_length": 1} for _ in range(25)]
    rows[22]["session_id"] = "a"
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    expected = ":23: this row has a session_id where line 1 has none"
    with pytest.raises(TraceFileError, match=expected):
        open_trace(trace_scenario(path))


def test_rag_warm_ups_are_in_the_first_pass_only(tmp_path: Path) -> None:
    rows = ["0,a,q one,32,3", "1,b,q two,16,2", "2,a,q three,32,4", "3,b,q four,16,2"]
    path = write_csv(
        tmp_path / "r.csv", "timestamp,doc_id,prompt_text,input_length,output_length", rows
    )
    scenario = trace_scenario(
        path,
        "rag",
        generator={"flavor": {"type": "rag", "num_documents": 2, "block_size": 16}},
        traffic_scheduler={"type": "trace"},
    )
    trace = open_trace(scenario)
    assert trace.warmup == 2
    sessions = trace.sessions(0, TOK)
    outputs = [sessions.session(i).nodes[0].max_tokens for i in range(10)]
    assert outputs[:6] == [1, 1, 3, 2, 4, 2]
    assert sorted(outputs[6:]) == [2, 2, 3, 4]  # the questions again, no warm-up
    # warm-ups one trace second before the first row; the second pass one mean gap (0.8 s)
    # after the first pass's last arrival, without the warm-ups' slots
    offsets = trace.timeline().offsets(10).tolist()
    assert offsets == pytest.approx([0, 0, 1, 2, 3, 4, 4.8, 5.8, 6.8, 7.8])


def test_turn_timing_timestamps_gives_each_turn_its_rows_time(tmp_path: Path) -> None:
    # two chats (their turns interleaved in the file), a turn without a timestamp, a single
    path = write_csv(
        tmp_path / "t.csv",
        "session_id,timestamp,input_length,output_length",
        ["a,10.0,5,3", "b,10.5,5,3", "a,11.0,6,3", "b,,6,3", "a,13.0,7,3", "c,14.0,8,3"],
    )
    nodes = {}
    for timing in ("after_answer", "timestamps"):
        trace = _timed(path, speedup=2.0, turn_timing=timing)
        sessions = trace.sessions(0, TOK)
        nodes[timing] = [
            [n.not_before_s for n in sessions.session(i).nodes] for i in range(trace.hi)
        ]
    assert nodes["after_answer"] == [[None, None, None], [None, None], [None]]
    # (row time − session's first row time) / speedup: the mapping of the session starts
    assert nodes["timestamps"] == [[0.0, 0.5, 1.5], [0.0, None], [0.0]]
    # a wrapped pass replays the same offsets (its sessions reshuffled)
    later = _timed(path, speedup=2.0, turn_timing="timestamps").sessions(0, TOK)
    again = sorted(str([n.not_before_s for n in later.session(3 + i).nodes]) for i in range(3))
    assert again == sorted(str(n) for n in nodes["timestamps"])
    # and the rate scheduler ignores the trace's times altogether
    untimed = open_trace(trace_scenario(path)).sessions(0, TOK).session(0)
    assert [n.not_before_s for n in untimed.nodes] == [None, None, None]


def test_turn_timing_timestamps_on_a_dag_and_on_single_requests(tmp_path: Path) -> None:
    def context(node: int, parents: list[int], ts: float) -> dict[str, object]:
        return {
            "session_id": "s",
            "timestamp": ts,
            "new_input_length": 4,
            "output_length": 2,
            "session_context": {"node_id": node, "parent_nodes": parents, "wait_after_ready": 0.5},
        }

    # node ids out of time order: node 2 (two parents) logged at 9 s, node 1 at 7 s
    dag = write_jsonl(
        tmp_path / "d.jsonl", [context(2, [0, 1], 9.0), context(0, [], 5.0), context(1, [0], 7.0)]
    )
    scenario = trace_scenario(
        dag,
        "timed_synthetic_session",
        traffic_scheduler={"type": "trace", "turn_timing": "timestamps"},
    )
    (node0, node1, node2) = open_trace(scenario).sessions(0, TOK).session(0).nodes
    assert (node0.not_before_s, node1.not_before_s, node2.not_before_s) == (0.0, 2.0, 4.0)
    assert node2.parents == (0, 1)
    assert node2.wait_after_ready_s == 0.5  # (the think time is kept as given)
    singles = _timed(_log(tmp_path / "s.csv", 3), turn_timing="timestamps").sessions(0, TOK)
    assert [singles.session(i).nodes[0].not_before_s for i in range(3)] == [0.0, 0.0, 0.0]
