"""Throughput of a saturated server after a warmup: the requests the warmup left in flight, which
the server serves while the measured window is open, count (docs/metrics.md, "System metrics")."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario_text

# a closed loop of 16 on 4 slots at 0.24 s a request: 16.7 requests/s, 12 queued at all times
SATURATED = """
seed: 5
traffic_scheduler: {type: concurrent, target_concurrent_sessions: 16, rampup_seconds: 0}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  channels: [{type: text, body_length_generator: {type: fixed, value: 50}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 20}}}
runtime: {max_sessions: -1, benchmark_timeout: 4, warmup_seconds: 1}
simulator: {timing: fixed, ttft_ms: 50, itl_ms: 10, max_num_seqs: 4}
health_checks: {max_dispatch_lag_p99_ms: 50}
evaluators: [{type: performance, stream_metrics: false}]
"""


def test_a_saturated_closed_loop_reads_the_servers_rate_after_a_warmup(tmp_path: Path) -> None:
    scenario = load_scenario_text(SATURATED, "saturated.yaml")
    run_as_the_command(scenario, tmp_path / "run", quiet=True, plots=False)
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    throughput = summary["throughput"]
    # the server's own rate, whatever the machine's speed: its 4 slots over the time it says
    # each request took in one (prefill + decode, its reported timings)
    ok = requests[requests.status == "ok"]
    server_rate = 4 / float((ok.server_prefill_time + ok.server_decode_time).mean())
    assert 15 < server_rate < 17  # (4 / 0.24 s = 16.7)
    assert abs(throughput["requests_per_s"] / server_rate - 1) < 0.06
    assert throughput["requests_per_s"] == throughput["completed_requests"] / throughput["window_s"]
    carried = throughput["carried_over_requests"]
    assert carried >= 8  # the warmup's queue when the window opened (15 at most)
    # the measured requests alone over the same window: the server's time on the warmup's
    # queue (about 0.9 s of a 4.9 s window) read as a slower server
    alone = (throughput["completed_requests"] - carried) / throughput["window_s"]
    assert alone / server_rate < 0.9
    assert summary["sessions"]["sessions_per_s"] == throughput["requests_per_s"]
    # the peaks: 16 requests in flight at every instant of the closed loop (the warmup's
    # carried in), and the busiest second's tokens near the server's 4 slots × 20 tokens /
    # 0.24 s; never below the mean over whole seconds
    assert throughput["peak_concurrent_requests"] == 16
    peak = throughput["peak_output_tokens_per_s"]
    assert peak >= throughput["output_tokens"] / (int(throughput["window_s"]) + 1)
    assert abs(peak / (server_rate * 20) - 1) < 0.15
