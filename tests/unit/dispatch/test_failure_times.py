"""When a request ends, as the worker's Result says: an answer at its last byte, a failure when
the worker saw it (the timer fired, the reset arrived, the error body ended, it was cancelled).

The ``_Exchange`` callbacks are driven by hand, as ``Http1Pool`` would call them, with read times
taken from the clock; only the order of instants is asserted, never a duration.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker, _Exchange

EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"t0 "}}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'


class FakeHttp:
    """The part of ``Http1Pool`` an exchange calls."""

    def __init__(self) -> None:
        self.aborted: list[_Exchange] = []

    def abort(self, exchange: _Exchange) -> None:
        self.aborted.append(exchange)


@pytest.fixture
def worker() -> Iterator[Worker]:
    left, right = socket.socketpair()
    with left, right:
        yield Worker(0, WorkerSettings(endpoint="http://127.0.0.1:9/v1/chat/completions"), left)


def exchange(worker: Worker, http: FakeHttp | None = None) -> _Exchange:
    item = WorkItem(1, [("user", "hi")], 4, time.monotonic_ns())
    ex = _Exchange(worker, http or FakeHttp(), item, time.monotonic_ns())  # type: ignore[arg-type]
    worker._exchanges.add(ex)
    ex.on_sent(time.monotonic_ns())
    return ex


def streamed(ex: _Exchange, *reads: bytes) -> int:
    """Head and ``reads``, each stamped now; the last read's time."""
    ex.on_head(200, {})
    t = 0
    for data in reads:
        t = time.monotonic_ns()
        ex.on_data(data, t)
    return t


def after(t: int) -> int:
    """A clock reading strictly after ``t``."""
    now = time.monotonic_ns()
    while now <= t:
        now = time.monotonic_ns()
    return now


def only_result(worker: Worker) -> Result:
    (result,) = worker._outbox
    assert not worker._exchanges
    return result


def test_an_answer_ends_at_its_last_byte(worker: Worker) -> None:
    ex = exchange(worker)
    last = streamed(ex, EVENT, USAGE + b"data: [DONE]\n\n")
    ex.on_end(None)
    r = only_result(worker)
    assert r.status == "ok"
    assert r.completed_at_ns == r.last_byte_at_ns == last  # the read's time, not the callback's


def test_a_timeout_ends_when_the_timer_fired(worker: Worker) -> None:
    http = FakeHttp()
    ex = exchange(worker, http)
    last = streamed(ex, EVENT)  # then the server stalls
    fired = after(last)
    ex.on_timeout()
    r = only_result(worker)
    assert (r.status, r.error_kind) == ("timeout", "timeout")
    assert http.aborted == [ex]
    assert r.last_byte_at_ns == last == r.chunk_times_ns[-1]
    assert r.completed_at_ns >= fired > last


def test_a_timeout_after_the_head_only_keeps_the_head_as_last_byte(worker: Worker) -> None:
    ex = exchange(worker)
    before = time.monotonic_ns()
    ex.on_head(200, {})
    fired = after(time.monotonic_ns())
    ex.on_timeout()
    r = only_result(worker)
    assert before <= r.last_byte_at_ns < fired <= r.completed_at_ns
    assert r.chunk_times_ns == []


def test_a_timeout_before_any_byte_has_no_last_byte(worker: Worker) -> None:
    ex = exchange(worker)
    fired = time.monotonic_ns()
    ex.on_timeout()
    r = only_result(worker)
    assert r.last_byte_at_ns == 0
    assert r.completed_at_ns >= fired


def test_a_reset_ends_when_it_is_seen(worker: Worker) -> None:
    ex = exchange(worker)
    last = streamed(ex, EVENT)
    seen = after(last)
    ex.on_end(ConnectionResetError("connection closed before the response ended"))
    r = only_result(worker)
    assert (r.status, r.error_kind) == ("error", "connection_reset")
    assert r.output_text == "t0 "  # what came before the break is kept
    assert r.last_byte_at_ns == last
    assert r.completed_at_ns >= seen > last


def test_a_malformed_stream_ends_when_it_is_found_out(worker: Worker) -> None:
    ex = exchange(worker)
    last = streamed(ex, EVENT)
    seen = after(last)
    ex.on_end(ValueError("garbage"))  # (the pool hands a parse error raised in on_data here)
    r = only_result(worker)
    assert r.status == "error"
    assert r.completed_at_ns >= seen > last == r.last_byte_at_ns


def test_an_http_error_ends_with_its_body(worker: Worker) -> None:
    ex = exchange(worker)
    ex.on_head(500, {})
    ex.on_data(b'{"error": ', time.monotonic_ns())
    last = time.monotonic_ns()
    ex.on_data(b'"boom"}', last)  # the body's last part
    seen = after(last)
    ex.on_end(None)
    r = only_result(worker)
    assert (r.status, r.error_kind, r.http_status) == ("error", "http_5xx", 500)
    assert r.last_byte_at_ns == last
    assert r.completed_at_ns >= seen


def test_a_cancelled_request_ends_when_it_was_cancelled(worker: Worker) -> None:
    ex = exchange(worker)
    last = streamed(ex, EVENT)
    cancelled = after(last)
    ex.cancel()
    r = only_result(worker)
    assert r.status == "cancelled"
    assert r.last_byte_at_ns == last
    assert r.completed_at_ns >= cancelled > last


def test_a_hand_over_that_comes_after_its_ready_time_is_released_on_arrival() -> None:
    left, right = socket.socketpair()
    with left, right:
        settings = WorkerSettings(endpoint="http://127.0.0.1:9/v1/chat/completions", dry_run=True)
        worker = Worker(0, settings, left)
        ready = time.monotonic_ns()
        late = WorkItem(1, [("user", "hi")], 2, ready - 20_000_000, not_before_ns=ready)
        on_time = WorkItem(2, [("user", "hi")], 2, ready)  # not handed over ahead
        arrived = after(ready)
        worker._on_batch([late, on_time])
        by_id = {r.request_id: r for r in worker._outbox}
    # the release is the arrival, after the ready time: never the early hand-over
    assert by_id[1].released_at_ns >= arrived > ready
    assert by_id[1].released_at_ns <= by_id[1].received_at_ns
    assert by_id[2].released_at_ns == 0
