"""Whole runs: real simulator, real worker processes, real Parquet files read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from scipy import stats

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.dispatch.kernel_stamps import KERNEL_STAMPS_SUPPORTED
from veeksha.engine.cpu_wait import run_delay_ns
from veeksha.engine.traffic_sink import SESSION_FAILED, run_stopped
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.trace import read_trace
from veeksha.scenario.loader import load_scenario_text


def run(tmp_path: Path, text: str, name: str = "run") -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    scenario = load_scenario_text(text, "test.yaml")
    run_dir = tmp_path / name
    outcome = run_as_the_command(scenario, run_dir, quiet=True, plots=False)
    assert outcome.run_dir == run_dir
    requests = pd.read_parquet(run_dir / "requests.parquet")
    sessions = pd.read_parquet(run_dir / "sessions.parquet")
    return run_dir, requests, sessions


LINEAR = """
seed: {seed}
traffic_scheduler:
  type: rate
  interval_generator: {{type: poisson, arrival_rate: 20}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: uniform, min: 2, max: 4}}
    request_wait_generator: {{type: fixed, interval: 0.05}}
  channels:
    - type: text
      body_length_generator: {{type: uniform, min: 5, max: 40}}
      shared_prefix_ratio: 0.5
  output_spec:
    text:
      output_length_generator: {{type: uniform, min: 3, max: 12}}
runtime: {{max_sessions: 12, benchmark_timeout: 30, num_workers: 1}}
trace_recorder: {{enabled: true, include_content: true}}
simulator: {{ttft_ms: 2, itl_ms: 1}}
"""


def test_linear_sessions_keep_order_think_time_and_exact_history(tmp_path: Path) -> None:
    run_dir, requests, sessions = run(tmp_path, LINEAR.format(seed=7))
    assert set(requests.columns) == set(REQUESTS_SCHEMA.names)
    assert set(sessions.columns) == set(SESSIONS_SCHEMA.names)
    assert len(sessions) == 12
    assert (requests.status == "ok").all()
    assert len(requests) == sessions.num_nodes.sum()

    done = requests.set_index(["session_id", "node_id"])
    for row in requests.itertuples():
        # the lifecycle is ordered
        assert row.ready_at <= row.dispatched_at <= row.received_at <= row.sent_at
        assert row.sent_at <= row.first_chunk_at <= row.completed_at <= row.processed_at
        for parent in row.parents:
            ready = done.loc[(row.session_id, parent)].completed_at + row.wait_after_ready
            assert row.dispatched_at >= ready - 1e-9
            assert row.ready_at == pytest.approx(ready, abs=1e-6)
        if row.history_parent is not None and not np.isnan(row.history_parent):
            parent = done.loc[(row.session_id, int(row.history_parent))]
            # the simulator's usage: parent total + parent answer + own new tokens, exactly
            assert row.prompt_tokens_total == (
                parent.prompt_tokens_total + parent.output_tokens + row.prompt_tokens_new
            )
        else:
            assert row.prompt_tokens_total == row.prompt_tokens_new
        assert row.prompt_tokens_new == row.target_prompt_tokens
        assert row.output_tokens == row.requested_output_tokens

    meta = pq.read_metadata(run_dir / "requests.parquet").metadata
    assert meta[b"seed"] == b"7"
    assert json.loads(meta[b"target"])["kind"] == "simulator"
    assert meta[b"health_verdict"] in (b"pass", b"fail")
    summary = json.loads((run_dir / "summary.json").read_text())
    # (the order above held with chunks stamped by the kernel, the default)
    assert summary["run"]["chunk_timestamps"] == ("kernel" if KERNEL_STAMPS_SUPPORTED else "read")
    # no wall-clock step: no stamp clamped (test_clamped_stamps makes one)
    assert summary["run"]["chunk_stamps_clamped"] == 0
    assert (requests.chunk_stamps_clamped == 0).all()
    log = (run_dir / "run.log").read_text()
    assert "ended (completed): 12 sessions" in log
    if run_delay_ns(os.getpid()) is not None:  # (Linux with schedstat)
        # the run-queue wait of the main process and of the one worker, read from the kernel
        assert 0.0 <= summary["run"]["main_cpu_wait_s"] < 30.0
        assert 0.0 <= summary["run"]["worker_cpu_wait_s"] < 30.0
        health = json.loads((run_dir / "health.json").read_text())
        saturation = next(c for c in health["checks"] if c["name"] == "generator_saturation")
        assert 0.0 <= saturation["statistics"]["worker_cpu_wait_share"] < 1.0
        assert "waited for a CPU held by another process: workers" in log
    assert (run_dir / "config.yaml").exists()
    trace = read_trace(run_dir / "trace.jsonl")
    assert len(trace) == len(requests)
    assert all(entry.messages for entry in trace)
    # include_content: each answer's text in output_text, the very text its child's messages
    # carry as its history (the simulator's words: one token each)
    texts = requests.set_index("request_id").output_text
    assert all(len(texts[e.request_id].split()) == e.requested_output_tokens for e in trace)
    by_node = {(e.session_id, e.node_id): e.request_id for e in trace}
    children = [e for e in trace if e.history_parent is not None]
    assert children
    for entry in children:
        assert entry.messages is not None
        parent = by_node[(entry.session_id, entry.history_parent)]
        assert ["assistant", texts[parent]] in [list(m) for m in entry.messages]


def test_trace_content_is_what_the_server_received_with_the_prompt_fallback(
    tmp_path: Path,
) -> None:
    # the simulator's builtin tokenizer counts a word a token: a trace line's messages, counted
    # so, are the prompt tokens the server reported for that request (the worker appended
    # " Generate at least N tokens.", 5 words, to each prompt)
    text = """
