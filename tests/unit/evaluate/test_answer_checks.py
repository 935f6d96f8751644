"""``answered``: a run whose every dispatched request failed measured nothing but failures."""

from __future__ import annotations

from typing import Any

from tests.unit.evaluate.builders import request, requests_table, scenario, sessions_table
from veeksha.evaluate.answer_checks import ANSWERED
from veeksha.evaluate.checks import HEALTH_CHECKS
from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthInput
from veeksha.evaluate.stats import measured_rows


def _check(rows: list[dict[str, Any]]) -> Any:
    table = requests_table(rows)
    return ANSWERED(HealthInput(table, measured_rows(table), sessions_table([]), scenario()))


def _failed(i: int, kind: str, code: int | None, status: str = "error") -> dict[str, Any]:
    row = request(i, chunks=(), status=status, error_kind=kind)
    row["http_status"] = code
    return row


def test_every_request_failed_is_a_fail_naming_the_failures() -> None:
    rows = [_failed(i, "http_5xx", 501) for i in range(4)]
    rows += [_failed(4, "http_4xx", 404), _failed(5, "", None, status="timeout")]
    rows += [request(6, phase="warmup")]  # (a warmup answer does not make a measurement)
    result = _check(rows)
    assert result.status == FAIL
    assert result.detail.startswith(
        "none of 6 measured requests was answered (4 http_5xx (HTTP 501), 1 http_4xx (HTTP "
        "404), 1 timeout): nothing was measured but failures"
    )
    assert result.statistics == {
        "requests": 6,
        "answered": 0,
        "failures": {"http_5xx (HTTP 501)": 4, "http_4xx (HTTP 404)": 1, "timeout": 1},
    }
    assert HEALTH_CHECKS[0] is ANSWERED  # (first in the report: the others assume answers)


def test_one_answer_passes_and_an_abandoned_one_counts() -> None:
    result = _check([request(0), _failed(1, "http_5xx", 500), _failed(2, "http_5xx", 500)])
    assert (result.status, result.detail) == (PASS, "1 of 3 measured requests answered")
    abandoned = _check([request(0, status="abandoned"), _failed(1, "http_5xx", 500)])
    assert abandoned.status == PASS


def test_nothing_dispatched_skips() -> None:
    assert _check([]).status == SKIP
    assert _check([request(0, unsent=True, status="cancelled")]).status == SKIP


def test_a_run_of_503s_names_the_wait_for_a_server_that_is_starting() -> None:
    rows = [_failed(i, "http_5xx", 503) for i in range(5)] + [_failed(5, "http_5xx", 500)]
    result = _check(rows)
    assert result.status == FAIL
    assert result.detail.endswith(
        "A 503 is a server still starting (llama.cpp's while it loads its model) or one over "
        "its capacity: client.ready_timeout waits for one that is starting"
    )
    assert "ready_timeout" not in _check([_failed(0, "http_5xx", 500)]).detail
