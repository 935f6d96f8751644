"""Ctrl-C, SIGTERM and SIGKILL sent to a real ``veeksha run`` process mid-run.

Each run is open-loop at 20 sessions/s of 4-turn chats against the built-in simulator with fixed
timing (a request takes ~0.34 s), so at any moment requests are in flight, queued and pending.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.integration.robustness.helpers import (
    CliResult,
    RunProcess,
    audit_run,
    run_cli,
    run_in_process,
    start_run,
    summary,
    write_scenario,
)
from veeksha.record.trace import read_trace

_SCENARIO = """\
    seed: 7
    traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.05}}}}
    session_generator:
      type: synthetic
      session_graph:
        type: linear
        num_request_generator: {{type: fixed, value: 4}}
        request_wait_generator: {{type: fixed, interval: 0.05}}
      output_spec: {{text: {{output_length_generator: {{type: fixed, value: 30}}}}}}
    client: {{request_timeout: 30}}
    runtime:
      max_sessions: -1
      benchmark_timeout: 60
      post_timeout_grace_seconds: {grace}
      num_workers: 2
    simulator: {{timing: fixed, ttft_ms: 50, itl_ms: 10, faults: {{never_ending_rate: {never}}}}}
    evaluators: [{{type: performance, stream_metrics: false}}]
