"""The ``agents`` figure: veeksha's own cost of several clients, caps and priority.

Two runs at 500 sessions/s of one request each against the built-in simulator (started by
the run, fast preset): ``single`` (one client, no cap) and ``multi`` (two clients on two
models of the simulator, round robin, each with ``max_in_flight: 512`` (never reached: the
slot pool's path is taken for every request) and ``runtime.priority: progress``). Figures per
1,000 requests: the main process' CPU seconds during the traffic and the workers' (the run's
own account in summary.json, so the simulator is not in them), and the dispatch lag (p50,
p99; with a cap nothing is handed over ahead, so the lag is the main loop's, not the
worker's timer's).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from benchmarks.harness import RunMeasure, check_complete, run_veeksha, scenario

__all__ = ["fig_agents"]

_RATE = 500


def _spec(n: int, multi: bool) -> dict[str, Any]:
    spec = scenario(
        api_base=None,
        scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 0.002}},
        max_sessions=n,
    )
    if multi:
        client = spec.pop("client")
        spec["clients"] = [
            {**client, "name": "a", "model": "m-a", "max_in_flight": 512},
            {**client, "name": "b", "model": "m-b", "max_in_flight": 512},
        ]
        spec["runtime"]["priority"] = "progress"
        spec["simulator"] = {"models": {"m-b": {}}}
    return spec


def _figures(m: RunMeasure, prefix: str) -> dict[str, float]:
    check_complete(m, f"agents {prefix}")
    run = json.loads((m.run_dir / "summary.json").read_text())["run"]
    table = pq.read_table(
        m.run_dir / "requests.parquet", columns=["phase", "status", "dispatch_lag"]
    ).to_pydict()
    lags = np.array(
        [
            lag
            for lag, phase, status in zip(
                table["dispatch_lag"], table["phase"], table["status"], strict=True
            )
            if phase == "measured" and status == "ok" and lag is not None
        ]
    )
    per_k = 1000.0 / max(lags.size, 1)
    return {
        f"{prefix}_main_cpu_s_per_1000": float(run["main_cpu_s"]) * per_k,
        f"{prefix}_workers_cpu_s_per_1000": float(run["worker_cpu_s"]) * per_k,
        f"{prefix}_lag_p50_ms": float(np.percentile(lags, 50)) * 1000,
        f"{prefix}_lag_p99_ms": float(np.percentile(lags, 99)) * 1000,
    }


def fig_agents(plan: Any, _sim: Any) -> Any:
    from benchmarks.figures import Sample

    n = _RATE * plan.pick(4, 20)
    values: dict[str, float] = {}
    for prefix, multi in (("single", False), ("multi", True)):
        m = run_veeksha(_spec(n, multi), plan.workdir, f"agents-{prefix}", root=plan.root)
        values |= _figures(m, prefix)
    values["main_cpu_ratio"] = (
        values["multi_main_cpu_s_per_1000"] / values["single_main_cpu_s_per_1000"]
    )
    return Sample(values)
