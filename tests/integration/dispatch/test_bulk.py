"""Deferrable requests' Results on the bulk link: real worker processes, real socket pairs."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from tests.integration.dispatch.conftest import Harness, item
from veeksha.dispatch.messages import WorkItem
from veeksha.dispatch.pool import WorkerPool

pytestmark = pytest.mark.timeout(60)


def _deferrable(text: str) -> WorkItem:
    it = item(text, 6)
    it.deferrable = True
    return it


def _waiting(sock: socket.socket) -> bool:
    """Whether unread bytes wait in ``sock`` (without reading them)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


def _answered_unread(pool: WorkerPool, seconds: float = 0.5) -> tuple[bool, bool]:
    """Block the loop (nothing is read) while the worker answers; then which link holds what:
    (the normal link, the bulk link)."""
    pool.flush()
    time.sleep(seconds)
    (h,) = pool._live
    assert h.bulk is not None
    return _waiting(h.link.sock), _waiting(h.bulk.sock)


def test_ok_results_of_deferrable_requests_wait_in_the_bulk_link(harness: Harness) -> None:
    pool = harness.start_pool(dry_run=True, endpoint="http://127.0.0.1:9/v1/chat/completions")
    items = [_deferrable(t) for t in "abc"]
    for it in items:
        pool.submit(it, flush=False)
    assert _answered_unread(pool) == (False, True)  # nothing woke the main process
    results = harness.runner.run(harness.collector.wait_for([it.request_id for it in items]))
    assert [(r.status, r.completion_tokens) for r in results] == [("ok", 6)] * 3
    plain = item("d", 6)
    pool.submit(plain, flush=False)
    assert _answered_unread(pool) == (True, False)
    harness.runner.run(harness.collector.wait_for([plain.request_id]))


def test_a_failed_deferrable_request_answers_at_once(harness: Harness) -> None:
    pool = harness.start_pool(endpoint="http://127.0.0.1:9/v1/chat/completions")  # refused
    it = _deferrable("a")
    pool.submit(it, flush=False)
    assert _answered_unread(pool) == (True, False)
    (r,) = harness.runner.run(harness.collector.wait_for([it.request_id]))
    assert (r.status, r.error_kind) == ("error", "connection_refused")


def test_a_killed_worker_s_bulk_results_are_answered_not_lost(harness: Harness) -> None:
    pool = harness.start_pool(dry_run=True, endpoint="http://127.0.0.1:9/v1/chat/completions")
    (old_id, old_pid) = next(iter(pool.worker_pids.items()))
    items = [_deferrable(t) for t in "abcd"]
    for it in items:
        pool.submit(it, flush=False)
    assert _answered_unread(pool) == (False, True)
    os.kill(old_pid, signal.SIGKILL)  # its Results are in the kernel's buffer, unread
    results = harness.runner.run(harness.collector.wait_for([it.request_id for it in items]))
    assert [(r.status, r.error_kind, r.worker_id) for r in results] == [("ok", "", old_id)] * 4
    harness.runner.run(harness.collector.wait_for([], 0.1))
    assert pool.in_flight == 0
