"""trace.jsonl: one line per dispatched request, content only when asked."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.unit.record.builders import T0, make_metadata, make_node, ns
from veeksha.dispatch.messages import WorkItem
from veeksha.record.parquet import ResultWriter
from veeksha.record.trace import TraceWriter, read_trace

MESSAGES = [("user", "first"), ("assistant", "answer"), ("user", "hello")]


def item(request_id: int, at: float = 1.5) -> WorkItem:
    return WorkItem(request_id=request_id, messages=MESSAGES, max_tokens=3, dispatched_at_ns=ns(at))


def test_lines_without_content(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl", include_content=False, t0_ns=T0)
    trace.add("measured", 3, make_node(), item(7))
    trace.add("warmup", 4, make_node(0), item(8, at=0.25))
    assert trace.flush() == 2
    trace.close()
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert lines == [
        {
            "phase": "measured",
            "session_id": 3,
            "node_id": 1,
            "request_id": 7,
            "parents": [0],
            "history_parent": 0,
            "wait_after_ready": 0.25,
            "dispatched_at": 1.5,
            "target_prompt_tokens": 20,
            "requested_output_tokens": 3,
        },
        {
            "phase": "warmup",
            "session_id": 4,
            "node_id": 0,
            "request_id": 8,
            "parents": [],
            "history_parent": None,
            "wait_after_ready": 0.25,
            "dispatched_at": 0.25,
            "target_prompt_tokens": 20,
            "requested_output_tokens": 3,
        },
    ]


def test_lines_with_content(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl", include_content=True, t0_ns=T0)
    trace.add("measured", 3, make_node(), item(7))
    trace.close()
    (entry,) = read_trace(tmp_path / "trace.jsonl")
    assert entry.messages == MESSAGES
    assert entry.target_prompt_tokens == 20
    assert entry.requested_output_tokens == 3
    frame = pd.read_json(tmp_path / "trace.jsonl", lines=True)
    assert list(frame.request_id) == [7]


def test_content_holds_the_prompt_fallback_its_client_sent(tmp_path: Path) -> None:
    # client 1 appends " Generate at least N tokens." (use_min_tokens_prompt_fallback), client 0
    # does not: each line's messages are what its client's worker sent
    trace = TraceWriter(
        tmp_path / "trace.jsonl",
        include_content=True,
        t0_ns=T0,
        clients=["plain", "fallback"],
        prompt_fallback=[False, True],
    )
    trace.add("measured", 3, make_node(client=0), item(7))
    trace.add("measured", 3, make_node(client=1), item(8))
    trace.close()
    plain, fallback = read_trace(tmp_path / "trace.jsonl")
    assert plain.messages == MESSAGES
    assert fallback.messages == [*MESSAGES[:2], ("user", "hello Generate at least 3 tokens.")]
    assert MESSAGES[2] == ("user", "hello")  # (the item's own conversation is left as it was)


def test_a_tool_line_has_its_kind_and_latency_and_a_reprompt_its_attempt(tmp_path: Path) -> None:
    trace = TraceWriter(
        tmp_path / "trace.jsonl", include_content=False, t0_ns=T0, clients=["a", "b"]
    )
    tool = make_node(2, kind="tool", latency_s=0.125, prompt="result text", client=1)
    trace.add("measured", 3, tool, WorkItem(9, [], 20, ns(2.0)))
    trace.add("measured", 3, make_node(client=1), item(10), 2)
    trace.close()
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    base = {"phase": "measured", "session_id": 3, "history_parent": 0, "parents": [0]}
    assert lines == [
        {
            **base,
            "node_id": 2,
            "request_id": 9,
            "wait_after_ready": 0.25,
            "dispatched_at": 2.0,
            "target_prompt_tokens": 20,
            "requested_output_tokens": 20,
            "kind": "tool",
            "latency_s": 0.125,
        },
        {
            **base,
            "node_id": 1,
            "request_id": 10,
            "wait_after_ready": 0.25,
            "dispatched_at": 1.5,
            "target_prompt_tokens": 20,
            "requested_output_tokens": 3,
            "client": "b",
            "attempt": 2,
        },
    ]


def test_a_tool_line_with_content_has_its_result(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl", include_content=True, t0_ns=T0)
    tool = make_node(2, kind="tool", latency_s=0.5, prompt="the tool said this")
    trace.add("measured", 3, tool, WorkItem(9, [], 20, ns(2.0)))
    trace.close()
    (entry,) = read_trace(tmp_path / "trace.jsonl")
    assert (entry.kind, entry.latency_s, entry.result) == ("tool", 0.5, "the tool said this")
    assert entry.messages is None


def test_written_by_the_result_writer_thread(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl", include_content=False, t0_ns=T0)
    writer = ResultWriter(tmp_path, make_metadata(), trace=trace, flush_interval_s=600)
    for request_id in range(5):
        trace.add("measured", 1, make_node(), item(request_id))
    writer.flush()
    assert [e.request_id for e in read_trace(tmp_path / "trace.jsonl")] == list(range(5))
    trace.add("measured", 1, make_node(), item(5))
    writer.close()
    assert len(read_trace(tmp_path / "trace.jsonl")) == 6
    assert trace.lines_written == 6


def test_reader_skips_a_torn_last_line(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl", include_content=False, t0_ns=T0)
    trace.add("measured", 1, make_node(), item(1))
    trace.close()
    with open(tmp_path / "trace.jsonl", "ab") as file:
        file.write(b'{"phase":"meas')
    assert [e.request_id for e in read_trace(tmp_path / "trace.jsonl")] == [1]


def _check(text: str) -> str | None:
    return None if text.startswith("ok") else "Answer again."


def test_a_checked_line_records_valid_and_waits_for_its_answer(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl", include_content=False, t0_ns=T0)
    checked = make_node(validation=_check, max_reprompts=1)
    trace.add("measured", 3, checked, item(1))
    trace.add("measured", 4, make_node(), item(2))  # unchecked: no valid, waits in order
    trace.add("measured", 3, checked, item(3), 1)
    trace.add("measured", 5, checked, item(4))
    assert trace.flush() == 0  # the first line's answer is not checked yet
    trace.judged(1, False)
    trace.judged(2, True)  # (a request without a check: nothing waits for it)
    assert trace.flush() == 2  # up to the next unchecked answer
    trace.judged(3, False)
    trace.judged(4, None)  # no answer (a failed request): no valid
    trace.add("measured", 6, checked, item(5))
    trace.close()  # the end: what was never checked is written without valid
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [(e["request_id"], e.get("attempt"), e.get("valid", "-")) for e in lines] == [
        (1, None, False),
        (2, None, "-"),
        (3, 1, False),
        (4, None, "-"),
        (5, None, "-"),
    ]
    assert [e.valid for e in read_trace(tmp_path / "trace.jsonl")] == [
        False,
        None,
        False,
        None,
        None,
    ]


def test_an_agent_rounds_line_records_agent_round_and_transcript(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl", include_content=False, t0_ns=T0)
    speaker = make_node(3, agent="con", round=1, transcript=(0, 1, 2))
    trace.add("measured", 3, speaker, item(1))
    trace.add("measured", 3, make_node(0, agent="pro", round=0, transcript=()), item(2))
    trace.add("measured", 4, make_node(), item(3))  # another graph's line: none of them
    trace.close()
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert [(e.get("agent"), e.get("round"), e.get("transcript")) for e in lines] == [
        ("con", 1, [0, 1, 2]),
        ("pro", 0, []),
        (None, None, None),
    ]
    assert not {"agent", "round", "transcript"} & set(lines[2])
    first = read_trace(tmp_path / "trace.jsonl")[0]
    assert (first.agent, first.round, first.transcript) == ("con", 1, (0, 1, 2))
