"""The GPUs of a run from dcgm-exporter (``server_metrics.gpu_urls``): the simulator's simulated
GPUs (``simulator.gpus``, ``/dcgm/metrics``) scraped beside its /metrics, their energy over the
throughput window held to the simulator's own power model (idle watts all the time, busy watts
while a request runs), per output token; an exporter that does not answer costs a line, not
the run."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console

from benchmarks.gpu_energy import busy_seconds
from tests.integration.robustness.helpers import run_as_the_command
from veeksha.evaluate.report import render_summary
from veeksha.record.server_metrics import SERVER_METRICS_FILE
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

_IDLE_W, _BUSY_W = 100.0, 500.0

# one session at a time, each a single request of 30 tokens (20 ms, then 5 ms a token): the
# simulated GPUs are busy nearly all the time, idle in the gaps between requests
SCENARIO = """
client: {{api_base: '{api_base}', model: veeksha-sim}}
server_metrics: {{interval: 0.1, gpu_urls: [/dcgm/metrics, '{nobody}']}}
traffic_scheduler: {{type: concurrent, target_concurrent_sessions: 1, rampup_seconds: 0}}
session_generator:
  type: synthetic
  session_graph: {{type: single_request}}
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 30}}}}}}
runtime: {{max_sessions: 16, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{enabled: false}}
evaluators: [{{type: performance, stream_metrics: false}}]
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_gpus_energy_per_token_agrees_with_the_simulators_power_model(
    start_simulator: Callable[..., SimulatorProcess], tmp_path: Path
) -> None:
    sim = start_simulator(
        preset="fast",
        ttft_ms=20,
        itl_ms=5,
        gpus=2,
        gpu_idle_watts=_IDLE_W,
        gpu_busy_watts=_BUSY_W,
    )
    nobody = f"127.0.0.1:{_closed_port()}"
    # (the simulator's exporter as a path: on the server's own address)
    text = SCENARIO.format(api_base=sim.base_url, nobody=nobody)
    run_dir = tmp_path / "run"
    outcome = run_as_the_command(load_scenario_text(text, "gpus.yaml"), run_dir, quiet=True)
    assert outcome.requests == 16
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    gpus, throughput = summary["gpus"], summary["throughput"]
    assert gpus["source"] == "dcgm-exporter"
    assert gpus["count"] == 2
    assert [g["gpu"] for g in gpus["per_gpu"]] == ["0", "1"]  # (the other exporter gave none)
    assert {g["energy_from"] for g in gpus["per_gpu"]} == {"counter"}
    assert {g["model"] for g in gpus["per_gpu"]} == {"veeksha simulated GPU"}
    assert gpus["covered_s"] == gpus["window_s"] == throughput["window_s"]

    # the truth: idle watts over the window, plus (busy - idle) while a request ran, per GPU
    start, end = throughput["window_start"], throughput["window_end"]
    # (each answer's own slot time, from its timings, placed at its first chunk: the truth
    # the energy benchmark holds veeksha to)
    busy = busy_seconds(run_dir, start, end)
    assert 0.8 * (end - start) < busy < end - start
    expected = 2 * (_IDLE_W * (end - start) + (_BUSY_W - _IDLE_W) * busy)
    # The counter is read at the scrapes and interpolated linearly to the window's ends: within
    # the scrape interval Δ around an end, whatever the power did, that is off by at most
    # (busy - idle) W × Δ / 4 a GPU (max of w(1-w) over where the end falls), plus 1 % for the
    # truth's own placement of each slot time at its first chunk.
    rows = pd.read_parquet(run_dir / SERVER_METRICS_FILE)
    energy = rows[rows.metric == "gpu:energy"]
    scraped = np.unique(energy.t.to_numpy())
    around = [np.diff(scraped[np.searchsorted(scraped, t) - 1 :][:2])[0] for t in (start, end)]
    allowed = 2 * (_BUSY_W - _IDLE_W) * sum(around) / 4 + 0.01 * expected
    assert abs(gpus["energy_j"] - expected) < allowed, (gpus["energy_j"], expected, around)
    assert gpus["joules_per_output_token"] == gpus["energy_j"] / throughput["output_tokens"]
    assert throughput["output_tokens"] == 16 * 30
    assert gpus["joules_per_request"] == gpus["energy_j"] / 16
    assert abs(gpus["power_mean_w"] - expected / (end - start)) < 0.05 * expected / (end - start)
    assert 75 < gpus["utilization_mean"] <= 100
    first = gpus["per_gpu"][0]
    assert first["memory_total_mib"] == 81559
    assert first["sm_clock_mean_mhz"] > 345

    # the rows: gpu:* under veeksha's names, the energy a counter in J, labelled by exporter
    assert set(energy.kind) == {"counter"}
    assert len(energy) >= 2 * 4
    labels = json.loads(energy.labels.iloc[0])
    assert labels["source"] == "0"
    assert labels["uuid"].startswith("GPU-")
    for _, series in energy.groupby("labels"):
        assert np.all(np.diff(series.sort_values("t").value) >= 0)
    assert (rows.metric == "vllm:num_requests_running").any()  # (the server's own, beside)

    # the exporter nobody answers: its account, one line in run.log, the run went on
    exporters = summary["run"]["server_metrics"]["gpu_exporters"]
    assert [e["status"] for e in exporters] == ["ok", "failed"]
    assert exporters[0]["url"] == f"{sim.root_url}/dcgm/metrics"
    assert exporters[1]["url"] == f"http://{nobody}/metrics"
    log = (run_dir / "run.log").read_text()
    assert f"GPU metrics: GET http://{nobody}/metrics" in log
    assert "scraping 2 exporter(s) of server_metrics.gpu_urls (nvidia-smi is not run)" in log
    assert "GPU sampling skipped" not in log
    out = io.StringIO()
    render_summary(Console(file=out, width=80, color_system=None), summary)
    report = out.getvalue()
    assert "GPUs (2, dcgm-exporter)" in report
    assert "energy per output token" in report
    words = " ".join(report.split())  # (the console wraps the line)
    scrapes = exporters[1]["scrapes"]
    assert f"GPU metrics: {scrapes} of {scrapes} scrapes of http://{nobody}/metrics failed" in words
