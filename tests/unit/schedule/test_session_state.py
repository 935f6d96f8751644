import pytest

from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.schedule.session_state import NodeState, SessionState

S = 1_000_000_000


def _node(i: int, parents: tuple[int, ...], history: int | None, wait: float = 0.0) -> NodeSpec:
    return NodeSpec(
        node_id=i,
        parents=parents,
        history_parent=history,
        wait_after_ready_s=wait,
        prompt=f"p{i}",
        prompt_tokens=1,
        max_tokens=4,
    )


def _diamond() -> SessionSpec:
    # 0 → 1, 0 → 2, (1, 2) → 3 with history parent 2; think time 1 s everywhere.
    return SessionSpec(
        session_id=7,
        nodes=[
            _node(0, (), None),
            _node(1, (0,), 0, 1.0),
            _node(2, (0,), 0, 1.0),
            _node(3, (1, 2), 2, 1.0),
        ],
    )


def test_child_waits_for_all_parents_plus_think_time() -> None:
    s = SessionState(_diamond(), started_at_ns=10, cancel_on_failure=True)
    assert s.start() == [(0, 10)]
    s.mark_dispatched(0)
    assert s.complete(0, 2 * S, True, answer="a0") == [(1, 3 * S), (2, 3 * S)]
    s.mark_dispatched(1)
    s.mark_dispatched(2)
    assert s.complete(2, 4 * S, True, answer="a2") == []  # node 1 still running
    assert s.complete(1, 5 * S, True, answer="a1") == [(3, 6 * S)]  # latest parent + 1 s
    assert not s.done
    assert s.messages(3) == (
        ("user", "p0"),
        ("assistant", "a0"),
        ("user", "p2"),
        ("assistant", "a2"),
        ("user", "p3"),
    )
    s.mark_dispatched(3)
    s.complete(3, 7 * S, True, answer="a3")
    assert s.done
    assert s.status == "ok"
    assert s.ended_at_ns == 7 * S


def test_failure_cancels_what_was_not_dispatched() -> None:
    s = SessionState(_diamond(), started_at_ns=0, cancel_on_failure=True)
    s.start()
    s.mark_dispatched(0)
    s.complete(0, S, True, answer="a0")
    s.mark_dispatched(1)  # 2 is ready but not yet dispatched
    assert s.complete(1, 2 * S, False) == []
    assert s.states == [NodeState.OK, NodeState.FAILED, NodeState.CANCELLED, NodeState.CANCELLED]
    assert s.take_cancelled() == [2, 3]
    assert s.take_cancelled() == []
    assert s.ready_at_ns == [0, 2 * S, 2 * S, None]
    assert s.done
    assert s.status == "error"


def test_an_abandoned_request_is_a_failure_of_its_own_status() -> None:
    s = SessionState(_diamond(), started_at_ns=0, cancel_on_failure=True)
    s.start()
    s.mark_dispatched(0)
    s.complete(0, S, True, answer="a0")
    s.mark_dispatched(1)
    assert s.complete(1, 2 * S, False, abandoned=True) == []  # its user left: the rest goes
    assert s.states == [NodeState.OK, NodeState.FAILED, NodeState.CANCELLED, NodeState.CANCELLED]
    assert (s.abandoned, s.status) == (1, "abandoned")
    # without cancelling: the children go on; one real failure among them makes it an error
    s = SessionState(_diamond(), started_at_ns=0, cancel_on_failure=False)
    s.start()
    s.mark_dispatched(0)
    assert s.complete(0, S, False, abandoned=True) == [(1, 2 * S), (2, 2 * S)]
    for node in (1, 2):
        s.mark_dispatched(node)
        s.complete(node, 3 * S, True)
    s.mark_dispatched(3)
    s.complete(3, 5 * S, False)
    assert (s.abandoned, s.status) == (1, "error")


