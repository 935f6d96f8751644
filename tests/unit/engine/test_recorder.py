"""The recorder writes exactly the rows of ``request_row``/``session_row`` (columnar path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.engine.char_tokenizer import CharTokenizer
from tests.unit.record.builders import T0, make_metadata, make_node, make_result, ns
from veeksha.dispatch.messages import WorkItem
from veeksha.engine.loop import InFlight
from veeksha.engine.recorder import RunRecorder
from veeksha.engine.traffic_sink import run_stopped
from veeksha.errors import RunAbortedError
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.record.parquet import ResultWriter
from veeksha.record.reader import load_requests, load_sessions
from veeksha.record.rows import RequestRecord, SessionRecord, request_row, session_row
from veeksha.schedule.session_state import SessionState


def test_rows_and_streaming_callback(tmp_path: Path) -> None:
    # (the builtin tokenizer's prompts hold exactly their target length: test_sessions)
    nodes = [
        make_node(0, prompt="a b c", prompt_tokens=3),
        make_node(1, prompt="d e"),
        make_node(2),
    ]
    state = SessionState(SessionSpec(3, nodes), ns(0.5), cancel_on_failure=False)
    for node_id, _ in state.start():
        state.mark_dispatched(node_id)
    streamed: list[dict[str, Any]] = []
    writer = ResultWriter(tmp_path, make_metadata(), t0_ns=T0)
    recorder = RunRecorder("run-1", "m", T0, writer, BuiltinTokenizer(), on_row=streamed.append)
    request = InFlight(state, 0, 7, ns(0.5), ns(0.8), 2, history_tokens=40)
    item = WorkItem(7, [("user", "a b c")], 3, ns(0.8))
    recorder.dispatched(request, item)
    result = make_result()
    recorder.request_done(request, result, ns(2.0))
    # a hand-over withdrawn before it was sent: dispatched, then cancelled under the same id
    recorder.dispatched(InFlight(state, 1, 8, ns(0.6), ns(0.6), 2, 0), item)
    recorder.request_cancelled(state, 1, 8, ns(2.1), run_stopped("interrupted"))
    state.complete(0, ns(1.5), True, answer="x", conversation_tokens=43, answer_tokens=3)
    state.cancel_node(1, ns(2.1))
    state.cancel_node(2, ns(2.1))
    recorder.session_done(state)
    writer.close()

    requests = load_requests(tmp_path).to_pylist()
    expected_done = request_row(
        RequestRecord(
            "run-1",
            "measured",
            3,
            7,
            nodes[0],
            "m",
            ns(0.5),
            ns(0.8),
            ns(2.0),
            result,
            prompt_tokens_new=3,
            prompt_tokens_total=43,
        ),
        T0,
    )
    assert requests[0]["prompt_tokens_new"] == 3  # the builtin tokenizer's count of "a b c"
    for name in ("ttfc", "e2e", "tpot", "tbc_mean", "ready_at", "dispatch_lag", "status"):
        assert requests[0][name] == expected_done[name], name
    assert requests[1]["request_id"] == 8
    assert requests[1]["status"] == "cancelled"
    assert requests[1]["prompt_tokens_new"] is None
    assert (
        requests[1]["error_message"]
        == "cancelled before it was sent: the run stopped (interrupted)"
    )
    assert [row["status"] for row in streamed] == ["ok", "cancelled"]
    assert streamed[0]["ttfc"] == expected_done["ttfc"]
    assert streamed[0]["e2e"] == expected_done["e2e"]

    sessions = load_sessions(tmp_path).to_pylist()
    expected = session_row(
        SessionRecord(
            "run-1", "measured", 3, ns(0.5), state.ended_at_ns, 3, 1, 1, 0, 2, 0.25, state.status
        ),
        T0,
    )
    # one request dispatched (node 0): its think time only, not the cancelled nodes'
    assert sessions == [expected]


def test_rows_are_refused_after_a_write_error(tmp_path: Path) -> None:
    nodes = [make_node(0)]
    state = SessionState(SessionSpec(4, nodes), ns(0.5), cancel_on_failure=False)
    writer = ResultWriter(tmp_path, make_metadata(), t0_ns=T0)
    recorder = RunRecorder("run-1", "m", T0, writer, BuiltinTokenizer())
    writer._error = RunAbortedError("disk full")  # as the writer thread sets it on a failure
    request = InFlight(state, 0, 7, ns(0.5), ns(0.8), 2, history_tokens=0)
    recorder.request_done(request, make_result(), ns(2.0))  # no exception into the loop
    recorder.request_cancelled(state, 0, 8, ns(2.0), run_stopped("timeout"))
    recorder.session_done(state)
    assert len(writer.requests) == 0
    assert len(writer.sessions) == 0


def test_other_tokenizers_count_the_prompt_sent(tmp_path: Path) -> None:
    node = make_node(0, prompt="a b c", prompt_tokens=20)
    state = SessionState(SessionSpec(1, [node]), ns(0.5), cancel_on_failure=False)
    state.start()
    state.mark_dispatched(0)
    writer = ResultWriter(tmp_path, make_metadata(), t0_ns=T0)
    recorder = RunRecorder("run-1", "m", T0, writer, CharTokenizer())
    request = InFlight(state, 0, 7, ns(0.5), ns(0.8), 2, history_tokens=0)
    recorder.request_done(request, make_result(prompt_tokens=None), ns(2.0))
    writer.close()
    row = load_requests(tmp_path).to_pylist()[0]
    assert row["target_prompt_tokens"] == 20
    assert row["prompt_tokens_new"] == 5
    assert row["prompt_tokens_total"] == 5
