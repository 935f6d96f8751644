"""The server timeline's "veeksha: in flight" line: only the requests that may have reached the
server (``stats.reached_server``, the server checks' rule), drawn over the server's queue."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from tests.unit.evaluate.builders import request, requests_table
from veeksha.evaluate import server_plot
from veeksha.evaluate.server_view import ServerView
from veeksha.evaluate.source import ColumnSource


def _in_flight_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict]
) -> np.ndarray:
    """The y values of the plot's in-flight line (the figure is caught, not saved)."""
    figures: list[Figure] = []

    def keep(fig: Figure, path: Path) -> Path:
        figures.append(fig)
        return path

    monkeypatch.setattr(server_plot, "save_png", keep)
    view = ServerView(series={"running": (np.array([0.0, 1.0, 2.0]), np.array([0.0, 3.0, 0.0]))})
    for table in (requests_table(rows), ColumnSource.of(requests_table(rows))):
        server_plot.write_server_plot(tmp_path, table, view)
    lines = [
        [line for line in fig.axes[0].get_lines() if line.get_label() == "veeksha: in flight"]
        for fig in figures
    ]
    assert [len(found) for found in lines] == [1, 1]
    first, second = (np.asarray(found[0].get_ydata()) for found in lines)
    assert first.tolist() == second.tolist()  # a table in memory and a source alike
    return first


def test_requests_refused_a_connection_are_not_in_flight_at_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # three requests the server served together, 0.1 s to 1.5 s; meanwhile five refused a
    # connection (never in its queue) and one tool call (no server at all), all overlapping
    served = [request(i, sent=0.1 * (i + 1), chunks=(1.0, 1.2, 1.5)) for i in range(3)]
    refused = [
        request(
            10 + i,
            sent=0.5 + 0.01 * i,
            chunks=(),
            completed=0.8,
            status="error",
            error_kind="connection_refused",
        )
        for i in range(5)
    ]
    tool = request(20, sent=0.6, chunks=(0.9,)) | {"kind": "tool"}
    drawn = _in_flight_drawn(tmp_path, monkeypatch, [*served, *refused, tool])
    assert drawn.max() == 3  # (counting them all: 9)
    assert drawn[-1] == 0
    # a request that failed after it was sent (a reset, a timeout) may have reached it: counted
    reset = [r | {"error_kind": "connection_reset"} for r in refused]
    assert _in_flight_drawn(tmp_path, monkeypatch, [*served, *reset]).max() == 8


def test_the_legends_sit_above_the_panels_not_over_the_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[Figure] = []
    monkeypatch.setattr(server_plot, "save_png", lambda fig, path: figures.append(fig) or path)
    series = {
        "running": (np.array([0.0, 1.0, 2.0]), np.array([0.0, 3.0, 0.0])),
        "waiting": (np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 0.0])),
        "kv_usage": (np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.5, 0.0])),
    }
    rows = [request(i, sent=0.1 * (i + 1), chunks=(1.0, 1.2, 1.5)) for i in range(3)]
    server_plot.write_server_plot(tmp_path, requests_table(rows), ServerView(series=series))
    (fig,) = figures
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes[:2]:
        legend = ax.get_legend()
        assert legend is not None
        # (before: inside the panel's upper right corner, over the in-flight peak)
        assert legend.get_window_extent(renderer).y0 >= ax.get_window_extent(renderer).y1 - 1


def test_the_warmup_it_draws_is_shaded_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[Figure] = []
    monkeypatch.setattr(server_plot, "save_png", lambda fig, path: figures.append(fig) or path)
    view = ServerView(series={"running": (np.array([0.0, 1.0, 2.0]), np.array([0.0, 3.0, 0.0]))})
    rows = [request(i, sent=0.5 * i, chunks=(0.5 * i + 0.2,)) for i in range(4)]
    server_plot.write_server_plot(tmp_path, requests_table(rows), view, warmup=(0.0, 1.0))
    server_plot.write_server_plot(tmp_path, requests_table(rows), view)  # no warmup: no band
    shaded, plain = figures
    for ax in shaded.axes:
        (band,) = ax.patches
        assert (band.get_x(), band.get_x() + band.get_width()) == (0.0, 1.0)  # type: ignore[attr-defined]
    assert server_plot.WARMUP_LABEL in shaded.axes[0].get_legend_handles_labels()[1]
    assert not any(ax.patches for ax in plain.axes)
    assert len(shaded.axes[2].collections[0].get_offsets()) == 4  # warmup rows drawn too


@pytest.mark.parametrize("entries", [4, 5, 6, 8])
def test_every_legend_entry_fits_in_the_figure_above_its_panel(entries: int) -> None:
    # four long entries made one row wider than the figure (the last cut off at its edge);
    # five or more went inside the panel's upper right corner, over its lines
    from veeksha.evaluate.plots import _figure

    fig = _figure(rows=3)
    axes = fig.subplots(3, 1, sharex=True)
    times = np.linspace(0.0, 10.0, 20)
    for ax, count in ((axes[0], entries), (axes[1], entries), (axes[2], 2)):
        for i in range(count):
            ax.plot(times, times * i, label=f"server: a long series name of this panel, no. {i}")
        server_plot.legend_above(ax)
    fig.canvas.draw()  # type: ignore[attr-defined]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    page = fig.bbox
    panels = [ax.get_window_extent(renderer) for ax in axes]
    for number, ax in enumerate(axes):
        legend = ax.get_legend()
        assert legend is not None
        texts = legend.get_texts()
        assert len(texts) == (entries if number < 2 else 2)
        for entry in [*texts, *legend.legend_handles]:
            box = entry.get_window_extent(renderer)
            assert page.x0 <= box.x0, entry  # inside the figure
            assert box.x1 <= page.x1, entry
            assert page.y0 <= box.y0, entry
            assert box.y1 <= page.y1, entry
            assert box.y0 >= panels[number].y1 - 1, entry  # above its own panel ...
            if number:  # ... and below the one above it
                assert box.y1 <= panels[number - 1].y0, entry
    heights = [panel.height for panel in panels]
    assert max(heights) - min(heights) < 1  # the panels keep their size


def test_several_servers_each_have_a_running_line_under_their_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[Figure] = []

    def keep(fig: Figure, path: Path) -> Path:  # (the figure caught, not saved)
        figures.append(fig)
        return path

    monkeypatch.setattr(server_plot, "save_png", keep)
    times = np.array([0.0, 1.0, 2.0])
    first, second = np.array([1.0, 3.0, 0.0]), np.array([0.0, 1.0, 1.0])
    view = ServerView(series={"running": (times, first + second)})
    for number, values in (("0", first), ("1", second)):
        view.per_server[number] = ServerView(series={"running": (times, values)})
    rows = [request(0, sent=0.1, chunks=(0.5, 0.6))]
    server_plot.write_server_plot(tmp_path, requests_table(rows), view)
    (fig,) = figures
    drawn = {line.get_label(): line.get_ydata() for line in fig.axes[0].get_lines()}
    assert list(drawn) == [
        "veeksha: in flight",
        "server: running",
        "server 0: running",
        "server 1: running",
    ]
    # (a step line: each value held until the next time)
    assert np.asarray(drawn["server 0: running"]).tolist() == first.tolist()
    assert np.asarray(drawn["server: running"]).tolist() == (first + second).tolist()
