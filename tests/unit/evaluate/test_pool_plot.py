"""The three pools over time: interval counting and session starts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from tests.unit.evaluate.builders import request, requests_table
from veeksha.evaluate.pool_plot import _session_starts, draw_pools, pool_levels
from veeksha.evaluate.source import ColumnSource


def test_levels_count_the_intervals_holding_each_instant() -> None:
    starts = np.array([0.0, 1.0, 1.0, np.nan])
    ends = np.array([2.0, 3.0, 1.0, 5.0])  # [1, 1) holds nothing; the NaN row is left out
    times = np.array([0.0, 0.5, 1.0, 2.0, 2.5, 3.0])
    assert pool_levels(starts, ends, times).tolist() == [1, 1, 2, 1, 1, 0]


def test_a_rows_session_start_is_its_sessions_first_ready_time() -> None:
    session = np.array([3, 1, 3, 1, 2])
    ready = np.array([5.0, 2.0, 4.0, np.nan, 7.0])
    assert _session_starts(session, ready).tolist() == [4.0, 2.0, 4.0, 2.0, 7.0]


def test_the_legend_sits_above_the_first_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from veeksha.evaluate import png

    figures: list[Figure] = []
    monkeypatch.setattr(png, "save_png", lambda fig, path: figures.append(fig) or path)
    # one capped client whose waiting pool peaks at its end, under the old legend's corner
    rows = [
        request(i, ready=0.1 * i, sent=0.1 * i + 0.05 * i, chunks=(0.1 * i + 0.05 * i + 0.3,))
        | {"client": "default", "queue_wait": 0.05 * i}
        for i in range(10)
    ]
    assert draw_pools(ColumnSource.of(requests_table(rows)), tmp_path / "pools.png") is not None
    (fig,) = figures
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "pending",
        "waiting for a slot",
        "in flight",
    ]
    # (before: inside the panel's upper right corner, over the pools' latest peaks)
    assert legend.get_window_extent(renderer).y0 >= ax.get_window_extent(renderer).y1 - 1
