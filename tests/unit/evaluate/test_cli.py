"""veeksha report and veeksha compare on run folders built by hand (finalised and partial)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.unit.evaluate.builders import (
    request,
    requests_table,
    scenario,
    session,
    sessions_table,
)
from veeksha.cli import main
from veeksha.record.parquet import PARTS_DIR, REQUESTS_FILE, SESSIONS_FILE
from veeksha.record.run_folder import write_config


def _run_folder(path: Path, ttfc: float, *, partial: bool = False) -> Path:
    path.mkdir()
    scen = scenario(evaluators=[{"type": "performance", "slos": [
        {"name": "ttfc", "metric": "ttfc", "percentile": 0.5, "value": 0.1}
    ]}])  # fmt: skip
    write_config(path, scen)
    rows = [request(i, ready=i * 0.1, chunks=(i * 0.1 + ttfc, i * 0.1 + 0.3)) for i in range(10)]
    requests = requests_table(rows)
    sessions = sessions_table([session(i, i * 0.1, i * 0.1 + 0.3) for i in range(10)])
    if partial:
        parts = path / PARTS_DIR / "requests"
        parts.mkdir(parents=True)
        pq.write_table(requests, parts / "part-000001.parquet")
    else:
        pq.write_table(requests, path / REQUESTS_FILE)
        pq.write_table(sessions, path / SESSIONS_FILE)
    return path


def test_report_recomputes_the_files(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / ("run-" + "x" * 80), 0.05)
    result = CliRunner().invoke(main, ["report", str(run), "--no-plots"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "TTFC p50" in result.output
    assert f"files into {run}\n" in result.output  # a path is never cut across lines
    summary = json.loads((run / "summary.json").read_text())
    assert summary["latency"]["ttfc"]["p50"] == pytest.approx(0.05)
    assert summary["run"]["partial"] is False
    assert summary["sessions"]["ok"] == 10
    assert json.loads((run / "slo.json").read_text())["all_slos_met"] is True
    assert not (run / "plots").exists()


def test_report_reads_the_parts_of_a_killed_run(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run", 0.05, partial=True)
    result = CliRunner().invoke(main, ["report", str(run), "--quiet", "--no-plots"])
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run"]["partial"] is True
    assert summary["run"]["interrupted"] is True
    assert summary["requests"]["ok"] == 10
    assert summary["sessions"]["incomplete"] == 10  # no session rows were written


def _trace(run: Path, sessions: range, tail: str = "") -> None:
    # (the builder's request ids: session × 1000 + node)
    lines = [json.dumps({"session_id": i, "node_id": 0, "request_id": i * 1000}) for i in sessions]
    (run / "trace.jsonl").write_text("".join(f"{line}\n" for line in lines) + tail)


def test_the_report_of_a_killed_run_says_what_it_does_not_count(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run", 0.05, partial=True)
    # 10 rows; 13 requests dispatched (their trace lines), and a last line the kill cut short
    _trace(run, range(13), tail='{"session_id": 13, "node_id": 0, "requ')
    result = CliRunner().invoke(main, ["report", str(run), "--no-plots"])
    assert result.exit_code == 0, result.output
    said = (
        "partial run: it did not end (killed, or its results could not be written), so every "
        "figure covers only the requests recorded; at least 3 dispatched requests have no row "
        "(in flight at the end, or answered in its last second) and are not counted"
    )
    assert said in " ".join(result.output.split())  # (rich wraps it to the terminal)
    assert (run / "health.txt").read_text().splitlines()[1] == said
    assert json.loads((run / "health.json").read_text())["notes"] == [said]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run"]["unrecorded_requests"] == 3
    assert summary["requests"]["total"] == 10


def test_without_a_trace_the_number_not_counted_is_unknown(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run", 0.05, partial=True)
    result = CliRunner().invoke(main, ["report", str(run), "--no-plots"])
    assert "an unknown number of dispatched requests (no trace.jsonl to count them)" in (
        " ".join(result.output.split())
    )
    assert json.loads((run / "summary.json").read_text())["run"]["unrecorded_requests"] is None


def test_a_run_that_ended_has_no_note(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run", 0.05)
    _trace(run, range(10))
    result = CliRunner().invoke(main, ["report", str(run), "--no-plots"])
    assert "partial run" not in result.output
    assert (run / "health.txt").read_text().splitlines()[1] == ""
    assert json.loads((run / "health.json").read_text())["notes"] == []
    assert "unrecorded_requests" not in json.loads((run / "summary.json").read_text())["run"]


def test_report_rejects_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert "error:" in result.output


def test_compare_shows_relative_change(tmp_path: Path) -> None:
    base = _run_folder(tmp_path / "base", 0.05)
    slower = _run_folder(tmp_path / "slower", 0.1)
    assert CliRunner().invoke(main, ["report", str(base), "-q", "--no-plots"]).exit_code == 0
    result = CliRunner().invoke(main, ["compare", str(base), str(slower)], terminal_width=160)
    assert result.exit_code == 0, result.output
    assert "TTFC p50" in result.output
    assert "+100.0%" in result.output
    assert not (slower / "summary.json").exists()  # computed in memory


def test_report_reads_a_run_recorded_before_a_column_existed(tmp_path: Path) -> None:
    """A folder of an earlier version lacks the columns added since (here the clamped stamps'
    count): the report reads what is there, and the check needing the column counts none."""
    run = _run_folder(tmp_path / "run", 0.05)
    table = pq.read_table(run / REQUESTS_FILE).drop_columns(["chunk_stamps_clamped"])
    pq.write_table(table, run / REQUESTS_FILE)
    result = CliRunner().invoke(main, ["report", str(run), "--quiet", "--no-plots"])
    assert result.exit_code == 0, result.output
    health = json.loads((run / "health.json").read_text())
    check = next(c for c in health["checks"] if c["name"] == "lifecycle_delays")
    assert check["status"] == "PASS", check["detail"]
    assert check["statistics"]["chunk_stamps_clamped"] == 0


def test_report_of_a_folder_recorded_before_the_reasoning_columns(tmp_path: Path) -> None:
    run = _run_folder(tmp_path / "run", 0.05)
    table = pq.read_table(run / REQUESTS_FILE)
    old = table.drop_columns(["answer_ttfc", "reasoning_chunks", "reasoning_tokens"])
    pq.write_table(old, run / REQUESTS_FILE)
    result = CliRunner().invoke(main, ["report", str(run), "--no-plots"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    summary = json.loads((run / "summary.json").read_text())
    assert summary["latency"]["answer_ttfc"]["count"] == 0
    assert summary["latency"]["ttfc"]["p50"] == pytest.approx(0.05)
    assert "answer TTFC" not in result.output
    assert "answer_ttfc" not in result.output


def test_report_of_a_capacity_search_folder_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "capacity.json").write_text("{}")
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: {tmp_path} is a capacity search's folder: its result is capacity.json (and "
        "capacity.png); each probe under runs/ is a run folder veeksha report reads\n"
    )
