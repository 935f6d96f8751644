"""A substituted chunk time is counted in the data: real worker processes whose wall clock reads
1 s ahead of the kernel's (``wall_shift/sitecustomize.py``), so every kernel stamp of a read
converts 1 s early and is clamped to its request's ``sent_at``. The count reaches the rows,
summary.json, run.log and the ``lifecycle_delays`` check. (A run without the shift counts 0:
``test_run.test_linear_sessions_keep_order_think_time_and_exact_history``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from veeksha.dispatch.kernel_stamps import KERNEL_STAMPS_SUPPORTED
from veeksha.engine.run import run_scenario
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not KERNEL_STAMPS_SUPPORTED, reason="SO_TIMESTAMPNS is Linux's"),
]

_SHIFT_DIR = Path(__file__).parent / "wall_shift"
_SCENARIO = """
client: {{api_base: "{base}", model: veeksha-sim}}
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.02}}}}
session_generator: {{type: synthetic, session_graph: {{type: single_request}}}}
runtime: {{max_sessions: 4, benchmark_timeout: 30, num_workers: 1}}
"""


def test_a_wall_clock_step_is_counted_in_rows_summary_log_and_health(
    tmp_path: Path, fast_simulator: SimulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(_SHIFT_DIR))  # (the workers inherit it)
    monkeypatch.setenv("VEEKSHA_TEST_WALL_SHIFT_NS", "1000000000")
    scenario = load_scenario_text(_SCENARIO.format(base=fast_simulator.base_url), "s.yaml")
    run_dir = run_scenario(scenario, tmp_path / "run", quiet=True, plots=False).run_dir

    rows = pq.read_table(run_dir / "requests.parquet").to_pylist()
    assert len(rows) == 4
    assert all(r["status"] == "ok" for r in rows)
    for r in rows:
        # every read clamped: its chunks at sent_at, never a second before it
        assert r["chunk_stamps_clamped"] >= 1
        assert r["chunk_times"]
        assert r["chunk_times"] == [r["sent_at"]] * len(r["chunk_times"])
    clamped = sum(r["chunk_stamps_clamped"] for r in rows)

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["chunk_timestamps"] == "kernel"
    assert summary["run"]["chunk_stamps_clamped"] == clamped

    log = (run_dir / "run.log").read_text()
    assert f"WARNING {clamped} chunk read times from the kernel" in log

    health = json.loads((run_dir / "health.json").read_text())
    check = next(c for c in health["checks"] if c["name"] == "lifecycle_delays")
    assert check["status"] == "WARN", check["detail"]
    assert f"{clamped} chunk read times from the kernel clamped" in check["detail"]
    assert check["statistics"]["chunk_stamps_clamped"] == clamped
    assert "lifecycle_delays" not in health["failed"]  # the rows stay in order
