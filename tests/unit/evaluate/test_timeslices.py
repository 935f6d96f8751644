"""summary.json's ``timeslices``: each request in the slice it completed in; per slice its ok
and failed requests, rates over the slice's width, and the p50/p99 of its ok requests'
latencies; a remainder under half a slice joins the last one; a long run's slices are widened to
``MAX_SLICES``; and the report's table at 80 columns."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from tests.unit.evaluate.builders import request, requests_table
from tests.unit.scenario.helpers import load
from veeksha.evaluate.report import TIMESLICE_ROWS, render_summary
from veeksha.evaluate.timeslices import MAX_SLICES, timeslices
from veeksha.scenario.loader import scenario_hash


def _done(i: int, completed: float, status: str = "ok", tokens: int = 4) -> dict[str, object]:
    chunks = tuple(completed - 0.01 * (tokens - 1 - k) for k in range(tokens))
    return request(i, sent=completed - 0.1, chunks=chunks, completed=completed, status=status)


def test_each_request_counts_in_the_slice_it_completed_in() -> None:
    rows = [
        _done(0, 0.2),
        _done(1, 0.9),
        _done(2, 1.1, status="error"),
        _done(3, 1.5),
        _done(4, 2.05),  # (in the last slice: 0.05 s over two slices joins it)
    ]
    section = timeslices(requests_table(rows), (0.1, 2.15), 1.0)
    assert section is not None
    assert section["slice_seconds"] == 1.0
    first, last = section["slices"]
    assert (first["start"], first["end"]) == (0.1, pytest.approx(1.1))
    assert (last["start"], last["end"]) == (pytest.approx(1.1), 2.15)
    assert (first["ok"], first["failed"]) == (2, 0)
    assert (last["ok"], last["failed"]) == (2, 1)  # (1.1: the second slice's start)
    assert first["requests_per_s"] == pytest.approx(2.0)
    assert last["requests_per_s"] == pytest.approx(2 / 1.05)
    assert first["output_tokens_per_s"] == pytest.approx(8.0)
    assert first["e2e_p50"] == pytest.approx(0.1)
    assert first["ttfc_p50"] == pytest.approx(0.07)
    assert first["tpot_p99"] == pytest.approx(0.01)


def test_a_slice_without_requests_has_no_latency_and_a_long_run_is_widened() -> None:
    section = timeslices(requests_table([_done(0, 0.5), _done(1, 3.5)]), (0.0, 4.0), 1.0)
    assert section is not None
    assert [s["ok"] for s in section["slices"]] == [1, 0, 0, 1]
    assert section["slices"][1]["ttfc_p50"] is None
    assert section["slices"][1]["requests_per_s"] == 0.0
    wide = timeslices(requests_table([_done(0, 5.0)]), (0.0, 10_000.0), 1.0)
    assert wide is not None
    assert len(wide["slices"]) == MAX_SLICES
    assert wide["slice_seconds"] == 10.0
    assert timeslices(requests_table([]), None, 1.0) is None


def test_the_report_shows_the_slices_and_at_most_its_rows_of_them() -> None:
    def rendered(count: int) -> str:
        slices = [
            {"start": float(k), "end": k + 1.0, "ok": 10, "failed": 1, "requests_per_s": 10.0,
             "output_tokens_per_s": 1234.5, "ttfc_p50": 0.0123, "ttfc_p99": 0.0456,
             "tpot_p50": 0.002, "tpot_p99": 0.003, "e2e_p50": 0.5, "e2e_p99": 1.25}
            for k in range(count)
        ]  # fmt: skip
        out = io.StringIO()
        summary = {"timeslices": {"slice_seconds": 1.0, "slices": slices}}
        render_summary(Console(file=out, width=80, color_system=None), summary)
        return out.getvalue()

    text = rendered(3)
    assert "time slices of 1 s" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    row = next(line for line in text.splitlines() if line.strip().startswith("2.0"))
    assert row.split() == ["2.0", "10", "1", "10", "1,234", "12.3", "45.6", "2", "1,250"]
    many = rendered(100)
    assert f"{TIMESLICE_ROWS} of 100 shown; all in metrics/timeslices.csv" in many
    firsts = [line.split()[0] for line in many.splitlines() if line.split()]
    shown = [first for first in firsts if re.fullmatch(r"\d+\.0", first)]
    assert shown[0] == "0.0"
    assert shown[-1] == "99.0"
    assert len(shown) == TIMESLICE_ROWS


def test_slicing_keeps_the_scenarios_hash() -> None:
    sliced = load("evaluators: [{type: performance, timeslice_seconds: 5}]")
    assert scenario_hash(sliced) == scenario_hash(load("seed: 42")) == "41a55509ee"
