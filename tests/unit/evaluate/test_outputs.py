"""evaluate_run's files written and re-read; partial and empty runs; streaming; exit codes."""

from __future__ import annotations

import base64
import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from tests.unit.evaluate.builders import (
    request,
    requests_table,
    scenario,
    session,
    sessions_table,
)
from veeksha.evaluate import ExitCode, StreamingMetrics, compute_evaluation, evaluate_run
from veeksha.evaluate.exit_codes import run_exit_code
from veeksha.evaluate.metrics import LATENCY_METRICS
from veeksha.evaluate.run import EVALUATION_COLUMNS

SUMMARY_KEYS = {
    "schema_version", "run", "requests", "latency", "chunk_reads", "throughput", "sessions",
    "errors", "prefill", "goodput", "health", "slos",
}  # fmt: skip
SLOS = [
    {"name": "fast first chunk", "metric": "ttfc", "percentile": 0.99, "value": 0.5},
    {"name": "fast e2e", "metric": "e2e", "percentile": 0.5, "value": 0.01},
]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run_tables() -> tuple[pa.Table, pa.Table]:
    starts = np.cumsum(np.random.default_rng(0).exponential(0.1, 40))
    rows, sessions = [], []
    for i, t in enumerate(starts.tolist()):
        rows.append(request(i, 0, ready=t, chunks=(t + 0.05, t + 0.06, t + 0.08)))
        second = (t + 0.15, t + 0.2) if i else (t + 0.15, t + 0.15)  # (one read: coalesced)
        rows.append(request(i, 1, parents=[0], ready=t + 0.1, wait=0.02, chunks=second))
        sessions.append(session(i, t, t + 0.2, num_requests=2, think_time_total=0.02))
    rows.append(request(99, ready=0.0, chunks=(0.1,), phase="warmup"))
    return requests_table(rows), sessions_table(sessions)


def test_evaluate_run_writes_every_file(tmp_path: Path) -> None:
    requests, sessions = _run_tables()
    scen = scenario(evaluators=[{"type": "performance", "slos": SLOS}])
    info = {"run_id": "r1", "interrupted": False, "measured_window": (0.0, 5.0)}
    evaluation = evaluate_run(tmp_path, scen, requests, sessions, info)

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == SUMMARY_KEYS
    assert summary == json.loads(json.dumps(evaluation.summary))
    assert summary["run"]["measured_window"] == [0.0, 5.0]
    assert summary["requests"]["total"] == 80  # warmup excluded
    assert summary["latency"]["ttfc"]["p50"] == pytest.approx(0.05)
    assert summary["latency"]["tbc"]["count"] == 40 * 3
    assert summary["chunk_reads"] == {"gaps": 120, "coalesced": 1, "coalesced_share": 1 / 120}
    assert summary["sessions"]["ok"] == 40
    assert summary["goodput"]["requests"] == 0  # no e2e within 10 ms
    assert summary["health"]["verdict"] == evaluation.verdict
    assert evaluation.all_slos_met is False
    assert evaluation.exit_code == ExitCode.SLO_UNMET

    slo = json.loads((tmp_path / "slo.json").read_text())
    assert slo["all_slos_met"] is False
    assert [s["met"] for s in slo["slos"]] == [True, False]
    assert slo["slos"][0]["observed"] == pytest.approx(0.05)

    health = json.loads((tmp_path / "health.json").read_text())
    assert health["verdict"] in ("PASS", "FAIL")
    assert (tmp_path / "health.txt").read_text().startswith("health verdict")

    for metric in LATENCY_METRICS:
        with (tmp_path / "metrics" / f"{metric.name}.csv").open() as handle:
            table = list(csv.DictReader(handle))
        if metric.name == "answer_ttfc":  # (no reasoning model here: the header alone)
            assert table == []
            continue
        assert table[0].keys() == {"percentile", "value", "unit"}
        assert table[0]["unit"] == metric.unit
        assert [r["percentile"] for r in table][-2:] == ["99.9", "100"]
    with (tmp_path / "metrics" / "ttfc.csv").open() as handle:
        ttfc = {r["percentile"]: float(r["value"]) for r in csv.DictReader(handle)}
    assert ttfc["50"] == pytest.approx(0.05)

    plots = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert plots == [
        "e2e_cdf.png", "tbc_cdf.png", "timeline.png", "tpot_cdf.png", "ttfc_cdf.png",
        "ttfc_vs_prompt.png",
    ]  # fmt: skip
    import matplotlib.image as mpimg

    for name in plots:
        path = tmp_path / "plots" / name
        assert path.read_bytes()[:8] == PNG_MAGIC
        assert mpimg.imread(path).shape[0] > 100

    out = Console(record=True, width=120)
    evaluation.render(out)
    text = out.export_text()
    assert "TTFC p99" in text
    assert "fast e2e" in text
    assert "generator_saturation" in text

    # report.html: the same report, every plot embedded as it was written, nothing fetched
    page = (tmp_path / "report.html").read_text()
    assert tmp_path / "report.html" in evaluation.files
    assert page.startswith("<!DOCTYPE html>")
    assert "TTFC p99" in page
    assert "generator_saturation" in page
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]+)">', page)
    assert sorted(name for _, name in images) == plots
    for data, name in images:
        assert base64.b64decode(data) == (tmp_path / "plots" / name).read_bytes()
    assert not re.search(r'(src|href)="(https?:)?//', page)