"""
_REQUEST_S = 0.05 + 29 * 0.010


def _scenario(folder: Path, grace: float = 5, never: float = 0.0) -> Path:
    return write_scenario(folder, _SCENARIO.format(grace=grace, never=never))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_one_signal_drains_in_flight_evaluates_and_exits_3(tmp_path: Path, sig: int) -> None:
    run = start_run(_scenario(tmp_path), tmp_path / "out")
    run.wait_dispatching(requests=12)
    run.send(sig)
    signalled = time.monotonic()
    result = run.finish(timeout=30)
    assert result.code == 3, result.output
    assert "Traceback" not in result.output
    # the drain took one request's time, not the 5 s grace; then evaluation and writing
    assert time.monotonic() - signalled < 10
    assert "the run was interrupted" in result.stderr, result.stderr
    # the signal is answered at once on the console (and in run.log), even before the drain
    assert "in flight get 5 s to finish (interrupt again to stop them at once)" in result.stderr
    run.assert_no_survivors()

    audit = audit_run(run.run_dir)
    assert audit.metadata["interrupted"] == "true"
    assert audit.metadata["stop_reason"] == "interrupted"
    assert summary(run.run_dir)["run"]["interrupted"] is True
    kinds = audit.kinds()
    # every request in flight finished within the grace; nothing undispatched was sent after
    assert set(kinds) <= {("ok", ""), ("cancelled", "cancelled")}, kinds
    assert kinds["ok", ""] >= 12
    assert kinds["cancelled", "cancelled"] >= 1  # later turns of the sessions in progress
    cancelled = [r for r in audit.rows if r["status"] == "cancelled"]
    assert all(r["dispatched_at"] is None for r in cancelled)


def test_second_sigint_stops_at_once_and_leaves_readable_parquet(tmp_path: Path) -> None:
    # every request streams forever: only the grace (30 s) or a second Ctrl-C ends them
    run = start_run(_scenario(tmp_path, grace=30, never=1.0), tmp_path / "out")
    run.wait_dispatching(requests=10)
    run.send(signal.SIGINT)
    time.sleep(0.5)
    second_ns = time.monotonic_ns()
    run.send(signal.SIGINT)
    result = run.finish(timeout=30)
    assert result.code == 3, result.output
    assert "Traceback" not in result.output
    assert "interrupted again: the requests in flight are stopped now" in result.stderr
    run.assert_no_survivors()

    audit = audit_run(run.run_dir)
    assert audit.metadata["interrupted"] == "true"
    dispatched = [r for r in audit.rows if r["dispatched_at"] is not None]
    assert len(dispatched) >= 10
    assert {(r["status"], r["error_kind"]) for r in dispatched} == {("cancelled", "cancelled")}
    # cancelled at once, not after the grace (30 s) nor the pool's kill margin (5 s)
    second = (second_ns - int(audit.metadata["t0_monotonic_ns"])) / 1e9
    assert max(r["processed_at"] for r in dispatched) - second < 2.0


def test_sigkill_keeps_all_but_the_last_second_and_leaves_no_process(tmp_path: Path) -> None:
    run = start_run(_scenario(tmp_path), tmp_path / "out")
    run.wait_dispatching(requests=40)
    time.sleep(1.5)  # a few writer ticks
    run.track()
    assert run.workers(), "no worker process found"
    assert run.simulators(), "no simulator process found"
    killed_at_ns = time.monotonic_ns()
    run.send(signal.SIGKILL)
    result = run.finish(timeout=10)
    assert result.code == -signal.SIGKILL
    run.assert_no_survivors(within=5)

    audit = audit_run(run.run_dir, finalised=False)
    t0_ns = int(audit.metadata["t0_monotonic_ns"])
    killed_at = (killed_at_ns - t0_ns) / 1e9
    traced = read_trace(run.run_dir / "trace.jsonl")
    recorded = {r["request_id"] for r in audit.rows}
    # a request dispatched well before the kill finished and reached a part within a tick (1 s)
    old = [e.request_id for e in traced if e.dispatched_at < killed_at - 1.0 - _REQUEST_S - 0.5]
    assert len(old) >= 20
    missing = [i for i in old if i not in recorded]
    assert not missing, f"{len(missing)} requests of earlier seconds have no row"

    # the report says the run did not end, and how many traced requests it does not count
    unrecorded = {e.request_id for e in traced} - recorded
    assert unrecorded, "nothing was in flight at the kill"  # (~7 requests at any moment)
    report = run_cli("report", str(run.run_dir), "--no-plots")
    assert report.code == 0, report.output
    said = (
        "partial run: it did not end (killed, or its results could not be written), so every "
        f"figure covers only the requests recorded; at least {len(unrecorded)} dispatched "
        "requests have no row (in flight at the end, or answered in its last second) and are "
        "not counted"
    )
    assert said in " ".join(report.stdout.split())  # (rich wraps it to the terminal)
    assert (run.run_dir / "health.txt").read_text().splitlines()[1] == said
    written = summary(run.run_dir)
    assert written["run"]["partial"] is True
    assert written["run"]["unrecorded_requests"] == len(unrecorded)
    assert written["requests"]["total"] == audit.requests.num_rows  # the rows, no more


_MANY_FAST = """\
    seed: 1
    traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.0005}}
    session_generator:
      type: synthetic
      session_graph: {type: single_request}
      output_spec: {text: {output_length_generator: {type: fixed, value: 8}}}
    runtime: {max_sessions: 4000, benchmark_timeout: 60}
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_end_is_written_is_held_until_it_is(tmp_path: Path, sig: int) -> None:
    # Signalled after the traffic (the watch's last scrape is written when the drain is done),
    # while the rows are flushed and evaluated: the end is finished, then the signal ends the
    # command (exit 3), and the run is whole (its traffic was not interrupted).
    run = start_run(write_scenario(tmp_path, _MANY_FAST), tmp_path / "out")
    run.wait_dispatching(requests=1)
    scraped = run.run_dir / "server_metrics.parquet"
    deadline = time.monotonic() + 30
    while not scraped.exists() and run.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert run.proc.poll() is None, "the run ended before the signal could be sent"
    run.send(sig)
    result = run.finish(timeout=30)
    assert result.code == 3, result.output
    assert "Traceback" not in result.output
    assert "while the run's results are written: they are finished first" in result.stderr
    assert f"the run's results are written: {run.run_dir}" in result.stderr
    written = summary(run.run_dir)["run"]
    assert (written["interrupted"], written["stop_reason"]) == (False, "completed")
    assert "ended (completed): 4000 sessions" in (run.run_dir / "run.log").read_text()
    audit = audit_run(run.run_dir, report=False)
    assert audit.requests.num_rows == 4000
    assert audit.metadata["interrupted"] == "false"
    run.assert_no_survivors()