def test_failure_without_cancel_releases_children_without_answer() -> None:
    spec = SessionSpec(session_id=1, nodes=[_node(0, (), None), _node(1, (0,), 0, 0.5)])
    s = SessionState(spec, started_at_ns=0, cancel_on_failure=False)
    s.start()
    s.mark_dispatched(0)
    assert s.complete(0, S, False, conversation_tokens=3, answer_tokens=9) == [(1, S + S // 2)]
    assert s.messages(1) == (("user", "p0"), ("user", "p1"))
    assert s.outgoing(1)[1] == 3  # a failed parent contributes no answer tokens


def test_history_tokens_accumulate_along_the_chain() -> None:
    spec = SessionSpec(
        session_id=1, nodes=[_node(0, (), None), _node(1, (0,), 0), _node(2, (1,), 1)]
    )
    s = SessionState(spec, started_at_ns=0, cancel_on_failure=True)
    s.start()
    s.complete(0, 1, True, answer="x y", conversation_tokens=5, answer_tokens=2)
    assert s.outgoing(1)[1] == 7
    s.complete(1, 2, True, answer="z", conversation_tokens=8, answer_tokens=1)
    assert s.outgoing(2)[1] == 9


def test_cancel_pending_at_run_end_and_double_finish_is_an_error() -> None:
    s = SessionState(_diamond(), started_at_ns=0, cancel_on_failure=True)
    s.start()
    s.mark_dispatched(0)
    assert s.cancel_pending(5) == [1, 2, 3]
    assert not s.done  # node 0 is still in flight
    s.cancel_node(0, 6)
    assert s.done
    assert s.status == "cancelled"
    with pytest.raises(ValueError, match="already finished"):
        s.complete(0, 7, True)


def test_children_are_ready_from_when_a_failed_parent_ended() -> None:
    # the parent's last byte came at 0.1 s; it was given up (timeout) at 5 s: its end
    spec = SessionSpec(session_id=1, nodes=[_node(0, (), None), _node(1, (0,), 0, 0.5)])
    s = SessionState(spec, started_at_ns=0, cancel_on_failure=False)
    s.start()
    s.mark_dispatched(0)
    assert s.complete(0, 5 * S, False) == [(1, 5 * S + S // 2)]


def test_cancelled_in_flight_is_cancelled_and_dispatched_with_no_second_row() -> None:
    s = SessionState(_diamond(), started_at_ns=0, cancel_on_failure=True)
    s.start()
    s.mark_dispatched(0)
    s.complete(0, S, True, answer="a0")
    s.mark_dispatched(1)
    s.mark_dispatched(2)
    s.cancel_pending(2 * S)  # the run stops: node 3 was never sent
    assert s.take_cancelled() == [3]
    s.complete(2, 4 * S, False, cancelled=True)  # cancelled in flight, handled first
    s.complete(1, 3 * S, True, answer="a1")  # ended before it, handled after
    assert s.take_cancelled() == []  # node 2 has its row already (its cancelled result)
    assert s.states == [NodeState.OK, NodeState.OK, NodeState.CANCELLED, NodeState.CANCELLED]
    assert sorted(s.dispatched()) == [0, 1, 2]
    assert s.status == "cancelled"  # stopped by the run, nothing failed
    assert s.ended_at_ns == 4 * S  # the latest end, not the last handled


def test_a_withdrawn_hand_over_was_never_dispatched() -> None:
    spec = SessionSpec(session_id=1, nodes=[_node(0, (), None)])
    s = SessionState(spec, started_at_ns=S, cancel_on_failure=True)
    s.start()
    s.mark_dispatched(0)  # handed over ahead of its ready time, then withdrawn by a stop
    s.cancel_node(0, S // 2)
    assert s.take_cancelled() == [0]
    assert s.dispatched() == []


def _timed_chat(*not_before: float | None, wait: float = 0.0) -> SessionSpec:
    """A linear chat whose node i has ``not_before[i]`` (its row's time after the start)."""
    nodes = []
    for i, at in enumerate(not_before):
        node = _node(i, (i - 1,) if i else (), i - 1 if i else None, wait if i else 0.0)
        node.not_before_s = at
        nodes.append(node)
    return SessionSpec(session_id=2, nodes=nodes)


def test_a_turn_waits_for_its_own_time_and_for_its_parents_answer() -> None:
    # turns at 0, 0.6 and 1.2 s after the start (10 s); answers in 0.1 s, think time 0.05 s
    s = SessionState(_timed_chat(0.0, 0.6, 1.2, wait=0.05), 10 * S, cancel_on_failure=True)
    assert s.start() == [(0, 10 * S)]
    s.mark_dispatched(0)
    # answered at 10.1 s: ready at its own time (10.6 s), not at 10.15 s
    assert s.complete(0, 10 * S + S // 10, True, answer="a") == [(1, 10 * S + 6 * S // 10)]
    s.mark_dispatched(1)
    # answered late (12 s): the answer plus the think time wins over its time (11.2 s)
    assert s.complete(1, 12 * S, True, answer="b") == [(2, 12 * S + S // 20)]
    assert s.ready_at_ns == [10 * S, 10 * S + 6 * S // 10, 12 * S + S // 20]
    assert s.not_before_ns(2) == 11 * S + 2 * S // 10


def test_without_a_not_before_time_the_ready_rule_is_unchanged() -> None:
    s = SessionState(_timed_chat(None, None, wait=0.25), 10 * S, cancel_on_failure=True)
    assert s.start() == [(0, 10 * S)]
    s.mark_dispatched(0)
    assert s.complete(0, 11 * S, True, answer="a") == [(1, 11 * S + S // 4)]
    assert s.not_before_ns(1) == 10 * S  # (none: the session's start)


def test_a_root_with_a_later_time_waits_for_it() -> None:
    # two roots of a DAG: the second's row is 0.5 s after the session's first row
    spec = SessionSpec(session_id=3, nodes=[_node(0, (), None), _node(1, (), None)])
    spec.nodes[0].not_before_s = 0.0
    spec.nodes[1].not_before_s = 0.5
    s = SessionState(spec, S, cancel_on_failure=True)
    assert s.start() == [(0, S), (1, S + S // 2)]


def _words(messages: list[tuple[str, str]]) -> int:
    return sum(len(text.split()) for _, text in messages)


def test_a_reprompted_nodes_tokens_are_those_of_what_it_sends_and_passes_on() -> None:
    """a (5 words) answers 2 invalid words and is asked again with a 3-word note (twice), then
    answers 3 valid words; its child carries a's first prompt and final answer. The tokens
    beside each send's own prompt (what a row's prompt_tokens_total adds the prompt to when the
    server reports no usage) are those of the messages sent: the old count gave the re-prompt
    a's prompt twice and no note (12 for 10 words, then 19 for 15), and the child a's last
    attempt's whole prompt (the failed answers and notes, 15 + 3 for 8 words)."""
    a = NodeSpec(0, (), None, 0.0, "w1 w2 w3 w4 w5", 5, 4)
    b = NodeSpec(1, (0,), 0, 0.0, "v1 v2", 2, 4)
    s = SessionState(
        SessionSpec(session_id=1, nodes=[a, b]), started_at_ns=0, cancel_on_failure=True
    )
    s.start()
    s.mark_dispatched(0)
    s.reprompt(0, "bad one", "answer again please", 2, at_ns=1, conversation_tokens=5)
    messages, tokens = s.outgoing(0)
    assert messages[1:] == [("assistant", "bad one"), ("user", "answer again please")]
    assert tokens + a.prompt_tokens == _words(messages) == 10
    s.mark_dispatched(0)
    s.reprompt(0, "bad two", "answer again please", 2, at_ns=2, conversation_tokens=10)
    messages, tokens = s.outgoing(0)
    assert tokens + a.prompt_tokens == _words(messages) == 15
    s.mark_dispatched(0)
    assert s.complete(0, 3, True, answer="good one here", conversation_tokens=15, answer_tokens=3)
    messages, tokens = s.outgoing(1)
    assert messages == [("user", a.prompt), ("assistant", "good one here"), ("user", "v1 v2")]
    assert tokens == _words(messages[:-1]) == 8