def test_the_collector_is_off_while_the_plots_are_drawn_and_back_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its passes over matplotlib's lasting objects took 50-90 ms of a short run's plots
    import gc

    import veeksha.evaluate.run as run_module

    seen: list[bool] = []
    drawn = run_module.write_plots

    def spy(*args: object, **kwargs: object) -> list[Path]:
        seen.append(gc.isenabled())
        return drawn(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(run_module, "write_plots", spy)
    requests, sessions = _run_tables()
    before = gc.isenabled()  # (a CLI test in this process may have left it off: veeksha.cli)
    try:
        gc.enable()
        evaluate_run(tmp_path, scenario(), requests, sessions, {"run_id": "r1"}, plots=True)
        assert seen == [False]
        assert gc.isenabled()
        gc.disable()  # a caller that had it off keeps it off
        evaluate_run(tmp_path, scenario(), requests, sessions, {"run_id": "r1"}, plots=True)
        assert not gc.isenabled()
    finally:
        (gc.enable if before else gc.disable)()


def test_zero_measured_requests(tmp_path: Path) -> None:
    requests = requests_table([request(0, phase="warmup")])
    evaluation = evaluate_run(tmp_path, scenario(), requests, sessions_table([]), {}, plots=True)
    assert evaluation.verdict == "PASS"
    assert evaluation.all_slos_met is None
    assert evaluation.summary["requests"]["total"] == 0
    assert evaluation.summary["throughput"]["requests_per_s"] is None
    assert list((tmp_path / "plots").iterdir()) == []
    assert (tmp_path / "metrics" / "ttfc.csv").read_text().strip() == "percentile,value,unit"
    assert evaluation.exit_code == ExitCode.OK


def test_partial_run_with_missing_timestamps_and_no_sessions(tmp_path: Path) -> None:
    rows = [
        request(0, 0, ready=0.0, chunks=(0.1, 0.2)),
        request(0, 1, parents=[0], ready=0.3, unsent=True, status="cancelled"),
        request(1, 0, ready=0.5, chunks=(), completed=None, status="error", error_kind="x"),
    ]
    info = {"interrupted": True, "stop_reason": "SIGKILL"}
    scen = scenario(evaluators=[{"type": "performance", "slos": SLOS[:1]}])
    evaluation = evaluate_run(tmp_path, scen, requests_table(rows), sessions_table([]), info)
    assert evaluation.summary["sessions"]["incomplete"] == 2
    assert evaluation.summary["requests"]["cancelled"] == 1
    assert evaluation.exit_code == ExitCode.RUN_ABORTED
    out = Console(record=True, width=100)
    evaluation.render(out)
    assert "partial run (SIGKILL)" in out.export_text()


def test_exit_code_precedence() -> None:
    def code(**kw: object) -> int:
        args = {"interrupted": False, "health_failed": False, "strict": False, "all_slos_met": None}
        return run_exit_code(**(args | kw))  # type: ignore[arg-type]

    assert code() == 0
    assert code(health_failed=True) == 0
    assert code(health_failed=True, strict=True) == 4
    assert code(all_slos_met=False) == 5
    assert code(all_slos_met=True) == 0
    assert code(health_failed=True, strict=True, all_slos_met=False) == 4
    assert code(interrupted=True, health_failed=True, strict=True) == 3


def test_streaming_metrics_snapshot() -> None:
    now = [10.0]
    stream = StreamingMetrics(clock=lambda: now[0])
    for i in range(100):
        stream.add({"status": "ok", "ttfc": 0.001 * (i + 1), "e2e": 0.5})
    stream.add({"status": "error", "ttfc": None, "e2e": None})
    stream.add({"status": "cancelled"})
    now[0] = 15.0
    line = stream.snapshot()
    assert line.startswith("last 5.0s: 101 req (20.2 req/s, 1 failed, 1 cancelled)")
    assert "TTFC p50 50.5 ms p99 99.0 ms" in line
    assert "E2E p50 0.5 s p99 0.5 s" in line
    now[0] = 20.0
    assert stream.snapshot() == "last 5.0s: 0 req (0.0 req/s, 0 failed)"


def test_evaluation_columns_evaluate_like_the_whole_table() -> None:
    requests, sessions = _run_tables()
    scen = scenario(evaluators=[{"type": "performance", "slos": SLOS}])
    info = {"run_id": "r1", "measured_window": (0.0, 5.0)}
    whole = compute_evaluation(scen, requests, sessions, info)
    subset = compute_evaluation(scen, requests.select(list(EVALUATION_COLUMNS)), sessions, info)
    assert subset.summary == whole.summary
    assert subset.health.to_dict() == whole.health.to_dict()
    assert "chunk_times" not in EVALUATION_COLUMNS


def test_evaluation_never_imports_pandas(tmp_path: Path) -> None:
    requests, sessions = _run_tables()  # built with from_pylist (pandas): saved, read back
    pq.write_table(requests, tmp_path / "requests.parquet")
    pq.write_table(sessions, tmp_path / "sessions.parquet")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tests.unit.evaluate.test_outputs import SLOS\n"
        "from tests.unit.evaluate.builders import scenario\n"
        "from veeksha.evaluate.run import evaluate_run\n"
        "from veeksha.record.reader import load_requests, load_sessions\n"
        f"run = Path({str(tmp_path)!r})\n"
        "scen = scenario(evaluators=[{'type': 'performance', 'slos': SLOS}])\n"
        "ev = evaluate_run(run, scen, load_requests(run), load_sessions(run), {}, plots=False)\n"
        "assert ev.summary['requests']['total'] == 80\n"
        # columns of no chunk (a list column of empty lists, flattened) or of several chunks
        "import numpy as np, pyarrow as pa\n"
        "from veeksha.evaluate.stats import from_numpy, integers\n"
        "assert integers(pa.chunked_array([], pa.int64())).size == 0\n"
        "parts = [from_numpy(np.array([1, 2])), from_numpy(np.array([3]))]\n"
        "assert integers(pa.chunked_array(parts)).tolist() == [1, 2, 3]\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "False"
