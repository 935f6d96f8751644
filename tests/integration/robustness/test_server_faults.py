"""Real server faults over loopback: the built-in simulator's fault injection, a port where nothing
listens, and a server killed and restarted on the same port mid-run.

Runs driven in-process (``run_benchmark``) still use real worker processes and a real simulator
subprocess; only the main process is the test's.
"""

from __future__ import annotations

import json
import socket
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from tests.integration.robustness.helpers import (
    audit_run,
    run_cli,
    start_run,
    write_scenario,
)
from veeksha.engine import run_benchmark
from veeksha.scenario.loader import load_scenario
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess

_MIXED = """\
    seed: 5
    traffic_scheduler:
      type: rate
      interval_generator: {type: fixed, interval: 0.04}
      cancel_session_on_failure: true
    session_generator:
      type: synthetic
      session_graph:
        type: linear
        num_request_generator: {type: fixed, value: 3}
        request_wait_generator: {type: fixed, interval: 0.01}
      output_spec: {text: {output_length_generator: {type: fixed, value: 10}}}
    client: {request_timeout: 0.8}
    runtime:
      max_sessions: -1
      benchmark_timeout: 2.5
      post_timeout_grace_seconds: 0.5
      num_workers: 2
    simulator:
      timing: fixed
      ttft_ms: 20
      itl_ms: 5
      faults:
        http_500_rate: 0.06
        http_503_rate: 0.06
        http_429_rate: 0.06
        retry_after_s: 1
        disconnect_rate: 0.06
        stall_rate: 0.06
        stall_s: 3
        malformed_sse_rate: 0.06
        never_ending_rate: 0.06
    evaluators: [{type: performance, stream_metrics: false}]
"""


def _run(folder: Path, text: str) -> Path:
    scenario = load_scenario(write_scenario(folder, text))
    run_dir = folder / "run"
    run_dir.mkdir()
    code = run_benchmark(scenario, run_dir, quiet=True, plots=False)
    assert code == 0  # faults are measured, not fatal; health is not strict
    return run_dir


def test_every_fault_becomes_a_typed_error_and_the_run_ends_on_time(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, _MIXED)
    audit = audit_run(run_dir)
    rows = audit.rows
    assert audit.metadata["stop_reason"] == "timeout"
    kinds = Counter((r["status"], r["error_kind"], r["http_status"]) for r in rows)
    assert kinds["error", "http_5xx", 500] >= 1, kinds
    assert kinds["error", "http_5xx", 503] >= 1, kinds
    assert kinds["error", "http_4xx", 429] >= 1, kinds
    assert kinds["error", "connection_reset", 200] >= 1, kinds  # reset mid-stream
    assert kinds["error", "malformed_response", 200] >= 1, kinds
    # stalls (3 s) and never-ending streams are ended by request_timeout (0.8 s)
    assert kinds["timeout", "timeout", 200] >= 2, kinds
    assert kinds["ok", "", 200] >= 50, kinds
    assert all(r["retries"] == 0 for r in rows)  # retries are off by default
    # benchmark_timeout (2.5 s after the first session) + grace (0.5 s) bounds every outcome
    assert max(r["processed_at"] for r in rows) < 2.5 + 0.5 + 1.5
    # cancel_session_on_failure: nothing after a failed turn was sent
    first_failure: dict[int, int] = {}
    for r in sorted(rows, key=lambda r: (r["session_id"], r["node_id"])):
        failed_before = first_failure.get(r["session_id"])
        if failed_before is not None:
            assert r["dispatched_at"] is None, r
            assert r["status"] == "cancelled"
        elif r["status"] in ("error", "timeout"):
            first_failure[r["session_id"]] = r["node_id"]
    assert first_failure
    statuses = Counter(audit.sessions.column("status").to_pylist())
    assert statuses["error"] >= len(first_failure) - statuses["cancelled"], statuses


def test_retries_with_backoff_for_429_and_503_and_sessions_that_continue(tmp_path: Path) -> None:
    text = (
        _MIXED.replace("cancel_session_on_failure: true", "cancel_session_on_failure: false")
        .replace("client: {request_timeout: 0.8}", "client: {request_timeout: 5, max_retries: 2}")
        .replace("max_sessions: -1", "max_sessions: 30")
        .replace("benchmark_timeout: 2.5", "benchmark_timeout: 20")
    )
    faults = text.index("      faults:")
    text = text[:faults] + (
        "      faults: {http_500_rate: 0.15, http_503_rate: 0.2, http_429_rate: 0.2, "
        "retry_after_s: 0}\n    evaluators: [{type: performance, stream_metrics: false}]\n"
    )
    run_dir = _run(tmp_path, text)
    audit = audit_run(run_dir)
    rows = audit.rows
    assert len(rows) == 90
    assert audit.metadata["stop_reason"] == "completed"
    assert all(r["dispatched_at"] is not None for r in rows)  # failures did not cancel sessions
    retried_ok = [r for r in rows if r["status"] == "ok" and r["retries"] > 0]
    assert retried_ok, "no request succeeded after a retry"
    for r in rows:
        if r["http_status"] in (429, 503):
            assert r["retries"] == 2  # gave up after max_retries
        else:  # ok, or a 500 (never retried itself) after retried 429/503 answers
            assert r["retries"] <= 2
    # with cancel off, a failed turn's child is still sent (with history lacking the answer)
    by_key = {(r["session_id"], r["node_id"]): r for r in rows}
    children_of_failures = [
        by_key[s, n + 1]
        for (s, n), r in by_key.items()
        if r["status"] != "ok" and (s, n + 1) in by_key
    ]
    assert children_of_failures
    assert all(child["dispatched_at"] is not None for child in children_of_failures)


