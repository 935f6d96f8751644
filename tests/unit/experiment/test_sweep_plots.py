"""The sweep plot names what it draws: each point carries its point label (sweep.parquet's
``point``), each curve's legend entry says what it holds and what varies along it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from veeksha.experiment import sweep_plots

RATE = "traffic_scheduler.interval_generator.arrival_rate"
LENGTH = "session_generator.channels.0.body_length_generator.value"


def _table(points: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for index, point in enumerate(points):
        values = {k: v for k, v in point.items() if k not in ("rps", "ms")}
        label = ",".join(f"{k}={v}" for k, v in values.items())
        row = {"index": index, "point": label, **values, "health": "PASS"}
        row["requests_per_s"] = point["rps"]
        for metric in ("ttfc", "tpot", "e2e"):
            for stat in ("p50", "p99"):
                row[f"{metric}_{stat}_s"] = point["ms"] / 1000
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame["point"] = frame["point"].astype("string")
    return frame


def _manifest(*keys: str) -> dict[str, Any]:
    return {"swept_keys": list(keys), "short_names": {k: k.rsplit(".", 1)[-1] for k in keys}}


def _drawn(monkeypatch: pytest.MonkeyPatch, saved: bool = True) -> list[Figure]:
    """The figures the plot functions make, kept for the test. ``saved=False``: their PNG is
    not written (a test that draws the figure itself and reads no file: the encoding at
    another dpi was a third of its time; the tests with ``saved`` keep the PNG covered)."""
    figures: list[Figure] = []
    make = sweep_plots._figure

    def keep() -> Figure:
        figures.append(make())
        return figures[-1]

    monkeypatch.setattr(sweep_plots, "_figure", keep)
    if not saved:
        monkeypatch.setattr(sweep_plots, "save_png", lambda fig, path, dpi=None: path)
    return figures


def _labels(fig: Figure) -> dict[str, tuple[float, float]]:
    """The TTFC p50 panel's point labels: text -> the (x, y) it points at."""
    return {t.get_text(): tuple(t.xy) for t in fig.axes[0].texts}  # type: ignore[attr-defined]


def _legend(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.legends[0].get_texts()]


def test_each_point_is_labelled_with_its_swept_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _drawn(monkeypatch)
    measured = ((6, 8.7, 21.0), (12, 15.8, 22.0), (24, 21.8, 59.0), (36, 22.7, 144))
    table = _table([{"arrival_rate": rate, "rps": rps, "ms": ms} for rate, rps, ms in measured])
    (path,) = sweep_plots.write_sweep_plots(tmp_path, table, _manifest(RATE))
    assert path.stat().st_size > 10_000
    (fig,) = figures
    assert _labels(fig) == {
        "arrival_rate=6": (8.7, 21.0),
        "arrival_rate=12": (15.8, 22.0),
        "arrival_rate=24": (21.8, 59.0),
        "arrival_rate=36": (22.7, 144.0),
    }
    assert all(len(ax.texts) == 4 for ax in fig.axes)  # every panel labels its points
    assert _legend(fig) == ["one point per arrival_rate"]  # (it said "sweep")
    assert fig.axes[0].get_xlabel() == "achieved throughput (ok requests/s, measured window)"
    assert fig.axes[0].get_ylabel() == "TTFC p50 (ms)"


def test_a_curve_per_prompt_length_names_its_length_and_its_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _drawn(monkeypatch)
    table = _table(
        [
            {"arrival_rate": rate, "value": length, "rps": rate * 0.9, "ms": length / 10 + rate}
            for rate in (4, 8)
            for length in (256, 1024)
        ]
    )
    sweep_plots.write_sweep_plots(tmp_path, table, _manifest(RATE, LENGTH))
    (fig,) = figures
    assert _legend(fig) == [
        "value=256, one point per arrival_rate",
        "value=1024, one point per arrival_rate",
    ]
    assert set(_labels(fig)) == {
        "arrival_rate=4,value=256",
        "arrival_rate=8,value=256",
        "arrival_rate=4,value=1024",
        "arrival_rate=8,value=1024",
    }


def test_compared_sweeps_keep_their_names_in_the_legend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _drawn(monkeypatch)
    table = _table([{"arrival_rate": r, "rps": r * 0.9, "ms": 20.0 + r} for r in (4, 8)])
    sweeps = [("A", table, _manifest(RATE)), ("B", table, _manifest(RATE))]
    sweep_plots.write_compare_plot(tmp_path / "cmp.png", sweeps)
    (fig,) = figures
    assert _legend(fig) == ["A: one point per arrival_rate", "B: one point per arrival_rate"]
    assert [t.get_text() for t in fig.axes[0].texts] == ["arrival_rate=4", "arrival_rate=8"] * 2


