"""kill -9 of HTTP worker processes of a real ``veeksha run``, found among its children."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil

from tests.integration.robustness.helpers import RunProcess, audit_run, start_run, write_scenario

_SCENARIO = """\
    seed: 11
    traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.05}}
    session_generator:
      type: synthetic
      session_graph:
        type: linear
        num_request_generator: {type: fixed, value: 3}
        request_wait_generator: {type: fixed, interval: 0.02}
      output_spec: {text: {output_length_generator: {type: fixed, value: 30}}}
    client: {request_timeout: 10}
    runtime:
      {max_sessions: MAX, benchmark_timeout: 30, post_timeout_grace_seconds: 5, num_workers: 2}
    simulator: {timing: fixed, ttft_ms: 50, itl_ms: 10}
    evaluators: [{type: performance, stream_metrics: false}]
"""


def _start(folder: Path, max_sessions: int) -> RunProcess:
    path = write_scenario(folder, _SCENARIO.replace("MAX", str(max_sessions)))
    return start_run(path, folder / "out")


def _kill_a_new_worker(run: RunProcess, killed: set[int]) -> None:
    fresh: list[psutil.Process] = []

    def found() -> bool:
        fresh[:] = [p for p in run.workers() if p.pid not in killed]
        return bool(fresh)

    run.wait_for(found, 15, "a live worker")
    killed.add(fresh[0].pid)
    fresh[0].send_signal(signal.SIGKILL)


def test_a_killed_worker_is_replaced_and_its_requests_are_worker_lost(tmp_path: Path) -> None:
    run = _start(tmp_path, max_sessions=100)  # ~5 s of arrivals: room for a slow replacement
    run.wait_dispatching(requests=20)
    killed: set[int] = set()
    _kill_a_new_worker(run, killed)
    # the pool replaces it: two live workers again, one of them new
    run.wait_for(
        lambda: len({p.pid for p in run.workers()} - killed) == 2, 15, "a replacement worker"
    )
    result = run.finish(timeout=40)
    assert result.code == 0, result.output
    run.assert_no_survivors()

    audit = audit_run(run.run_dir)
    assert audit.metadata["interrupted"] == "false"
    assert audit.metadata["stop_reason"] == "completed"
    assert audit.sessions.num_rows == 100
    kinds = audit.kinds()
    assert kinds["error", "worker_lost"] >= 1, kinds  # ~7 requests are in flight at any time
    assert set(kinds) <= {("ok", ""), ("error", "worker_lost"), ("cancelled", "cancelled")}
    lost = [r for r in audit.rows if r["error_kind"] == "worker_lost"]
    assert len({r["worker_id"] for r in lost}) == 1
    # cancel_session_on_failure (default): a lost turn ends its session; others go on
    lost_sessions = {r["session_id"] for r in lost}
    for r in audit.rows:
        if r["session_id"] in lost_sessions and r["status"] == "cancelled":
            assert r["dispatched_at"] is None
    later = [r for r in audit.rows if r["status"] == "ok" and r["worker_id"] >= 2]
    assert later, "the replacement worker served nothing"


def test_workers_that_keep_dying_stop_the_run_cleanly_with_exit_3(tmp_path: Path) -> None:
    run = _start(tmp_path, max_sessions=-1)
    run.wait_dispatching(requests=10)
    killed: set[int] = set()
    started = time.monotonic()
    for _ in range(4):  # the pool gives up after more than 3 deaths within 10 s
        _kill_a_new_worker(run, killed)
    result = run.finish(timeout=30)
    assert time.monotonic() - started < 20
    assert result.code == 3, result.output
    assert "Traceback" not in result.output
    assert "worker processes died within" in result.stderr, result.stderr
    run.assert_no_survivors()

    audit = audit_run(run.run_dir)
    assert audit.metadata["interrupted"] == "true"
    assert audit.metadata["stop_reason"] == "worker_failure"
    assert audit.kinds()["error", "worker_lost"] >= 1
