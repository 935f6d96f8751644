"""Wide tables at 80 columns: value columns stacked into several tables, none squeezed."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from veeksha.evaluate.report import number_text
from veeksha.evaluate.stacked import StackedColumn, print_stacked
from veeksha.experiment.sweep_compare import _SHOWN, COMPARED, render_changes, render_table


def _render(draw: object, width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False, color_system=None)
    draw(console)  # type: ignore[operator]
    return out.getvalue()


def _rows_of(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip().startswith(key)]


def test_columns_that_do_not_fit_go_to_another_table_with_the_key_again() -> None:
    key = StackedColumn("point", ["arrival_rate=6", "arrival_rate=36"], "left")
    columns = [StackedColumn(f"metric {i} ms", ["1234.56", "99999.99"]) for i in range(8)]
    narrow = _render(lambda c: print_stacked(c, "a sweep", key, columns), 80)
    assert "…" not in narrow
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert narrow.count("a sweep (continued)") >= 1
    for i in range(8):
        assert narrow.count(f"metric {i} ms") == 1  # each column once, its header whole
    tables = narrow.count("a sweep")
    assert len(_rows_of(narrow, "arrival_rate=36")) == tables  # the key in every table
    for line in _rows_of(narrow, "arrival_rate=36"):
        assert line.split()[1:] == ["99999.99"] * (len(line.split()) - 1)  # values whole
    wide = _render(lambda c: print_stacked(c, "a sweep", key, columns), 200)
    assert "continued" not in wide
    assert len(_rows_of(wide, "arrival_rate=36")) == 1


def test_the_sweep_table_at_80_columns_cuts_no_point_name_or_value() -> None:
    rows = []
    for index, rate in enumerate((6, 12, 24, 36)):
        row: dict[str, object] = {
            "point": f"arrival_rate={rate}",
            "status": "complete",
            "health": "PASS",
            "slo_met": index < 3,
            "exit_code": 0,
        }
        row |= {column: 0.123456 * (index + 1) * 37 for column in _SHOWN}
        rows.append(row)
    table = pd.DataFrame(rows)
    text = _render(lambda c: render_table(c, "sweep-20261126T051657Z-268f3052cc", table), 80)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for header in ("status", "health", "SLOs", "exit", *_SHOWN.values()):
        assert header in text, header
    for index, rate in enumerate((6, 12, 24, 36)):
        lines = _rows_of(text, f"arrival_rate={rate} ")
        assert lines, rate
        cells = " ".join(" ".join(line.split()[1:]) for line in lines).split()
        value = 0.123456 * (index + 1) * 37
        assert cells[:4] == ["complete", "PASS", "met" if index < 3 else "UNMET", "0"]
        assert cells[4:] == [number_text(value)] + [number_text(value * 1000)] * 4


def test_the_sweep_table_shows_numbers_as_the_run_report_does() -> None:
    # 4 significant digits (veeksha.evaluate.report._num), not a fixed 2 decimals: 254 req/s,
    # not 254.00; a 0.3 ms TTFC, not 0.00; 12,345 req/s as 12.35k
    row: dict[str, object] = {
        "point": "arrival_rate=6",
        "status": "complete",
        "health": "PASS",
        "slo_met": None,
        "exit_code": 0,
    }
    row |= {"requests_per_s": 254.0, "ttfc_p50_s": 0.0003, "ttfc_p99_s": 0.0123456}
    row |= {"tpot_p99_s": None, "e2e_p99_s": 12.345}
    text = _render(lambda c: render_table(c, "s", pd.DataFrame([row])), 200)
    (line,) = _rows_of(text, "arrival_rate=6 ")
    assert line.split()[1:] == ["complete", "PASS", "-", "0", "254", "0.3", "12.35", "-", "12.35k"]


def test_the_sweep_comparison_at_80_columns_cuts_no_change() -> None:
    entries: list[dict[str, object]] = [
        {"point": "arrival_rate=6", "matched": "arrival_rate=6", "health_failed": False}
        | {column: -0.1234 for column in COMPARED},
        {"point": "arrival_rate=12", "matched": "arrival_rate=12", "health_failed": True}
        | {column: 12.5 for column in COMPARED},
        {"point": "arrival_rate=24", "matched": None, "health_failed": False},
    ]
    title = "sweep-20261126T051657Z-268f3052cc relative to sweep-20261126T050011Z-1a2b3c4d5e"
    shown: list[bool] = []
    text = _render(lambda c: shown.append(render_changes(c, title, entries)), 80)
    assert shown == [True]  # a point failed a health check
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for label in COMPARED.values():
        assert text.count(label) == 1, label
    assert " ".join(" ".join(line.split()[1:]) for line in _rows_of(text, "arrival_rate=6 ")) == (
        " ".join(["-12.3%"] * len(COMPARED))
    )
    failed = " ".join(" ".join(line.split()[2:]) for line in _rows_of(text, "arrival_rate=12 !"))
    assert failed == " ".join(["+1250.0%"] * len(COMPARED))
    assert _rows_of(text, "arrival_rate=24")[0].split()[1:] == ["missing"]


def test_the_stress_table_at_80_columns_shows_every_level_and_figure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from veeksha.experiment.microbench.cli import _STRESS_COLUMNS, _stress_table

    monkeypatch.setenv("COLUMNS", "80")
    points = [
        {"level": level, "samples": 14 * level} | {k: 1234.5678 * level for _, k in _STRESS_COLUMNS}
        for level in (1, 2, 4, 8)
    ]
    _stress_table({"traffic": "concurrency", "points": points})
    text = capsys.readouterr().out
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    for header, _ in _STRESS_COLUMNS:
        assert text.count(header) == 1, header
    for level in (1, 2, 4, 8):
        cells = " ".join(" ".join(line.split()[1:]) for line in _rows_of(text, f"{level} ")).split()
        assert cells == [f"{1234.5678 * level:.2f}"] * len(_STRESS_COLUMNS) + [str(14 * level)]
