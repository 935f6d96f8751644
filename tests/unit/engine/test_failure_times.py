"""The traffic loop takes a request's end and its dispatch from the right instants (fake clock).

A failed request's children are ready from when it failed (its Result's ``completed_at``), and a
request handed over ahead of its ready time is never recorded as dispatched before it: when the
worker reports its release, or when it was lost with its worker after its ready time.
"""

from __future__ import annotations

from tests.unit.engine.test_loop import MS, S, ahead, chain, fixed_gaps
from veeksha.dispatch.messages import Result, WorkItem


def lost(item: WorkItem, at_ns: int) -> Result:
    """What the pool reports for a request its dead worker had (``WorkerPool._lose``)."""
    release = min(max(item.dispatched_at_ns, item.not_before_ns), at_ns)
    return Result(
        request_id=item.request_id,
        worker_id=0,
        status="error",
        received_at_ns=release,
        sent_at_ns=release,
        completed_at_ns=at_ns,
        error_kind="worker_lost",
        error_message="worker 0 was killed by SIGKILL",
    )


def test_children_of_a_timeout_are_ready_from_the_give_up() -> None:
    h = ahead(lambda i: chain(i, 2, wait_s=0.5), max_sessions=1, rate_gaps=fixed_gaps(1.0))
    h.loop.start(S)
    h.timers.advance(S)
    (first,) = h.items
    h.clock.now = 6 * S
    # the last byte came at S + 1 ms; the worker gave up at 6 s
    h.loop.on_results(
        [
            Result(
                request_id=first.request_id,
                worker_id=0,
                status="timeout",
                received_at_ns=S,
                sent_at_ns=S,
                completed_at_ns=6 * S,
                error_kind="timeout",
                last_byte_at_ns=S + MS,
            )
        ]
    )
    assert h.rec.cancelled == [(0, 1)]  # cancel on failure: cancelled then
    assert h.rec.sessions[0].ended_at_ns == 6 * S


def test_a_request_lost_after_its_ready_time_was_dispatched_at_it() -> None:
    h = ahead(lambda i: chain(i, 1), max_sessions=1, rate_gaps=fixed_gaps(1.0))
    h.loop.start(S)
    h.timers.advance(S - 20 * MS)  # handed over 20 ms ahead
    (item,) = h.items
    assert item.dispatched_at_ns < item.not_before_ns == S
    h.clock.now = S + 300 * MS
    h.loop.on_results([lost(item, S + 300 * MS)])
    ((request, result),) = h.rec.done
    assert result.error_kind == "worker_lost"
    assert request.dispatched_at_ns == S == request.ready_at_ns  # not the hand-over
    assert result.sent_at_ns >= request.dispatched_at_ns
    assert h.loop.finished