def _overlapping(boxes: list[Any]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[i + 1 :], i + 1)
        if a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1
    ]


def _check_labels(fig: Figure) -> list[int]:
    """Every panel's labels, as drawn: none overlaps another, each inside its panel and clear
    of every other point's marker centre; how many each panel drew. (A label's text: an
    annotation's own extent takes in its leader line.)"""
    fig.canvas.draw()  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    counts = []
    for ax in fig.axes:
        boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]
        assert _overlapping(boxes) == [], ax.get_title()
        frame = ax.get_window_extent(renderer)
        points = [tuple(ax.transData.transform(t.xy)) for t in ax.texts]  # type: ignore[attr-defined]
        for box, own in zip(boxes, points, strict=True):
            assert frame.x0 <= box.x0, ax.get_title()
            assert box.x1 <= frame.x1, ax.get_title()
            assert frame.y0 <= box.y0, ax.get_title()
            assert box.y1 <= frame.y1, ax.get_title()
            covered = [p for p in points if p != own and box.contains(*p)]
            assert covered == [], ax.get_title()
        counts.append(len(boxes))
    return counts


def test_labels_of_close_points_never_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rates 10, 11 and 12 req/s close together beside 40 (a run against the simulator): the
    # three labels were each drawn just above-right of their points, over each other
    figures = _drawn(monkeypatch, saved=False)
    measured = ((10, 13.58, 21.4), (11, 14.73, 21.2), (12, 15.79, 22.0), (40, 22.99, 159.6))
    table = _table([{"arrival_rate": rate, "rps": rps, "ms": ms} for rate, rps, ms in measured])
    sweep_plots.write_sweep_plots(tmp_path, table, _manifest(RATE))
    (fig,) = figures
    assert _check_labels(fig) == [4] * 6  # every point labelled, in every panel
    assert not any("left out" in ax.get_title() for ax in fig.axes)


def test_a_crowd_of_points_labels_those_with_room_and_says_how_many_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a server past its capacity: 14 rates, all at ~20 req/s, their latencies close
    figures = _drawn(monkeypatch, saved=False)
    crowd = [
        {"arrival_rate": 20 + 2 * i, "rps": 20.0 + 0.01 * i, "ms": 300.0 + 3 * i} for i in range(14)
    ]
    table = _table([{"arrival_rate": 4, "rps": 4.0, "ms": 20.0}, *crowd])
    sweep_plots.write_sweep_plots(tmp_path, table, _manifest(RATE))
    (fig,) = figures
    counts = _check_labels(fig)
    for ax, drawn in zip(fig.axes, counts, strict=True):
        left_out = len(crowd) + 1 - drawn
        assert drawn >= 3
        if left_out:
            assert ax.get_title().endswith(f"({left_out} point labels left out: no room)")
        else:
            assert "left out" not in ax.get_title()


def test_compared_sweeps_labels_of_the_same_points_do_not_overlap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _drawn(monkeypatch, saved=False)
    table = _table([{"arrival_rate": r, "rps": r * 0.9, "ms": 20.0 + r} for r in (4, 8, 9)])
    sweeps = [("A", table, _manifest(RATE)), ("B", table, _manifest(RATE))]
    sweep_plots.write_compare_plot(tmp_path / "cmp.png", sweeps)
    (fig,) = figures
    assert _check_labels(fig) == [6] * 6  # (both sweeps' labels were drawn on one spot)


def test_compared_sweeps_with_long_names_have_their_legend_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folder names as veeksha writes them (``sweep-<UTC time>-<hash>``), a failed point: the
    legend's entries fit the figure's width, clear of the panels' axis labels."""
    figures = _drawn(monkeypatch, saved=False)
    table = _table([{"arrival_rate": r, "rps": r * 0.9, "ms": 20.0 + r} for r in (6, 24)])
    table.loc[1, "health"] = "FAIL"
    names = ["sweep-20261126T171752Z-3cc51dcfea", "sweep-20261126T171759Z-da8f3da41f"]
    sweeps = [(name, table, _manifest(RATE)) for name in names]
    sweep_plots.write_compare_plot(tmp_path / "cmp.png", sweeps)
    (fig,) = figures
    fig.canvas.draw()  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    assert len(_legend(fig)) == 3  # both sweeps and the failed points
    for text in fig.legends[0].get_texts():
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0, text.get_text()
        assert box.x1 <= fig.bbox.width, text.get_text()
    legend_top = fig.legends[0].get_window_extent(renderer).y1
    assert all(legend_top < ax.get_tightbbox(renderer).y0 for ax in fig.axes)