def _kinds_after_a_clean_stop(audit_kinds: dict[tuple[str, str], int]) -> None:
    # requests in flight finished within the grace; the rest were never sent; no request is
    # reported as a failure of the server or of veeksha (worker_lost)
    assert set(audit_kinds) <= {("ok", ""), ("cancelled", "cancelled")}, audit_kinds


def test_sigterm_to_the_whole_process_group_is_one_clean_stop(tmp_path: Path) -> None:
    # `docker stop`, systemd, `timeout` and `kill -- -PGID` signal every process of the group,
    # the workers too: a worker that died of it lost its requests (worker_lost errors)
    run = start_run(_scenario(tmp_path), tmp_path / "out", own_group=True)
    run.wait_dispatching(requests=12)
    run.track()
    assert run.workers(), "no worker process found"
    os.killpg(run.proc.pid, signal.SIGTERM)
    result = run.finish(timeout=30)
    assert result.code == 3, result.output
    assert "Traceback" not in result.output
    run.assert_no_survivors()
    audit = audit_run(run.run_dir)
    assert (audit.metadata["interrupted"], audit.metadata["stop_reason"]) == ("true", "interrupted")
    kinds = audit.kinds()
    _kinds_after_a_clean_stop(kinds)
    assert kinds["ok", ""] >= 12
    assert "interrupted (SIGTERM): no new requests; the " in result.stderr, result.stderr


def test_the_terminal_closing_keeps_every_row_and_ends_the_run_whole(tmp_path: Path) -> None:
    # The terminal closes: its shell sends SIGHUP to the job's process group, and every write
    # to the terminal fails from then on (EIO). Was: the process died at once (the default
    # action), its last second of rows and every request in flight lost, no evaluation.
    master, slave = os.openpty()
    run = start_run(_scenario(tmp_path), tmp_path / "out", own_group=True, console=slave)
    os.close(slave)
    hang_up = threading.Event()
    reader = threading.Thread(target=_terminal, args=(master, hang_up), daemon=True)
    reader.start()
    run.wait_dispatching(requests=12)
    hang_up.set()
    reader.join(timeout=5)  # the terminal is gone (its master end closed by the reader) ...
    assert not reader.is_alive()
    os.killpg(run.proc.pid, signal.SIGHUP)  # ... and the shell passes its SIGHUP on to the job
    result = run.finish(timeout=30)
    assert result.code == 3  # (it said why in run.log: nobody reads the terminal)
    run.assert_no_survivors()
    log = (run.run_dir / "run.log").read_text()
    assert "interrupted (SIGHUP: the terminal closed): no new requests; the " in log, log
    assert "ended (interrupted): " in log
    audit = audit_run(run.run_dir)
    assert summary(run.run_dir)["run"]["stop_reason"] == "interrupted"
    kinds = audit.kinds()
    _kinds_after_a_clean_stop(kinds)
    assert kinds["ok", ""] >= 12
    assert (run.run_dir / "health.txt").exists()


def _terminal(master: int, hang_up: threading.Event) -> None:
    """Read what the run writes to its terminal (a full pty would block its writes) until
    ``hang_up``, then close it. (Closed here, not by another thread while this one reads: the
    number could be reused by a file the test opens, and read from here.)"""
    try:
        while not hang_up.is_set():
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                with contextlib.suppress(OSError):
                    os.read(master, 65536)
    finally:
        os.close(master)


_SLOW_SET_UP = """\
    seed: 7
    traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.05}}}}
    session_generator:
      type: synthetic
      session_graph: {{type: single_request}}
    client: {{tokenizer: {{type: server}}}}
    runtime: {{max_sessions: 10, benchmark_timeout: 60}}
    simulator: {{faults: {{tokenize_delay_ms: {delay}}}}}
"""
_SET_UP_STOPS = (
    "interrupted: the set-up stops after its current step (interrupt again to stop at once)"
)


