"""The pandas recipe of docs/output.md ("Reading them with pandas") gives summary.json's numbers:
run as a reader pastes it on a run with a warmup, named phases, tool calls and a failure, its
printed TTFC quantiles and its TBC gaps are those of summary.json."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.doc_examples import ROOT, code_blocks, run_folder_names
from tests.unit.evaluate.builders import (
    request,
    requests_table,
    scenario,
    session,
    sessions_table,
)
from veeksha.evaluate.run import compute_evaluation
from veeksha.record.parquet import REQUESTS_FILE, SESSIONS_FILE

_PHASES = [
    {"name": "warmup", "duration": 1},
    {"name": "slow", "duration": 4, "interval": 0.5},
    {"name": "fast", "duration": 4, "interval": 0.25},
]
_WINDOWS = [
    {"name": "warmup", "start": 0.0, "end": 1.0},
    {"name": "slow", "start": 1.0, "end": 5.0},
    {"name": "fast", "start": 5.0, "end": 9.0},
]


def _run(folder: Path) -> dict[str, Any]:
    """A run folder: warmup requests (slow: 1 s to the first chunk), measured requests of two
    phases (TTFC 10 ms + 1 ms each), tool calls of 2 s (their ttfc holds the call), one
    failure; returns its summary.json."""
    rows, sessions = [], []
    for i, t in enumerate((0.0, 0.4)):
        rows.append(request(i, ready=t, chunks=(t + 1.0, t + 1.1), phase="warmup"))
        sessions.append(session(i, t, t + 1.1, phase="warmup"))
    starts = [("slow", 1 + 0.5 * k) for k in range(8)] + [("fast", 5 + 0.25 * k) for k in range(16)]
    for k, (phase, t) in enumerate(starts, start=2):
        ttfc = 0.01 + 0.001 * k
        rows.append(request(k, ready=t, chunks=(t + ttfc, t + ttfc + 0.02, t + ttfc + 0.05),
                            phase=phase))  # fmt: skip
        tool = request(k, 1, parents=(0,), ready=t + 0.06, chunks=(t + 2.06,), phase=phase)
        rows.append(tool | {"kind": "tool", "worker_id": None, "chunk_times": []})
        sessions.append(session(k, t, t + 2.06, phase=phase, num_nodes=2, num_requests=2))
    rows.append(request(99, ready=6.0, chunks=(), status="error", error_kind="http_5xx",
                        phase="fast"))  # fmt: skip
    sessions.append(session(99, 6.0, 6.0, status="error", phase="fast"))
    cfg = scenario(
        traffic_scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 1}},
        phases=_PHASES,
        runtime={"max_sessions": -1, "benchmark_timeout": 60},
    )
    requests, session_rows = requests_table(rows), sessions_table(sessions)
    summary: dict[str, Any] = compute_evaluation(
        cfg, requests, session_rows, {"phases": _WINDOWS}
    ).summary
    metadata = {b"seed": b"42", b"t0_wall_time": b"2026-01-01T00:00:00+00:00"}
    pq.write_table(requests.replace_schema_metadata(metadata), folder / REQUESTS_FILE)
    pq.write_table(session_rows, folder / SESSIONS_FILE)
    return summary


def _printed_series(text: str) -> dict[float, float]:
    """The first Series printed: ``0.50    0.0245`` lines up to its ``Name:`` line."""
    values: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("Name:"):
            break
        key, value = line.split()
        values[float(key)] = float(value)
    return values


def test_the_documented_recipe_gives_summary_json_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = ROOT / "docs" / "output.md"
    block = next(b for b in code_blocks(page, "python") if "read_parquet" in b.text)
    (name,) = run_folder_names([block])
    run = tmp_path / "benchmark_output" / name
    run.mkdir(parents=True)
    summary = _run(run)
    assert summary["latency"]["ttfc"]["count"] == 24  # (not the tools, the warmup, the failure)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__doc_example__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block.text, block.where, "exec"), namespace)  # the docs' own example
    ttfc = summary["latency"]["ttfc"]
    printed = _printed_series(out.getvalue())
    assert printed == pytest.approx({0.5: ttfc["p50"], 0.9: ttfc["p90"], 0.99: ttfc["p99"]},
                                    rel=1e-5), out.getvalue()  # fmt: skip
    tbc = namespace["tbc"]
    assert len(tbc) == summary["latency"]["tbc"]["count"]
    assert tbc.quantile(0.99) == pytest.approx(summary["latency"]["tbc"]["p99"])
