"""A failed request ends when it failed, not at its last byte (issue 21, item 4).

A server that stalls after one chunk leaves the last byte near the start; veeksha gives up at
``request_timeout``. The request's ``completed_at`` is the give-up, its children become ready
from then on (``cancel_session_on_failure: false``) or are cancelled then (``true``), and no
health check blames the generator for the time the server took. A reset and an HTTP 500 whose
body ends late end when veeksha saw them. Every run is audited (one row per node, readable
Parquet, ``veeksha report``, no traceback, no orphan).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.hostile.harness import (
    HostileRun,
    HostileServer,
    hostile_run,
    hostile_scenario,
)

pytestmark = pytest.mark.timeout(90)

_BEHAVIOURS = "tests.integration.hostile.behaviours_failtimes"
TIMEOUT_S = 1.0
AFTER_S = 0.5  # the reset and the end of the error body come this long after the last byte
WAIT_S = 0.01  # the scenario's think time
# Generous bounds ("it did not hang" / "it was not the bug"): the bug put the server's whole
# stall (TIMEOUT_S or AFTER_S) into these delays.
SLACK_S = 0.25
EARLY_S = 0.01  # the timeout's timer runs on the loop's millisecond clock from the start


def _scenario(server: HostileServer, *, cancel: bool) -> str:
    # A lag budget the machine's noise stays far below but the server's stall would not.
    health = (
        f"health_checks: {{strict: true, late_threshold_s: {SLACK_S},"
        f" max_dispatch_lag_p99_ms: {SLACK_S * 1000}}}"
    )
    text = hostile_scenario(server.base_url, sessions=2, request_timeout=TIMEOUT_S, extra=health)
    cancel_line = f"  cancel_session_on_failure: {str(cancel).lower()}\n"
    return text.replace("  type: rate\n", "  type: rate\n" + cancel_line, 1)


def _by_node(run: HostileRun) -> dict[tuple[int, int], dict[str, Any]]:
    return {(r["session_id"], r["node_id"]): r for r in run.rows}


def _sessions(run: HostileRun) -> dict[int, dict[str, Any]]:
    assert run.audit is not None
    return {s["session_id"]: s for s in run.audit.sessions.to_pylist()}


def _checks(run: HostileRun) -> dict[str, dict[str, Any]]:
    assert run.run_dir is not None
    health = json.loads((run.run_dir / "health.json").read_text())
    return {check["name"]: check for check in health["checks"]}


def _assert_children_ready_from_the_failure(run: HostileRun, failure: str) -> None:
    """Turns 2 and 3 were ready after the failed turn 1 ended, and left on time."""
    rows = _by_node(run)
    for session_id, session in _sessions(run).items():
        first, second, third = (rows[session_id, n] for n in range(3))
        assert (first["status"], first["error_kind"]) == failure
        assert (second["status"], third["status"]) == ("ok", "ok")
        assert second["ready_at"] == pytest.approx(first["completed_at"] + WAIT_S, abs=1e-6)
        for child in (second, third):
            assert 0 <= child["dispatch_lag"] < SLACK_S, child
            assert 0 <= child["generator_delay"] < SLACK_S, child
        # the session ended with its last turn, after the failure
        assert session["ended_at"] == pytest.approx(third["completed_at"], abs=1e-6)
        assert session["ended_at"] > first["completed_at"]
        assert (session["num_requests"], session["num_error"]) == (3, 1)
    checks = _checks(run)
    for name in ("generator_saturation", "dependencies"):
        assert checks[name]["status"] == "PASS", checks[name]
    lifecycle = checks["lifecycle_delays"]["statistics"]
    assert lifecycle["completed_to_processed"]["max"] < SLACK_S * 1000  # ms


def test_a_stalled_request_ends_when_veeksha_gives_up(tmp_path: Path) -> None:
    with HostileServer(f"{_BEHAVIOURS}:stall", tmp_path) as server:
        run = hostile_run(tmp_path, _scenario(server, cancel=False), expect_code=0, in_process=True)
    rows = _by_node(run)
    for session_id in _sessions(run):
        first = rows[session_id, 0]
        # the one chunk came at once; the request ended when the timer fired
        assert first["chunk_times"] == [first["first_chunk_at"]]
        assert first["last_byte_at"] == pytest.approx(first["first_chunk_at"], abs=1e-6)
        assert first["last_byte_at"] - first["sent_at"] < SLACK_S
        assert TIMEOUT_S - EARLY_S <= first["completed_at"] - first["sent_at"] < TIMEOUT_S + SLACK_S
        assert first["e2e"] is None  # latencies are for ok rows
        assert first["processed_at"] - first["completed_at"] < SLACK_S
    _assert_children_ready_from_the_failure(run, ("timeout", "timeout"))


def _unanswered(run: HostileRun) -> None:
    """The run's one health failure is ``answered``: no request of it got an answer (the strict
    health is exit 4 for it), and the checks of the load generator itself passed."""
    failed = {name for name, check in _checks(run).items() if check["status"] == "FAIL"}
    assert failed == {"answered"}, _checks(run)


def test_a_stall_cancels_its_session_at_the_give_up(tmp_path: Path) -> None:
    with HostileServer(f"{_BEHAVIOURS}:stall", tmp_path) as server:
        # (every request stalls: nothing is answered, the strict health's exit 4)
        run = hostile_run(tmp_path, _scenario(server, cancel=True), expect_code=4, in_process=True)
    _unanswered(run)
    rows = _by_node(run)
    for session_id, session in _sessions(run).items():
        first = rows[session_id, 0]
        assert first["status"] == "timeout"
        assert TIMEOUT_S - EARLY_S <= first["completed_at"] - first["sent_at"] < TIMEOUT_S + SLACK_S
        for child in (rows[session_id, 1], rows[session_id, 2]):
            assert child["status"] == "cancelled"
            assert child["dispatched_at"] is None
            assert child["completed_at"] is None
            assert 0 <= child["processed_at"] - first["completed_at"] < SLACK_S
        assert session["ended_at"] == pytest.approx(first["completed_at"], abs=1e-6)
        assert session["status"] == "error"
        # one request went to the server; two were never sent
        assert (session["num_requests"], session["num_ok"], session["num_error"]) == (1, 0, 1)
        assert session["num_cancelled"] == 2
        assert session["think_time_total"] == pytest.approx(first["wait_after_ready"])
    assert _checks(run)["generator_saturation"]["status"] == "PASS"


def test_a_reset_ends_the_request_when_it_is_seen(tmp_path: Path) -> None:
    with HostileServer(f"{_BEHAVIOURS}:reset", tmp_path, after=AFTER_S) as server:
        run = hostile_run(tmp_path, _scenario(server, cancel=False), expect_code=0, in_process=True)
    rows = _by_node(run)
    for session_id in _sessions(run):
        first = rows[session_id, 0]
        assert first["output_tokens"] is not None  # the text before the break is kept
        assert first["last_byte_at"] - first["sent_at"] < SLACK_S
        assert AFTER_S - 0.05 <= first["completed_at"] - first["last_byte_at"] < AFTER_S + SLACK_S
    _assert_children_ready_from_the_failure(run, ("error", "connection_reset"))


def test_an_http_error_ends_with_its_body(tmp_path: Path) -> None:
    with HostileServer(f"{_BEHAVIOURS}:error_500", tmp_path, after=AFTER_S) as server:
        run = hostile_run(tmp_path, _scenario(server, cancel=False), expect_code=0, in_process=True)
    rows = _by_node(run)
    for session_id in _sessions(run):
        first = rows[session_id, 0]
        assert first["http_status"] == 500
        assert "overloaded" in first["error_message"]
        assert AFTER_S - 0.05 <= first["completed_at"] - first["sent_at"] < AFTER_S + SLACK_S
        # the error was seen when its body's last byte came
        assert 0 <= first["completed_at"] - first["last_byte_at"] < 0.05
    _assert_children_ready_from_the_failure(run, ("error", "http_5xx"))


def test_closed_loop_replaces_a_stalled_session_from_the_give_up(tmp_path: Path) -> None:
    # one session at a time: the next one takes the slot when the stalled one ended
    with HostileServer(f"{_BEHAVIOURS}:stall", tmp_path) as server:
        text = _scenario(server, cancel=True).replace(
            "  type: rate\n",
            "  type: concurrent\n  target_concurrent_sessions: 1\n  rampup_seconds: 0\n",
            1,
        )
        text = text.replace("  interval_generator: {type: fixed, interval: 0.125}\n", "", 1)
        run = hostile_run(tmp_path, text, expect_code=4, in_process=True)
    _unanswered(run)
    sessions = sorted(_sessions(run).values(), key=lambda s: s["started_at"])
    assert len(sessions) == 2
    rows = _by_node(run)
    earlier, later = sessions
    assert later["started_at"] == pytest.approx(earlier["ended_at"], abs=1e-6)
    assert earlier["ended_at"] == pytest.approx(rows[earlier["session_id"], 0]["completed_at"])
    root = rows[later["session_id"], 0]
    assert root["ready_at"] == pytest.approx(later["started_at"])
    assert 0 <= root["dispatch_lag"] < SLACK_S
    assert _checks(run)["generator_saturation"]["status"] == "PASS"