seed: 3
traffic_scheduler: {type: rate, interval_generator: {type: poisson, arrival_rate: 20}}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  channels: [{type: text, body_length_generator: {type: uniform, min: 5, max: 40}}]
  output_spec: {text: {output_length_generator: {type: uniform, min: 3, max: 12}}}
client: {use_min_tokens_prompt_fallback: true}
runtime: {max_sessions: 12, benchmark_timeout: 30, num_workers: 1}
trace_recorder: {enabled: true, include_content: true}
simulator: {ttft_ms: 2, itl_ms: 1}
"""
    run_dir, requests, _ = run(tmp_path, text)
    assert (requests.status == "ok").all()
    served = requests.set_index("request_id").prompt_tokens_total
    trace = read_trace(run_dir / "trace.jsonl")
    assert len(trace) == len(requests) == 12
    for entry in trace:
        assert entry.messages is not None
        sent = sum(len(content.split()) for _, content in entry.messages)
        assert sent == served[entry.request_id] == entry.target_prompt_tokens + 5
        ending = f" Generate at least {entry.requested_output_tokens} tokens."
        assert entry.messages[-1][1].endswith(ending)


def test_same_seed_same_traffic_different_seed_different(tmp_path: Path) -> None:
    def traffic(seed: int, name: str) -> tuple[list[object], list[float]]:
        run_dir, _, sessions = run(tmp_path, LINEAR.format(seed=seed), name)
        entries = sorted(
            read_trace(run_dir / "trace.jsonl"), key=lambda e: (e.session_id, e.node_id)
        )
        content = [(e.session_id, e.node_id, e.parents, e.messages[-1]) for e in entries]
        starts = sorted(sessions.started_at.round(9).tolist())
        return content, starts

    first, first_starts = traffic(3, "a")
    again, again_starts = traffic(3, "b")
    other, other_starts = traffic(4, "c")
    assert first == again
    assert first_starts == again_starts  # planned arrival times, not when timers fired
    assert first != other
    assert first_starts != other_starts


def test_rate_run_hits_the_configured_arrival_rate(tmp_path: Path) -> None:
    run_dir, requests, sessions = run(
        tmp_path,
        """
traffic_scheduler:
  type: rate
  interval_generator: {type: poisson, arrival_rate: 100}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 400, benchmark_timeout: 30}
trace_recorder: {enabled: false}
""",
    )
    assert len(requests) == 400
    starts = np.sort(sessions.started_at.to_numpy())
    gaps = np.diff(starts)
    # exponential gaps with mean 1/100 s (KS), and the observed rate within 4 sigma of 100/s
    assert stats.kstest(gaps, stats.expon(scale=0.01).cdf).pvalue > 0.001
    rate = (len(starts) - 1) / (starts[-1] - starts[0])
    assert abs(rate - 100) < 4 * 100 / np.sqrt(len(gaps))
    # and the requests really left at those times: send lag is small next to the gaps
    lag = (requests.sent_at - requests.ready_at).to_numpy()
    assert np.median(lag) < 0.005
    # released by timers woken ahead: the worker's account of their wake-ups, in summary.json
    wake_ups = json.loads((run_dir / "summary.json").read_text())["run"]["release_wake_ups"]
    assert wake_ups["workers"] >= 1
    assert 0 < wake_ups["count"] <= len(requests)
    assert sum(wake_ups["histogram"].values()) == wake_ups["count"]
    assert 0 <= wake_ups["p50_us"] <= wake_ups["p99_us"] <= wake_ups["max_us"]
    assert "release timers: " in (run_dir / "run.log").read_text()


def test_concurrent_run_ramps_linearly_and_never_exceeds_the_target(tmp_path: Path) -> None:
    _, requests, sessions = run(
        tmp_path,
        """
traffic_scheduler:
  type: concurrent
  target_concurrent_sessions: 4
  rampup_seconds: 1.0
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 2}
    request_wait_generator: {type: fixed, interval: 1.2}
  output_spec: {text: {output_length_generator: {type: fixed, value: 5}}}
