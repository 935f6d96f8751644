"""The server's own metrics: scraped from the simulator during a run into server_metrics.parquet,
checked against the run's rows; a /metrics that fails never stops the run."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.engine.run import run_scenario
from veeksha.record.server_metrics import SERVER_METRICS_FILE
from veeksha.scenario.loader import load_scenario_text
from veeksha.server.managed import SERVER_LOG, ManagedServer

# 2 slots, 40 requests arriving in about 1 s, 10 tokens × 20 ms each: a queue builds up
QUEUED = """
server: {type: veeksha_sim}
simulator: {max_num_seqs: 2, itl_ms: 20}
server_metrics: {interval: 0.2}
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: 0.025}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 10}}}
runtime: {max_sessions: 40, benchmark_timeout: 60, num_workers: 1}
trace_recorder: {enabled: false}
evaluators: [{type: performance, stream_metrics: false}]
"""


@pytest.fixture(scope="module")
def queued_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("metrics") / "run"
    scenario = load_scenario_text(QUEUED, "queued.yaml")
    outcome = run_as_the_command(scenario, run_dir, quiet=True, plots=True)
    assert outcome.requests == 40
    return run_dir


def _metadata(path: Path) -> dict[str, str]:
    raw = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items()}


def test_the_simulators_queue_shows_in_the_scraped_rows(queued_run: Path) -> None:
    path = queued_run / SERVER_METRICS_FILE
    meta = _metadata(path)
    assert meta["server_metrics_status"] == "ok"
    assert meta["run_id"] == "run"
    rows = pd.read_parquet(path)
    assert set(rows.columns) == {"t", "metric", "labels", "value", "kind", "canonical"}
    assert not (queued_run / "parts" / "server_metrics").exists()
    waiting = rows[rows.metric == "vllm:num_requests_waiting"]
    running = rows[rows.metric == "vllm:num_requests_running"]
    assert len(waiting) >= 5  # every 0.2 s over ~3 s, plus one at each end
    assert waiting.value.max() >= 5  # 40 arrivals/s against 2 slots × 5 answers/s each
    assert running.value.max() == 2  # never more than the simulator's slots
    assert waiting.value.iloc[-1] == 0  # the last scrape, after the traffic: all served
    assert (waiting.canonical == "waiting").all()
    assert json.loads(waiting.labels.iloc[0]) == {"engine": "0", "model_name": "veeksha-sim"}
    assert waiting.t.is_monotonic_increasing
    assert "GPU sampling skipped: nvidia-smi is not on PATH" in (queued_run / "run.log").read_text()
    finished = rows[rows.canonical == "finished"].groupby("t").value.sum()
    assert finished.iloc[-1] - finished.iloc[0] == 40  # every request the run sent, no other
    buckets = rows[rows.metric == "vllm:time_to_first_token_seconds_bucket"]
    assert set(buckets.kind) == {"histogram"}
    assert "+Inf" in {json.loads(labels)["le"] for labels in buckets.labels}
    assert set(rows[rows.metric == "vllm:prompt_tokens_total"].kind) == {"counter"}


@pytest.mark.parametrize(
    ("path", "why"),
    # the simulator's own /v1/models answers JSON: not Prometheus text
    [
        ("/no-such-metrics", "HTTP 404"),
        ("/v1/models", "Invalid labels|invalid metric"),
        ("http://127.0.0.1:1/metrics", "Connection refused"),  # (nothing listens there)
    ],
)
def test_a_failing_metrics_url_costs_one_warning_and_the_file_says_why(
    tmp_path: Path, path: str, why: str
) -> None:
    text = QUEUED.replace("max_sessions: 40", "max_sessions: 6").replace("0.2}", "0.1}")
    scenario = load_scenario_text(text, "s.yaml")
    with ManagedServer.for_scenario(scenario, tmp_path / SERVER_LOG) as server:
        url = path if "://" in path else f"{server.root_url}{path}"
        scenario = scenario.model_copy(
            update={"server_metrics": scenario.server_metrics.model_copy(update={"url": url})}
        )
        outcome = run_scenario(scenario, tmp_path / "run", quiet=True, plots=False, server=server)
    assert outcome.requests == 6
    assert not outcome.interrupted
    meta = _metadata(tmp_path / "run" / SERVER_METRICS_FILE)
    assert meta["server_metrics_status"] == "failed"
    assert int(meta["server_metrics_failed"]) == int(meta["server_metrics_scrapes"]) >= 2
    assert len(pd.read_parquet(tmp_path / "run" / SERVER_METRICS_FILE)) == 0
    assert re.search(why, meta["server_metrics_error"])
    log = (tmp_path / "run" / "run.log").read_text()
    assert log.count("server metrics: GET") == 1
    (line,) = (line for line in log.splitlines() if "server metrics: GET" in line)
    assert line.count(url) == 1  # the address once, then why
    assert f"server metrics: GET {url}: " in line
    assert re.search(why, line)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["run"]["server_metrics"]["status"] == "failed"
    # the console says it once, and why, instead of an empty "server's view (0 scrapes)"
    from rich.console import Console

    from veeksha.evaluate.report import render_summary

    console = Console(width=100, record=True)
    render_summary(console, summary)
    text = " ".join(console.export_text().split())
    assert text.count("server metrics could not be scraped") == 1
    assert re.search(why, text[text.index("server metrics could not be scraped") :])
    assert "server's view (" not in text


def test_the_summary_report_and_plot_show_the_servers_view(queued_run: Path) -> None:
    summary = json.loads((queued_run / "summary.json").read_text())
    server = summary["server"]
    assert server["running_peak"] == 2
    assert server["waiting_peak"] >= 5
    assert 0 < server["waiting_mean"] < server["waiting_peak"]
    assert server["finished"] == 40
    assert server["preemptions"] == 0
    assert 0 < server["kv_usage_peak"] <= 1
    assert 0 <= server["prefix_hit_rate"] < 1
    assert summary["health"]["checks"]["server_agreement"] == "PASS"
    assert (queued_run / "plots" / "server_timeline.png").stat().st_size > 10_000
    from rich.console import Console

    from veeksha.evaluate.report import render_summary

    console = Console(width=100, record=True)
    render_summary(console, summary)
    text = console.export_text()
    assert "server's view" in text
    assert "requests finished" in text
    assert "server's latency (ms; its histograms)" in text


def test_the_servers_latency_histograms_agree_with_each_answers_own_timings(
    queued_run: Path,
) -> None:
    # the simulator observes into its histograms what it reports in each answer's timings
    # (queue_wait_s, prefill_s, decode_s; veeksha's server_* columns): the means agree exactly
    latency = json.loads((queued_run / "summary.json").read_text())["server"]["latency"]
    rows = pd.read_parquet(queued_run / "requests.parquet")
    for key, column in (
        ("ttft", "server_ttft"),
        ("queue", "server_queue_time"),
        ("prefill", "server_prefill_time"),
        ("decode", "server_decode_time"),
    ):
        assert latency[key]["count"] == 40, key
        assert latency[key]["mean"] == pytest.approx(rows[column].mean(), rel=1e-9), key
        # the bucket named holds the observation of the p99's rank (ceil(0.99 × 40) = 40th)
        low, high = latency[key]["p99_bucket"]
        assert low <= sorted(rows[column])[math.ceil(0.99 * 40) - 1] <= high, key
    assert latency["queue"]["metric"] == "vllm:request_queue_time_seconds"
    assert latency["queue"]["mean"] > 0.05  # (2 slots for 40 arrivals a second: a queue)
    # the client's TTFC is the server's TTFT plus what the loopback and the client add
    ttfc = rows.ttfc.mean()
    assert latency["ttft"]["mean"] < ttfc < latency["ttft"]["mean"] + 0.05
    assert "itl" not in latency  # (the simulator has no inter-token histogram)


FAKE_NVIDIA_SMI = """#!/bin/sh
# a stand-in for nvidia-smi --query-gpu=... --format=csv,noheader,nounits -lms=N
case "$*" in *--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw*) ;;
  *) echo "unexpected arguments: $*" >&2; exit 9 ;; esac
