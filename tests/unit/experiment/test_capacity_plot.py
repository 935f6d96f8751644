"""capacity.png labels each estimate beyond the panel's top with its value, and no two labels,
nor a label and the legend, overlap (two probes close together drew theirs on one spot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.text import Text

from veeksha.experiment.capacity.plot import capacity_figure, write_capacity_plot

THRESHOLD = 0.15  # s: the panel shows up to 450 ms


def _entry(value: float, verdict: str, estimate: float, low: float, high: float) -> dict[str, Any]:
    judged = {"estimate": estimate, "ci_low": low, "ci_high": high, "threshold": THRESHOLD}
    return {"value": value, "verdict": verdict, "slo_results": [judged]}


def _document() -> dict[str, Any]:
    """A search from 4 to 64 whose probes at 36 (496 ms) and 40 (1169 ms) are both beyond the
    panel's top, close together on its x axis."""
    return {
        "slos": [
            {
                "name": "P90 TTFC under 150 ms",
                "metric": "ttfc",
                "percentile": 0.9,
                "threshold": THRESHOLD,
                "confidence": 0.95,
            }
        ],
        "knob_title": "traffic_scheduler.interval_generator.arrival_rate",
        "unit": "sessions/s",
        "best_value": 34,
        "history": [
            _entry(4, "pass", 0.055, 0.053, 0.083),
            _entry(8, "pass", 0.06, 0.055, 0.07),
            _entry(16, "pass", 0.07, 0.06, 0.08),
            _entry(32, "pass", 0.09, 0.08, 0.12),
            _entry(64, "fail", 2.5, 2.3, 2.7),
            _entry(48, "fail", 1.9, 1.7, 2.1),
            _entry(40, "fail", 1.169, 1.1, 1.2),
            _entry(36, "fail", 0.496, 0.45, 0.52),
            _entry(34, "pass", 0.12, 0.1, 0.14),
            _entry(35, "undecided", 0.16, 0.13, 0.19),
        ],
    }


def _overlapping(boxes: list[Any]) -> list[tuple[int, int]]:
    return [
        (i, j)
        for i, a in enumerate(boxes)
        for j, b in enumerate(boxes[i + 1 :], i + 1)
        if a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1
    ]


def test_labels_of_close_values_beyond_the_top_never_overlap(tmp_path: Path) -> None:
    fig = capacity_figure(_document())
    assert isinstance(fig, Figure)
    fig.canvas.draw()  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    (ax,) = fig.axes
    texts = {t.get_text(): t for t in ax.texts}
    # every value beyond 450 ms labelled with its estimate, in its verdict's colour
    assert sorted(texts) == ["1169 ms", "1900 ms", "2500 ms", "496 ms"]
    assert {t.get_color() for t in texts.values()} == {"tab:red"}
    boxes = [Text.get_window_extent(t, renderer) for t in texts.values()]
    assert _overlapping(boxes) == []  # ("496 ms" and "1169 ms" were drawn over each other)
    legend = ax.get_legend().get_window_extent(renderer)
    frame = ax.get_window_extent(renderer)
    for box in boxes:
        assert _overlapping([box, legend]) == []
        assert frame.x0 <= box.x0
        assert box.x1 <= frame.x1
        assert frame.y0 <= box.y0
        assert box.y1 <= frame.y1
    assert "left out" not in ax.get_title()
    path = write_capacity_plot(_document(), tmp_path / "capacity.png")
    assert path is not None
    assert path.stat().st_size > 10_000