runtime: {max_sessions: 10, benchmark_timeout: 30}
simulator: {ttft_ms: 20, itl_ms: 5}
""",
    )
    assert len(sessions) == 10
    assert (sessions.status == "ok").all()
    events = sorted(
        [(t, 1) for t in sessions.started_at] + [(t, -1) for t in sessions.ended_at],
        key=lambda e: (e[0], e[1]),  # an end and a start at the same instant: end first
    )
    active = np.cumsum([delta for _, delta in events])
    assert active.max() == 4
    # never more active than the ramp allows: floor(4 × t / 1 s)
    for (t, _), n in zip(events, active, strict=True):
        assert n <= min(4, int(4 * t + 1e-9))
    # sessions outlast the ramp, so the k-th starts exactly at k × rampup / target
    first_four = np.sort(sessions.started_at.to_numpy())[:4]
    assert first_four == pytest.approx([0.25, 0.5, 0.75, 1.0], abs=1e-6)
    # a session waits its think time between turns
    by_session = requests.sort_values("node_id").groupby("session_id")
    for _, turns in by_session:
        assert turns.dispatched_at.iloc[1] >= turns.completed_at.iloc[0] + 1.2 - 1e-9


def test_failed_request_cancels_the_rest_of_its_session(tmp_path: Path) -> None:
    _, requests, sessions = run(
        tmp_path,
        """
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: 0.02}
  cancel_session_on_failure: true
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 4}
    request_wait_generator: {type: fixed, interval: 0}
  output_spec: {text: {output_length_generator: {type: fixed, value: 3}}}
runtime: {max_sessions: 30, benchmark_timeout: 30}
simulator: {faults: {http_500_rate: 0.3}, seed: 5}
""",
    )
    assert len(requests) == 30 * 4  # every node has a row
    failed = requests[requests.status == "error"]
    assert len(failed) > 0
    assert (failed.http_status == 500).all()
    assert (failed.error_kind == "http_5xx").all()
    for row in failed.itertuples():
        later = requests[(requests.session_id == row.session_id) & (requests.node_id > row.node_id)]
        assert (later.status == "cancelled").all()
        assert later.sent_at.isna().all()
        assert (later.error_message == SESSION_FAILED).all()  # its own cause, not a stop's
    errored = sessions[sessions.num_error > 0]
    assert (errored.status == "error").all()
    assert (sessions[sessions.num_error == 0].status == "ok").all()


def test_failed_request_without_cancel_lets_children_run_without_its_answer(
    tmp_path: Path,
) -> None:
    _, requests, _ = run(
        tmp_path,
        """
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: 0.02}
  cancel_session_on_failure: false
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 3}
    request_wait_generator: {type: fixed, interval: 0}
  output_spec: {text: {output_length_generator: {type: fixed, value: 3}}}