n=0
while true; do
  n=$((n + 1))
  echo "0, $((40 + n % 50)), 20480, 81920, 250.5"
  echo "1, 7, 1024, 81920, [N/A]"
  sleep 0.05
done
"""


def test_gpus_are_sampled_with_nvidia_smi_for_a_managed_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    text = QUEUED.replace("max_sessions: 40", "max_sessions: 8").replace("0.2}", "0.1}")
    outcome = run_as_the_command(
        load_scenario_text(text, "s.yaml"), tmp_path / "run", plots=False, quiet=True
    )
    assert outcome.requests == 8
    rows = pd.read_parquet(tmp_path / "run" / SERVER_METRICS_FILE)
    gpu = rows[rows.metric.str.startswith("gpu:")]
    assert set(gpu.metric) == {
        "gpu:utilization",
        "gpu:memory_used",
        "gpu:memory_total",
        "gpu:power",
    }
    power = gpu[gpu.metric == "gpu:power"]
    assert set(power.labels) == {'{"gpu": "0"}'}  # GPU 1's [N/A] is left out
    assert (power.value == 250.5).all()
    used = gpu[(gpu.metric == "gpu:memory_used") & (gpu.labels == '{"gpu": "1"}')]
    assert len(used) >= 3
    assert (gpu.kind == "gauge").all()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert 41 <= summary["server"]["utilization_gpu0_peak"] <= 89
    assert summary["run"]["server_metrics"]["gpu_samples"] >= 6
    assert "GPU sampling skipped" not in (tmp_path / "run" / "run.log").read_text()
    assert summary["health"]["checks"]["server_agreement"] == "PASS", summary["health"]
