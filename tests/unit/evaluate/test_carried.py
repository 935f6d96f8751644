"""The window's rates count the work carried into it: requests sent before the measured window
opened (a warmup's, an earlier phase's) and completed inside it (veeksha.evaluate.carried)."""

from __future__ import annotations

import pytest

from tests.unit.evaluate.builders import request, requests_table, session, sessions_table
from veeksha.evaluate.stats import measured_rows
from veeksha.evaluate.summary import compute_aggregates
from veeksha.scenario.models import SLO

approx = pytest.approx


def _rows() -> list[dict[str, object]]:
    # a server busy with the warmup's requests when the first measured one is sent, at 1.0 s
    return [
        request(0, sent=0.0, chunks=(0.2, 0.5), phase="warmup"),  # done before: not counted
        request(1, sent=0.2, chunks=(1.2, 1.5), phase="warmup", output_tokens=7),
        request(2, sent=0.3, chunks=(1.9, 2.0), phase="warmup", output_tokens=5),
        request(3, sent=0.4, chunks=(), completed=1.2, status="timeout", phase="warmup"),
        request(4, sent=0.5, chunks=(1.1,), phase="warmup") | {"kind": "tool"},  # no LLM
        request(10, sent=1.0, chunks=(2.5, 3.0), output_tokens=10),
        request(11, sent=1.5, chunks=(2.5, 4.0), output_tokens=30),
    ]


def _sessions() -> list[dict[str, object]]:
    return [
        session(0, 0.0, 0.5, phase="warmup"),
        session(1, 0.2, 1.5, phase="warmup"),
        session(2, 0.3, 2.0, phase="warmup"),
        session(3, 0.4, 1.2, "error", phase="warmup"),
        session(10, 1.0, 3.0),
        session(11, 1.5, 4.0),
    ]


def _aggregates(slos: list[SLO] | None = None) -> dict[str, dict[str, object]]:
    requests, sessions = requests_table(_rows()), sessions_table(_sessions())
    measured_sessions = measured_rows(sessions)
    aggregates = compute_aggregates(
        measured_rows(requests),
        measured_sessions,
        slos or [],
        recorded_sessions=sessions,
        recorded_requests=requests,
    )
    return aggregates.sections


def test_requests_carried_into_the_window_count_in_its_rates() -> None:
    out = _aggregates()["throughput"]
    assert (out["window_start"], out["window_end"]) == (1.0, 4.0)  # the measured requests'
    # 2 measured + the warmup's 1 and 2, in flight at 1.0 s and done inside the window; not 0
    # (done before), 3 (timed out) or 4 (a tool call)
    assert out["completed_requests"] == 4
    assert out["carried_over_requests"] == 2
    assert out["requests_per_s"] == approx(4 / 3)  # the measured ones alone: 2 / 3
    assert out["output_tokens"] == 10 + 30 + 7 + 5
    assert out["output_tokens_per_s"] == approx(52 / 3)
    assert out["input_tokens"] == 4 * 20


def test_sessions_and_goodput_count_them_too() -> None:
    sections = _aggregates()
    assert sections["sessions"]["carried_over"] == 2  # sessions 1 and 2
    assert sections["sessions"]["ok"] == 2  # the measured counts are the measured sessions'
    assert sections["sessions"]["sessions_per_s"] == approx(4 / 3)
    good = sections["goodput"]
    assert good["requests_per_s"] == approx(4 / 3)  # without SLOs: the throughput
    assert good["sessions_per_s"] == approx(4 / 3)
    assert good["request_fraction"] == approx(1.0)  # of the measured requests
    # an SLO the carried-over request 2 breaks (ttfc 1.6 s) leaves it and its session out
    slo = SLO(name="ttfc", metric="ttfc", percentile=0.5, value=1.55)
    good = _aggregates([slo])["goodput"]
    assert (good["requests"], good["sessions"]) == (3, 3)
    assert good["request_fraction"] == approx(1.0)


def test_a_run_without_a_warmup_carries_nothing() -> None:
    rows = [r for r in _rows() if r["phase"] != "warmup"]
    table = requests_table(rows)
    sessions = sessions_table([s for s in _sessions() if s["phase"] != "warmup"])
    sections = compute_aggregates(table, sessions, [], recorded_requests=table).sections
    assert sections["throughput"]["carried_over_requests"] == 0
    assert sections["throughput"]["requests_per_s"] == approx(2 / 3)
    assert sections["sessions"]["carried_over"] == 0
