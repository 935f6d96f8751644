"""Real worker processes, real Unix socket links, a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.integration.dispatch.conftest import Harness, assert_no_orphans, item, worker_children
from veeksha.dispatch.launch import WorkerLaunch
from veeksha.dispatch.messages import Result
from veeksha.dispatch.pool import WorkerPool
from veeksha.dispatch.settings import WorkerSettings
from veeksha.errors import ConfigurationError, RunAbortedError, VeekshaError

pytestmark = pytest.mark.timeout(60)


def send(h: Harness, *texts: str, max_tokens: int = 4, timeout: float = 10.0) -> list[Result]:
    assert h.pool is not None
    items = [item(t, max_tokens) for t in texts]
    for it in items:
        h.pool.submit(it)
    return h.runner.run(h.collector.wait_for([it.request_id for it in items], timeout))


def assert_ordered(r: Result, dispatched_at: int | None = None) -> None:
    assert r.received_at_ns <= r.sent_at_ns
    assert r.first_chunk_at_ns is not None
    assert r.sent_at_ns <= r.first_chunk_at_ns <= r.completed_at_ns
    assert r.chunk_times_ns == sorted(r.chunk_times_ns)
    assert r.chunk_times_ns[0] == r.first_chunk_at_ns
    assert r.chunk_times_ns[-1] <= r.completed_at_ns
    if dispatched_at is not None:
        assert dispatched_at <= r.received_at_ns


# -------------------------------------------------------------------- shared streaming pool


def test_streaming_results_and_timestamps(chat_pool: Harness) -> None:
    results = send(chat_pool, "delay=0.01", "delay=0.01", "x", max_tokens=5)
    for r in results:
        assert (r.status, r.error_kind, r.http_status) == ("ok", "", 200)
        assert r.output_text == "w0 w1 w2 w3 w4 "
        assert len(r.chunk_times_ns) == 5
        assert (r.prompt_tokens, r.completion_tokens, r.cached_tokens) == (7, 5, 2)
        assert r.server_timings == {"n": 5}
        assert_ordered(r)
    slow = results[0]
    assert slow.first_chunk_at_ns is not None
    assert slow.completed_at_ns - slow.first_chunk_at_ns >= 35_000_000  # 4 gaps of 10 ms


def test_auth_header_and_body(chat_pool: Harness) -> None:
    send(chat_pool, "auth-check")
    headers, body = next(
        (hd, b)
        for hd, b in chat_pool.server.requests
        if b["messages"][-1]["content"] == "auth-check"
    )
    assert headers["Authorization"] == "Bearer sk-test-key"
    assert body["model"] == "stub"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_completion_tokens"] == 4


def test_http_errors(chat_pool: Harness) -> None:
    server_error, not_found = send(chat_pool, "status=500", "status=404")
    assert (server_error.status, server_error.error_kind) == ("error", "http_5xx")
    assert server_error.http_status == 500
    assert "boom" in server_error.error_message
    assert (not_found.error_kind, not_found.http_status) == ("http_4xx", 404)


def test_broken_and_malformed_streams(chat_pool: Harness) -> None:
    reset, garbage = send(chat_pool, "delay=0.01 reset=2", "garbage")
    assert (reset.status, reset.error_kind) == ("error", "connection_reset")
    assert reset.output_text == "w0 w1 "  # what arrived before the break is kept
    assert (garbage.status, garbage.error_kind) == ("error", "malformed_response")


def test_timeout(chat_pool: Harness) -> None:
    (r,) = send(chat_pool, "hang")
    assert (r.status, r.error_kind) == ("timeout", "timeout")
    assert r.completed_at_ns - r.sent_at_ns >= 900_000_000


def test_retries_of_429(chat_pool: Harness) -> None:
    ok, gave_up = send(chat_pool, "retry=2 a", "retry=5 b")
    assert (ok.status, ok.retries, ok.output_text) == ("ok", 2, "w0 w1 w2 w3 ")
    assert (gave_up.error_kind, gave_up.http_status, gave_up.retries) == ("http_4xx", 429, 2)


def test_least_in_flight_assignment(chat_pool: Harness) -> None:
    pool = chat_pool.pool
    assert pool is not None
    items = [item("delay=0.05", 3) for _ in range(6)]
    workers = [pool.submit(it) for it in items]
    assert sorted(pool.in_flight_by_worker().values()) == [3, 3]
    assert len(set(workers)) == 2
    assert pool.in_flight == 6
    chat_pool.runner.run(chat_pool.collector.wait_for([it.request_id for it in items]))
    assert pool.in_flight == 0


# ------------------------------------------------------------------------- dedicated pools


def test_non_streaming_completions(harness: Harness) -> None:
    harness.start_pool(endpoint=harness.api_base + "/completions", stream=False, chat=False)
    (r,) = send(harness, "plain", max_tokens=3)
    assert (r.status, r.output_text, r.completion_tokens) == ("ok", "w0 w1 w2 ", 3)
    assert r.first_chunk_at_ns == r.completed_at_ns
    assert r.received_at_ns <= r.sent_at_ns <= r.completed_at_ns
    headers, body = harness.server.requests[-1]
    assert body["prompt"] == "plain"
    assert "Authorization" not in headers


def test_connection_refused(harness: Harness) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    harness.start_pool(endpoint=f"http://127.0.0.1:{port}/v1/chat/completions")
    (r,) = send(harness, "x")
    assert (r.status, r.error_kind, r.http_status) == ("error", "connection_refused", 0)


def test_dry_run(harness: Harness) -> None:
    harness.start_pool(dry_run=True, endpoint="http://127.0.0.1:9/v1/chat/completions")
    results = send(harness, "a", "b", max_tokens=6)
    for r in results:
        assert (r.status, r.completion_tokens) == ("ok", 6)
        assert r.output_text.split() == ["token"] * 6
        assert len(r.chunk_times_ns) == 6
        assert_ordered(r)
    assert harness.server.requests == []


def test_workers_launched_ahead_are_adopted_and_the_extra_one_killed(harness: Harness) -> None:
    launch = WorkerLaunch(2)  # (their interpreters start now; their settings come later)
    first, extra = (waiting.proc for waiting in launch._waiting)
    pool = harness.start_pool(1, launch)
    assert list(pool.worker_pids.values()) == [first.pid]
    assert extra.returncode is not None  # killed and reaped by the start
    assert len(launch) == 0
    (r,) = send(harness, "a")
    assert (r.status, r.worker_id) == ("ok", 0)


def test_launched_workers_never_adopted_are_killed() -> None:
    launch = WorkerLaunch(1)
    (waiting,) = launch._waiting
    launch.close()
    assert waiting.proc.returncode is not None
    assert_no_orphans([waiting.proc.pid])


def test_killed_worker_is_reported_and_replaced(harness: Harness) -> None:
    pool = harness.start_pool(1)
    (old_id, old_pid) = next(iter(pool.worker_pids.items()))
    lost = [item("hang") for _ in range(3)]
    for it in lost:
        pool.submit(it)
    harness.runner.run(asyncio.sleep(0.3))  # they are on the wire
    os.kill(old_pid, signal.SIGKILL)
    results = harness.runner.run(harness.collector.wait_for([it.request_id for it in lost]))
    for r in results:
        assert (r.status, r.error_kind, r.worker_id) == ("error", "worker_lost", old_id)
        assert "SIGKILL" in r.error_message
    # The replacement takes new work (queued until it is ready).
    (after,) = send(harness, "x", timeout=30)
    assert after.status == "ok"
    assert after.worker_id != old_id
    assert old_pid not in pool.worker_pids.values()


def test_a_worker_whose_link_closes_stops_by_itself(harness: Harness) -> None:
    pool = harness.start_pool(1)
    (handle,) = pool._handles.values()  # (the link is internal to the pool)
    pid = handle.pid
    handle.link.close()  # as if the main process were gone (its end of the socket closed)
    harness.runner.run(asyncio.wait_for(asyncio.shield(handle.exited), 10))
    assert handle.exited.result() == 0  # it noticed, stopped cleanly and exited
    assert_no_orphans([pid])


def test_stop_with_grace_cancels_what_is_left(harness: Harness) -> None:
    pool = harness.start_pool(1)
    pids = list(pool.worker_pids.values())
    quick, stuck = item("delay=0.05", 4), item("hang")
    pool.submit(quick)
    pool.submit(stuck)
    harness.runner.run(asyncio.sleep(0.05))
    harness.runner.run(pool.stop(grace_s=0.5))
    results = harness.collector.results
    assert results[quick.request_id].status == "ok"
    assert (results[stuck.request_id].status, results[stuck.request_id].error_kind) == (
        "cancelled",
        "cancelled",
    )
    assert pool.in_flight == 0
    assert_no_orphans(pids)
    with pytest.raises(RunAbortedError):
        pool.submit(item("late"))


def test_item_handed_over_ahead_is_sent_at_its_ready_time(chat_pool: Harness) -> None:
    assert chat_pool.pool is not None
    items = [item(f"ahead {i}") for i in range(3)]
    for k, it in enumerate(items):
        it.not_before_ns = it.dispatched_at_ns + (100 + 20 * k) * 1_000_000
        chat_pool.pool.submit(it)
    results = chat_pool.runner.run(chat_pool.collector.wait_for([it.request_id for it in items]))
    for it, r in zip(items, results, strict=True):
        assert r.status == "ok"
        # held from the hand-over, never released early, taken up at the release
        assert it.not_before_ns <= r.released_at_ns == r.received_at_ns <= r.sent_at_ns
        assert r.released_at_ns - it.not_before_ns < 50_000_000  # (a loose bound: shared CPUs)
        assert_ordered(r)


def test_item_handed_over_ahead_that_arrives_late_is_recorded_late(chat_pool: Harness) -> None:
    """A worker whose loop was busy takes an item up after its ready time: it is sent at once
    and its arrival is its release, so dispatched_at is never before ready_at."""
    assert chat_pool.pool is not None
    late = item("arrived late")
    late.not_before_ns = late.dispatched_at_ns - 5_000_000  # due before it could arrive
    chat_pool.pool.submit(late)
    (r,) = chat_pool.runner.run(chat_pool.collector.wait_for([late.request_id]))
    assert r.status == "ok"
    assert late.not_before_ns < late.dispatched_at_ns <= r.released_at_ns == r.received_at_ns
    assert r.received_at_ns <= r.sent_at_ns
    assert_ordered(r)


def test_stop_without_grace_withdraws_held_items(harness: Harness) -> None:
    pool = harness.start_pool(1)
    held = item("never sent")
    held.not_before_ns = held.dispatched_at_ns + 60 * 1_000_000_000
    pool.submit(held)
    harness.runner.run(asyncio.sleep(0.1))  # it reached the worker and waits on its timer
    harness.runner.run(pool.stop(grace_s=0.0))
    r = harness.collector.results[held.request_id]
    assert (r.status, r.error_kind, r.released_at_ns) == ("cancelled", "cancelled", 0)
    assert r.completed_at_ns < held.not_before_ns
    assert harness.server.requests == []


def test_stop_with_grace_still_sends_held_items_on_time(harness: Harness) -> None:
    pool = harness.start_pool(1)
    held = item("due soon")
    held.not_before_ns = held.dispatched_at_ns + 300_000_000
    pool.submit(held)
    harness.runner.run(asyncio.sleep(0.1))
    harness.runner.run(pool.stop(grace_s=5.0))
    r = harness.collector.results[held.request_id]
    assert r.status == "ok"
    assert held.not_before_ns <= r.released_at_ns <= r.sent_at_ns
    assert len(harness.server.requests) == 1


def test_worker_that_cannot_start(harness: Harness) -> None:
    before = {p.pid for p in worker_children()}
    pool = WorkerPool(
        WorkerSettings(endpoint=harness.api_base + "/chat/completions"),
        1,
        [[1_000_000]],  # no such CPU
        harness.collector,
    )
    with pytest.raises(ConfigurationError, match=r"worker 0 .*exited with code 1.*OSError"):
        harness.runner.run(pool.start(timeout=30))
    assert {p.pid for p in worker_children()} == before


def test_repeated_deaths_stop_the_pool(harness: Harness) -> None:
    fatal: list[VeekshaError] = []
    settings = WorkerSettings(endpoint=harness.api_base + "/chat/completions")
    pool = WorkerPool(settings, 1, [[]], harness.collector, on_fatal=fatal.append, max_deaths=1)
    harness.runner.run(pool.start(timeout=30))
    harness.pool = pool
    for _ in range(2):  # the second death is the replacement's, even before it is ready
        (pid,) = pool.worker_pids.values()
        doomed = item("hang")
        pool.submit(doomed)
        os.kill(pid, signal.SIGKILL)
        (r,) = harness.runner.run(harness.collector.wait_for([doomed.request_id], 30))
        assert r.error_kind == "worker_lost"
    assert len(fatal) == 1
    assert isinstance(fatal[0], RunAbortedError)
    with pytest.raises(RunAbortedError, match="died"):
        pool.submit(item("x"))


_SIGNALS = pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)


@_SIGNALS
def test_a_stop_signal_while_a_worker_starts_does_not_kill_it(harness: Harness, sig: int) -> None:
    # A terminal's Ctrl-C (or SIGTERM, SIGHUP to the group) reaches the workers too; one that
    # came while a worker's interpreter started up killed it ("worker 0 was killed by SIGINT
    # before it was ready", exit 2 in a sweep's or a stress series' next point). The main
    # process stops them; they ignore the signal from their first instant.
    launch = WorkerLaunch(1)
    (waiting,) = launch._waiting
    os.kill(waiting.proc.pid, sig)  # (at once: the worker is starting up)
    time.sleep(0.5)
    assert waiting.proc.poll() is None, "the worker died of the signal"
    pool = harness.start_pool(1, launch)
    assert list(pool.worker_pids.values()) == [waiting.proc.pid]
    (r,) = send(harness, "a")
    assert r.status == "ok"


_FORK_AND_SIGNAL = """
import os, signal, sys, time
from veeksha.forked import prepare
assert prepare(["veeksha.dispatch.worker"]), "cannot fork here"
from veeksha.dispatch.launch import launch_worker
launched = launch_worker(fork=True)
os.kill(launched.proc.pid, int(sys.argv[1]))  # (at once: the fork is making itself a worker)
time.sleep(0.5)
print("alive" if launched.proc.poll() is None else f"died {launched.proc.returncode}")
launched.kill()
"""


@_SIGNALS
def test_a_stop_signal_while_a_forked_worker_starts_does_not_kill_it(sig: int) -> None:
    # the same for a worker forked from the main process (in a fresh process of one thread:
    # this test's has several, and a process with threads does not fork its helpers)
    done = subprocess.run(
        [sys.executable, "-c", _FORK_AND_SIGNAL, str(int(sig))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "alive", done.stdout + done.stderr
