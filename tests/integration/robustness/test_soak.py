"""Soak: a steady open-loop rate against the simulator with faults, memory watched over time.

``VEEKSHA_SOAK_SECONDS`` sets the measured duration (default 20 s, the CI form; 300 for the long
one). The RSS of the main process and of every worker is sampled twice a second; after a warmup
(the first quarter, at least 5 s, counted from the traffic's start, not the process' launch:
start-up on a loaded machine can take seconds) each process' RSS may grow by at most
``max(_GROWTH_FLOOR_MB, 10 %)``. Every request must have its row. ``VEEKSHA_SOAK_REPORT=FILE``
writes the samples and counts as JSON (the source of the figures in BENCHMARKS.md).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from tests.integration.robustness.helpers import audit_run, start_run, write_scenario

_GROWTH_FLOOR_MB = 16.0
_RATE = 20  # sessions/s, 2 requests each


@pytest.mark.slow
@pytest.mark.timeout(300)  # 20 s of traffic; under load 9, 90 s in all
def test_steady_rate_with_faults_keeps_memory_flat_and_loses_no_row(tmp_path: Path) -> None:
    seconds = float(os.environ.get("VEEKSHA_SOAK_SECONDS", "20"))
    scenario = write_scenario(
        tmp_path,
        f"""\
        seed: 17
        traffic_scheduler:
          type: rate
          interval_generator: {{type: poisson, arrival_rate: {_RATE}}}
        session_generator:
          type: synthetic
          session_graph:
            type: linear
            num_request_generator: {{type: fixed, value: 2}}
            request_wait_generator: {{type: fixed, interval: 0.02}}
          output_spec: {{text: {{output_length_generator: {{type: uniform, min: 10, max: 30}}}}}}
        client: {{request_timeout: 1}}
        runtime:
          max_sessions: -1
          benchmark_timeout: {seconds}
          post_timeout_grace_seconds: 1
          num_workers: 2
        simulator:
          timing: fixed
          ttft_ms: 20
          itl_ms: 5
          faults:
            http_500_rate: 0.01
            http_429_rate: 0.01
            disconnect_rate: 0.01
            malformed_sse_rate: 0.01
            stall_rate: 0.005
            stall_s: 2
        evaluators: [{{type: performance, stream_metrics: true, stream_metrics_interval: 5}}]
        """,
    )
    run = start_run(scenario, tmp_path / "out")
    samples: list[dict[str, float]] = []
    launched = time.monotonic()
    t0: float | None = None  # seconds from the launch to the traffic's start
    while run.proc.poll() is None:
        run.track()
        if t0 is None and _traffic_began(run.run_dir_or_none()):
            t0 = time.monotonic() - launched
        sample = {"t": time.monotonic() - launched, "main": _rss_mb(run.proc.pid)}
        for i, worker in enumerate(sorted(run.workers(), key=lambda p: p.pid)):
            sample[f"worker{i}"] = _rss_mb(worker.pid)
        samples.append(sample)
        time.sleep(0.5)
    result = run.finish(timeout=seconds + 30)
    assert result.code == 0, result.output
    run.assert_no_survivors()

    audit = audit_run(run.run_dir)
    kinds = audit.kinds()
    assert audit.metadata["stop_reason"] == "timeout"
    assert kinds["ok", ""] >= 0.8 * _RATE * 2 * seconds * 0.9, kinds
    assert t0 is not None, "the run never logged its t0"
    warmup = t0 + max(5.0, seconds / 4)
    end = t0 + seconds  # after the timeout: drain, evaluation (its memory is not the run's)
    growth = {}
    for name in ("main", "worker0", "worker1"):
        steady = [s[name] for s in samples if warmup <= s["t"] <= end and s.get(name)]
        assert len(steady) >= 4, samples
        growth[name] = max(steady) - steady[0]
        allowed = max(_GROWTH_FLOOR_MB, 0.10 * steady[0])
        assert growth[name] <= allowed, (name, steady)
    report = os.environ.get("VEEKSHA_SOAK_REPORT")
    if report:
        Path(report).write_text(
            json.dumps(
                {
                    "seconds": seconds,
                    "rows": audit.requests.num_rows,
                    "sessions": audit.sessions.num_rows,
                    "kinds": {f"{s}/{k}": n for (s, k), n in sorted(Counter(kinds).items())},
                    "growth_mb": growth,
                    "samples": samples,
                },
                indent=1,
            )
        )


def _traffic_began(run_dir: Path | None) -> bool:
    """The run logged its t0 (on a loaded machine the start-up alone can take seconds)."""
    if run_dir is None or not (run_dir / "run.log").exists():
        return False
    return "t0 = " in (run_dir / "run.log").read_text()


def _rss_mb(pid: int) -> float:
    try:
        return float(psutil.Process(pid).memory_info().rss) / 2**20
    except psutil.Error:
        return 0.0