def _calibrating(tmp_path: Path, delay_ms: int) -> RunProcess:
    """A run in its set-up: the server tokenizer's calibration (~60 calls of ``delay_ms``)."""
    scenario = write_scenario(tmp_path, _SLOW_SET_UP.format(delay=delay_ms))
    run = start_run(scenario, tmp_path / "out")

    def calibrating() -> bool:
        folder = run.run_dir_or_none()
        log = None if folder is None else folder / "run.log"
        return log is not None and log.exists() and "server tokenizer:" in log.read_text()

    run.wait_for(calibrating, 30, "the calibration")
    return run


def _stopped_in_the_set_up(run: RunProcess, result: CliResult) -> None:
    assert result.code == 3, result.output
    assert "Traceback" not in result.output
    said = (
        "interrupted during the set-up, before t0: no request was sent, so the run folder"
        f" {run.run_dir} holds no results (its run.log says how far it got)"
    )
    assert said in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith("interrupted")
    assert said in (run.run_dir / "run.log").read_text()
    assert sorted(p.name for p in run.run_dir.iterdir()) == ["config.yaml", "run.log"]
    run.assert_no_survivors()


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_signal_during_the_set_up_is_answered_and_stops_it(tmp_path: Path, sig: int) -> None:
    # Was: Ctrl-C said nothing until the calibration had ended, then only "interrupted";
    # SIGTERM and SIGHUP killed the process without a word (exit -15, -1).
    run = _calibrating(tmp_path, delay_ms=40)
    run.send(sig)
    result = run.finish(timeout=30)
    assert result.stderr.startswith(_SET_UP_STOPS), result.stderr  # (at once, then the step)
    _stopped_in_the_set_up(run, result)


def test_a_second_ctrl_c_stops_the_set_up_at_once(tmp_path: Path) -> None:
    run = _calibrating(tmp_path, delay_ms=200)  # (~13 s of calibration)
    run.send(signal.SIGINT)
    time.sleep(0.3)
    run.send(signal.SIGINT)
    sent = time.monotonic()
    result = run.finish(timeout=30)
    assert time.monotonic() - sent < 4, "the set-up did not stop at once"
    _stopped_in_the_set_up(run, result)


def test_a_console_that_goes_away_costs_no_result_nor_the_exit_code(tmp_path: Path) -> None:
    # The reader of the run's output leaves mid-run (`veeksha run ... 2>&1 | head`, or `| tee`
    # killed with the terminal): every later write fails (EPIPE). Was: the results were written,
    # then the report's write raised and the command exited 1 with a traceback nobody saw.
    read, write = os.pipe()
    scenario = write_scenario(tmp_path, _MANY_FAST)
    run = start_run(scenario, tmp_path / "out", "--set", "runtime.max_sessions=500", console=write)
    os.close(write)
    with os.fdopen(read, "rb") as console:
        assert console.readline().startswith(b"run folder: ")
    result = run.finish(timeout=60)
    assert result.code == 0
    log = (run.run_dir / "run.log").read_text()
    assert "ended (completed): 500 sessions" in log
    assert audit_run(run.run_dir, report=False).requests.num_rows == 500
    assert (run.run_dir / "summary.json").exists()


def test_ctrl_c_while_the_run_folder_is_made_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between the folder's creation and its config.yaml: was an empty folder, never named
    from veeksha.record import run_folder

    def interrupted(run_dir: Path, scenario: object) -> Path:
        (Path(run_dir) / "config.yaml").write_text("seed: ")  # (half written)
        raise KeyboardInterrupt

    monkeypatch.setattr(run_folder, "write_config", interrupted)
    result = run_in_process(write_scenario(tmp_path, _MANY_FAST), tmp_path / "out", "--dry-run")
    assert result.code == 3, result.output
    assert result.stderr.strip() == "interrupted"
    assert list((tmp_path / "out").iterdir()) == []