runtime: {max_sessions: 20, benchmark_timeout: 30}
simulator: {faults: {http_500_rate: 0.3}, seed: 9}
""",
    )
    assert (requests.status != "cancelled").all()
    assert (requests.status == "error").any()
    done = requests.set_index(["session_id", "node_id"])
    for row in requests[requests.node_id > 0].itertuples():
        parent = done.loc[(row.session_id, row.node_id - 1)]
        if row.status == "ok" and parent.status == "error":
            # the failed parent contributes its prompt, not an answer
            assert row.prompt_tokens_total == parent.prompt_tokens_total + row.prompt_tokens_new


def test_branching_sessions_respect_every_parent(tmp_path: Path) -> None:
    """(With chunks stamped at the worker's read, the mode that is not the default.)"""
    run_dir, requests, sessions = run(
        tmp_path,
        """
traffic_scheduler:
  type: rate
  interval_generator: {type: poisson, arrival_rate: 10}
session_generator:
  type: synthetic
  session_graph:
    type: branching
    num_layers_generator: {type: uniform, min: 2, max: 4}
    layer_width_generator: {type: uniform, min: 1, max: 3}
    fan_out_generator: {type: uniform, min: 1, max: 2}
    fan_in_generator: {type: uniform, min: 1, max: 2}
    connection_dist_generator: {type: uniform, min: 1, max: 2}
    request_wait_generator: {type: fixed, interval: 0.02}
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 10, benchmark_timeout: 30, chunk_timestamps: read}
simulator: {ttft_ms: 3, itl_ms: 1}
""",
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["chunk_timestamps"] == "read"
    assert (requests.status == "ok").all()
    assert len(requests) == sessions.num_nodes.sum()
    assert (requests.parents.map(len) > 1).any()  # some fan-in really happened
    done = requests.set_index(["session_id", "node_id"])
    for row in requests.itertuples():
        if len(row.parents):
            latest = max(done.loc[(row.session_id, p)].completed_at for p in row.parents)
            assert row.dispatched_at >= latest + 0.02 - 1e-9


def test_warmup_rows_are_marked_and_excluded_from_metrics(tmp_path: Path) -> None:
    run_dir, requests, _ = run(
        tmp_path,
        """
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: 0.01}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
runtime: {max_sessions: 10, warmup_sessions: 5, benchmark_timeout: 30}
""",
    )
    assert (requests.phase == "warmup").sum() == 5
    assert (requests.phase == "measured").sum() == 10
    warmup_last = requests[requests.phase == "warmup"].ready_at.max()
    assert requests[requests.phase == "measured"].ready_at.min() > warmup_last
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["requests"]["total"] == 10


def test_timeout_stops_new_work_and_every_node_keeps_a_row(tmp_path: Path) -> None:
    _, requests, sessions = run(
        tmp_path,
        """
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: 0.1}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 3}
    request_wait_generator: {type: fixed, interval: 0.5}
  output_spec: {text: {output_length_generator: {type: fixed, value: 3}}}
runtime: {max_sessions: -1, benchmark_timeout: 1.0, post_timeout_grace_seconds: 0}
""",
    )
    assert 8 <= len(sessions) <= 13
    assert len(requests) == sessions.num_nodes.sum()
    assert (requests.status == "cancelled").any()
    assert requests[requests.status != "cancelled"].dispatched_at.max() <= 1.0 + 0.05
    never_sent = requests[(requests.status == "cancelled") & requests.sent_at.isna()]
    assert len(never_sent) > 0
    assert (never_sent.error_message == run_stopped("timeout")).all()


@pytest.mark.parametrize("grace", [5.0, 0.2])
def test_closed_loop_grace_finishes_or_cuts_what_is_in_flight_and_sends_nothing_new(
    tmp_path: Path, grace: float
) -> None:
    # 3 sessions of 2 turns of ~1.2 s each, a 0.6 s timeout. Unlike the public veeksha (which
    # keeps refilling and dispatching during its grace, docs/scenario.md), nothing is sent after
    # the timeout: a second turn becomes ready in the grace and is cancelled unsent. A long
    # grace lets the first turns end ok (in the throughput window); a short one cuts them off,
    # each keeping its row as cancelled, ended when the grace ran out: turns of ~2.4 s there,
    # so that a loaded machine's late cut (0.36 s after the grace, two CPU hogs beside the
    # suite) is still far from where the answers would have ended by themselves
    tokens = 30 if grace > 1 else 60
    run_dir, requests, sessions = run(
        tmp_path,
        f"""
traffic_scheduler: {{type: concurrent, target_concurrent_sessions: 3, rampup_seconds: 0}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: fixed, value: 2}}
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: {tokens}}}}}}}
runtime: {{max_sessions: -1, benchmark_timeout: 0.6, post_timeout_grace_seconds: {grace}}}
simulator: {{ttft_ms: 5, itl_ms: 40}}
""",
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["stop_reason"] == "timeout"
    assert len(sessions) == 3
    assert len(requests) == 6
    first, second = requests[requests.node_id == 0], requests[requests.node_id == 1]
    assert first.sent_at.notna().all()
    assert (first.dispatched_at <= 0.6 + 0.05).all()
    assert second.sent_at.isna().all()
    assert (second.status == "cancelled").all()
    assert (second.error_message == run_stopped("timeout")).all()
    if grace > 1:
        assert (first.status == "ok").all()
        assert (first.completed_at > 0.6).all()
        throughput = summary["throughput"]
        assert throughput["completed_requests"] == 3
        assert throughput["window_end"] == pytest.approx(first.completed_at.max(), abs=1e-3)
    else:
        assert (first.status == "cancelled").all()
        assert (first.error_kind == "cancelled").all()
        assert first.completed_at.between(0.6 + grace - 0.05, 0.6 + grace + 1.0).all()
        assert summary["throughput"]["completed_requests"] == 0


def test_cli_run_writes_a_readable_run_folder(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        """
traffic_scheduler:
  type: rate
  interval_generator: {type: poisson, arrival_rate: 50}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
runtime: {max_sessions: 20, benchmark_timeout: 20}
"""
    )
    env = {**os.environ, "CI": "true"}
    veeksha = Path(sys.executable).parent / "veeksha"
    proc = subprocess.run(
        # (no plots: this test reads none; test_managed's `veeksha run` draws them)
        [str(veeksha), "run", str(scenario), "--output-dir", str(tmp_path / "out"), "--no-plots"],
        capture_output=True,
        text=True,
        timeout=110,  # (it did not hang: under load this run, then with plots, took 45 s)
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode in (0, 4), proc.stderr
    assert "Traceback" not in proc.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert len(requests) == 20
    assert (requests.status == "ok").all()
