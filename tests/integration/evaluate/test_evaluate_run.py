"""Whole runs against the built-in simulator, judged by the evaluation.

Skipped until the engine exports ``veeksha.engine.run_benchmark(scenario, run_dir, quiet=True)``.

Tolerances: over loopback on an idle machine, the client-side TTFC exceeds the simulator's fixed
TTFT by the HTTP round trip and SSE parsing (well under a millisecond typically); we allow
``TTFC_SLACK_S`` for the median and ``TBC_SLACK_S`` around the fixed inter-token delay for the TBC
median, generous enough for a loaded CI runner and tight enough to catch a clock taken at the
wrong place (e.g. before queueing, or after the result's IPC hop).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from veeksha.scenario.models import Scenario

engine = pytest.importorskip("veeksha.engine")
run_benchmark = getattr(engine, "run_benchmark", None)
pytestmark = pytest.mark.skipif(run_benchmark is None, reason="the engine is not built yet")

TTFT_S = 0.050
ITL_S = 0.005
TTFC_SLACK_S = 0.010
TBC_SLACK_S = 0.002


def _scenario(**data: Any) -> Scenario:
    return Scenario.model_validate(data)


def _run(scenario: Scenario, run_dir: Path) -> tuple[int, dict[str, Any], dict[str, Any]]:
    assert run_benchmark is not None
    code = run_benchmark(scenario, run_dir, quiet=True, plots=False)  # (no test here reads one)
    summary = json.loads((run_dir / "summary.json").read_text())
    health = json.loads((run_dir / "health.json").read_text())
    return code, summary, health


def test_measured_ttfc_and_tbc_match_the_simulators_fixed_timing(tmp_path: Path) -> None:
    scenario = _scenario(
        seed=3,
        traffic_scheduler={
            "type": "rate",
            "interval_generator": {"type": "poisson", "arrival_rate": 20},
        },
        session_generator={
            "type": "synthetic",
            "session_graph": {"type": "single_request"},
            "output_spec": {"text": {"output_length_generator": {"type": "fixed", "value": 20}}},
        },
        runtime={"max_sessions": 60, "num_workers": 1},
        simulator={"timing": "fixed", "ttft_ms": TTFT_S * 1000, "itl_ms": ITL_S * 1000},
        evaluators=[{"type": "performance", "stream_metrics": False}],
    )
    code, summary, _ = _run(scenario, tmp_path / "run")
    assert code == 0
    assert summary["requests"]["ok"] == 60
    ttfc, tbc = summary["latency"]["ttfc"], summary["latency"]["tbc"]
    assert ttfc["min"] >= TTFT_S  # the client cannot see a token before the server sends it
    assert ttfc["p50"] == pytest.approx(TTFT_S, abs=TTFC_SLACK_S)
    assert tbc["count"] >= 60 * 19  # 20 tokens, one per chunk
    assert tbc["p50"] == pytest.approx(ITL_S, abs=TBC_SLACK_S)
    assert summary["latency"]["tpot"]["p50"] == pytest.approx(ITL_S, abs=TBC_SLACK_S)
    assert summary["health"]["checks"]["dependencies"] == "PASS"


def test_one_worker_at_a_huge_rate_trips_the_saturation_check(tmp_path: Path) -> None:
    scenario = _scenario(
        seed=4,
        traffic_scheduler={
            "type": "rate",
            "interval_generator": {"type": "poisson", "arrival_rate": 50_000},
        },
        session_generator={
            "type": "synthetic",
            "session_graph": {"type": "single_request"},
            "output_spec": {"text": {"output_length_generator": {"type": "fixed", "value": 8}}},
        },
        runtime={"max_sessions": 4000, "num_workers": 1},
        simulator={"preset": "fast"},
        evaluators=[{"type": "performance", "stream_metrics": False}],
        health_checks={"strict": True},
    )
    code, summary, health = _run(scenario, tmp_path / "run")
    saturation = next(c for c in health["checks"] if c["name"] == "generator_saturation")
    assert saturation["status"] == "FAIL", saturation["detail"]
    assert saturation["statistics"]["p99_ms"] > 5.0
    assert summary["health"]["verdict"] == "FAIL"
    assert code == 4  # strict: a failed health check fails the run