def test_connection_refused_is_a_clear_input_error_before_the_run(tmp_path: Path) -> None:
    port = _free_port()
    scenario = write_scenario(
        tmp_path,
        f"""\
        client: {{api_base: "http://127.0.0.1:{port}/v1", model: m}}
        runtime: {{max_sessions: 1}}
        """,
    )
    result = run_cli("run", str(scenario), "--output-dir", str(tmp_path / "out"), "--no-plots")
    message = result.assert_clean_error(2, "client.api_base", f"127.0.0.1:{port}")
    assert "Connection refused" in message
    assert len(message.splitlines()) <= 2, message
    assert not list((tmp_path / "out").glob("*/requests.parquet"))


def test_a_server_that_dies_mid_run_and_comes_back(tmp_path: Path) -> None:
    port = _free_port()
    config = SimulatorConfig(timing="fixed", ttft_ms=20, itl_ms=20)

    def serve() -> SimulatorProcess:
        sim = SimulatorProcess(config, port=port, fork=True)
        sim.start(timeout=30)
        return sim

    sim = serve()
    try:
        scenario = write_scenario(
            tmp_path,
            f"""\
            seed: 9
            traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.05}}}}
            session_generator:
              type: synthetic
              session_graph: {{type: single_request}}
              output_spec: {{text: {{output_length_generator: {{type: fixed, value: 10}}}}}}
            client:
              {{api_base: "http://127.0.0.1:{port}/v1", model: veeksha-sim, request_timeout: 3}}
            runtime:
              max_sessions: -1
              benchmark_timeout: 5
              post_timeout_grace_seconds: 1
              num_workers: 1
            evaluators: [{{type: performance, stream_metrics: false}}]
            """,
        )
        run = start_run(scenario, tmp_path / "out")
        run.wait_dispatching(requests=10)
        sim.stop(grace=0)  # requests in flight are cut off, new ones are refused
        down_since = time.monotonic()
        time.sleep(1.0)
        sim = serve()
        up_again = time.monotonic()
        result = run.finish(timeout=30)
    finally:
        sim.stop()
    assert result.code == 0, result.output
    run.assert_no_survivors()
    audit = audit_run(run.run_dir)
    assert audit.metadata["stop_reason"] == "timeout"
    kinds = audit.kinds()
    assert kinds["error", "connection_refused"] >= 5, kinds  # ~1 s at 20/s while it was down
    # the refused requests never reached the server: not among the answers the check counts
    health = json.loads((run.run_dir / "health.json").read_text())
    numbers = next(c for c in health["checks"] if c["name"] == "server_numbers")
    reached = [
        r
        for r in audit.rows
        if r["phase"] == "measured"
        and r["sent_at"] is not None
        and r["error_kind"] != "connection_refused"
    ]
    assert numbers["statistics"]["requests"] == len(reached), numbers
    t0 = int(audit.metadata["t0_monotonic_ns"]) / 1e9
    sent = [r for r in audit.rows if r["dispatched_at"] is not None]
    after = [r for r in sent if r["dispatched_at"] + t0 > up_again + 0.2]
    assert after, "nothing was sent after the server came back"
    assert all(r["status"] == "ok" for r in after), Counter(r["error_kind"] for r in after)
    before = [r for r in sent if r["dispatched_at"] + t0 < down_since - 0.5]
    assert before
    assert all(r["status"] == "ok" for r in before)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_non_streaming_disconnect_is_a_connection_reset_not_a_silent_resend(
    tmp_path: Path,
) -> None:
    """The simulator's disconnect fault on a non-streaming answer breaks the body after its head,
    so veeksha records connection_reset. Before, it closed before any byte: on a reused
    keep-alive connection the client took that for a connection the server had closed while
    idle and sent the request again: 13 of 14 faults became ok rows in a run at 5 % (the server
    counted 313 requests for 300 rows), and here every request reached the server twice."""
    text = """\
    seed: 5
    traffic_scheduler:
      type: rate
      interval_generator: {type: fixed, interval: 0.03}
    session_generator:
      type: synthetic
      session_graph: {type: single_request}
      output_spec: {text: {output_length_generator: {type: fixed, value: 10}}}
    client: {stream: false, request_timeout: 2}
    runtime: {max_sessions: 12, num_workers: 1}
    simulator: {timing: fixed, ttft_ms: 5, itl_ms: 1, faults: {disconnect_rate: 1.0}}
    evaluators: [{type: performance, stream_metrics: false}]
"""
    run_dir = _run(tmp_path, text)
    scraped = pq.read_table(run_dir / "server_metrics.parquet").to_pylist()
    received = [r["value"] for r in scraped if r["metric"] == "veeksha_sim_requests_total"]
    assert received[-1] == 12  # each request sent once
    rows = audit_run(run_dir).rows
    kinds = Counter((r["status"], r["error_kind"], r["http_status"]) for r in rows)
    assert kinds == {("error", "connection_reset", 200): 12}, kinds  # (after the head: 200)
    # not one answer: the run measured failures only, and its health says so (exit 0 all the
    # same: health is not strict)
    health = json.loads((run_dir / "health.json").read_text())
    (answered,) = [check for check in health["checks"] if check["name"] == "answered"]
    assert answered["status"] == "FAIL"
    assert answered["detail"].startswith(
        "none of 12 measured requests was answered (12 connection_reset (HTTP 200))"
    )
    assert health["verdict"] == "FAIL"
