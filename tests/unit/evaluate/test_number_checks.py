"""The ``server_numbers`` health check counts the measured answers with rejected numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.unit.evaluate.builders import request, requests_table, scenario, sessions_table
from veeksha.evaluate.checks import HEALTH_CHECKS, run_health_checks
from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthInput
from veeksha.evaluate.number_checks import SERVER_NUMBERS
from veeksha.evaluate.stats import measured_rows


def _input(rows: list[dict[str, Any]]) -> HealthInput:
    table = requests_table(rows)
    return HealthInput(table, measured_rows(table), sessions_table([]), scenario())


def answered(i: int, notes: str = "", **kw: Any) -> dict[str, Any]:
    return request(i, **kw) | {"server_numbers_rejected": notes}


def test_answers_whose_numbers_were_all_taken_pass() -> None:
    result = SERVER_NUMBERS(_input([answered(i) for i in range(4)]))
    assert result.status == PASS
    assert result.statistics["requests"] == 4
    assert result.statistics["with_rejected_numbers"] == 0


def test_rejected_numbers_fail_with_counts_by_field() -> None:
    rows = [
        answered(0),
        answered(1, "completion_tokens=18446744073709551617 (out of range)"),
        answered(
            2,
            "completion_tokens=1 (disagrees: 14 chunks, 14 counted); "
            "timings.decode_time=1e300 (1e+300 s, longer than the request's e2e 0.5 s)",
        ),
        answered(3, "timings.prefill_time=-1 (negative)", status="error", error_kind="http_5xx"),
        answered(4, "completion_tokens=-5 (negative)", phase="warmup"),  # not measured
        request(5, unsent=True, status="cancelled"),  # never sent: null, not counted
    ]
    result = SERVER_NUMBERS(_input(rows))
    assert result.status == FAIL
    assert result.statistics["requests"] == 4
    assert result.statistics["with_rejected_numbers"] == 3
    assert result.statistics["by_field"] == {
        "completion_tokens": 2,
        "timings.decode_time": 1,
        "timings.prefill_time": 1,
    }
    assert len(result.statistics["examples"]) == 3
    assert result.detail.startswith("3 of 4 answers had server numbers veeksha did not take")


def test_requests_that_never_reached_the_server_are_not_answers() -> None:
    rows = [
        answered(0),
        answered(1, status="error", error_kind="http_5xx"),  # the server answered: counted
        # refused a connection (the server was down): nothing reached it
        answered(2, status="error", error_kind="connection_refused", chunks=()),
        answered(3, status="error", error_kind="connection_refused", chunks=()),
        answered(4) | {"kind": "tool"},  # a tool call's latency: no server
    ]
    result = SERVER_NUMBERS(_input(rows))
    assert result.status == PASS
    assert result.statistics["requests"] == 2
    assert result.detail == "every number of 2 answers taken"
    refused = [answered(0, status="error", error_kind="connection_refused", chunks=())]
    skipped = SERVER_NUMBERS(_input(refused))
    assert skipped.status == SKIP
    assert skipped.detail == "no measured request reached the server"


def test_no_answer_skips() -> None:
    assert SERVER_NUMBERS(_input([request(0, unsent=True, status="cancelled")])).status == SKIP


def test_it_is_in_the_report_and_its_files(tmp_path: Path) -> None:
    assert "server_numbers" in [check.name for check in HEALTH_CHECKS]
    report = run_health_checks(_input([answered(0, "prompt_tokens=-1 (negative)")]))
    assert "server_numbers" in report.failed
    report.write(tmp_path)
    checks = json.loads((tmp_path / "health.json").read_text())["checks"]
    found = next(c for c in checks if c["name"] == "server_numbers")
    assert found["statistics"]["by_field"] == {"prompt_tokens": 1}
    assert "[FAIL] server_numbers: 1 of 1 answer had" in (tmp_path / "health.txt").read_text()
