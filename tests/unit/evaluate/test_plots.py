"""The plots' data: the timeline's in-flight counts against a count by hand, the scatter's subset
against whole-column slicing, and the memory a large file source takes to plot."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from veeksha.evaluate import plots, source
from veeksha.evaluate.metrics import Digest, digest
from veeksha.evaluate.plots import in_flight_envelope
from veeksha.evaluate.png import save_png
from veeksha.evaluate.source import ColumnSource
from veeksha.plural import counted


def _brute_force(sent: np.ndarray, done: np.ndarray, bins: int) -> tuple[list[int], ...]:
    """Per bin: low, high and end of the in-flight count, walking every distinct event time.

    Times are integers and the bins' width a power of two: a time's bin is exact."""
    first = min(sent.min(), done.min(initial=np.inf))
    last = max(sent.max(), done.max(initial=-np.inf))
    width = (last - first) / bins
    low, high, end = [], [], []
    count = None
    times = np.unique(np.concatenate([sent, done]))
    for k in range(bins):
        seen = [] if count is None else [count]
        for t in times:
            if min(int((t - first) // width), bins - 1) == k:
                count = int((sent <= t).sum() - (done <= t).sum())
                seen.append(count)
        low.append(min(seen))
        high.append(max(seen))
        assert count is not None
        end.append(count)
    return low, high, end


@pytest.mark.parametrize("seed", range(6))
def test_in_flight_envelope_equals_count_by_hand(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plots, "BLOCK", 7)  # many blocks, bins cut across them
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    sent = rng.integers(0, 64, n).astype(float)
    sent[0], sent[-1] = 0, 64  # ties, and a span of 64 in 8 bins of exactly 8
    done = np.minimum(sent + rng.integers(0, 12, n), 64)  # some complete as they are sent
    done = np.sort(done[rng.random(n) < 0.8])  # some never complete
    sent.sort()
    bins = 8
    flight = in_flight_envelope(sent, done, bins=bins)
    low, high, end = _brute_force(sent, done, bins)
    assert flight.low.tolist() == low
    assert flight.high.tolist() == high
    assert flight.end.tolist() == end
    assert flight.low.min() >= 0


def test_in_flight_line_passes_through_every_bins_extremes() -> None:
    flight = in_flight_envelope(np.array([0.0, 1.0, 1.0]), np.array([2.0, 3.0]), bins=3)
    xs, ys = flight.line()
    assert xs.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    assert ys.tolist() == [1, 1, 1, 1, 1, 1, 3, 3, 3, 1, 3, 1, 1]


def test_in_flight_at_one_instant() -> None:
    flight = in_flight_envelope(np.array([5.0, 5.0]), np.array([5.0]))
    assert flight.edges.tolist() == [5.0, 5.0]
    assert (flight.low.tolist(), flight.high.tolist(), flight.end.tolist()) == ([1], [1], [1])


def test_scatter_subset_equals_slicing_whole_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "BATCH_ROWS", 13)
    rng = np.random.default_rng(0)
    n = 1000
    ttfc, tokens = rng.random(n), rng.integers(1, 100, n).astype(float)
    ttfc[rng.random(n) < 0.2] = np.nan
    tokens[rng.random(n) < 0.1] = np.nan
    # the two columns chunked differently: batches must be cut to the same rows
    table = pa.table(
        {
            "ttfc": pa.chunked_array([ttfc[:300], ttfc[300:]]),
            "prompt_tokens_total": pa.chunked_array([tokens[:7], tokens[7:512], tokens[512:]]),
        }
    )
    keep = ~np.isnan(ttfc) & ~np.isnan(tokens)
    for limit in (1, 7, 100, 10_000):
        got = plots._strided(ColumnSource.of(table), ("ttfc", "prompt_tokens_total"), limit)
        stride = max(1, int(keep.sum()) // limit)
        assert got[0].tolist() == ttfc[keep][::stride].tolist()
        assert got[1].tolist() == tokens[keep][::stride].tolist()


def test_plotting_a_large_file_holds_no_whole_column_but_the_sorted_times(
    tmp_path: Path,
) -> None:
    n = 2_000_000
    column_mb = n * 8 / 1e6
    rng = np.random.default_rng(0)
    sent = np.cumsum(rng.exponential(1e-4, n))
    path = tmp_path / "requests.parquet"
    pq.write_table(
        pa.table(
            {
                "sent_at": sent,
                "completed_at": sent + rng.exponential(0.5, n),
                "ttfc": rng.exponential(0.05, n),
                "prompt_tokens_total": rng.integers(1, 4000, n).astype(float),
            }
        ),
        path,
    )
    requests = ColumnSource(pq.read_schema(path), files=[path])
    small = ColumnSource.of(pq.read_table(path).slice(0, 100))
    plots._timeline(small, tmp_path / "warm.png")  # matplotlib's imports and fonts are not traced
    plots._ttfc_vs_prompt(small, tmp_path / "warm.png")

    def peak_mb(draw: object, name: str) -> float:
        tracemalloc.start()
        try:
            assert draw(requests, tmp_path / name) is not None  # type: ignore[operator]
            return tracemalloc.get_traced_memory()[1] / 1e6
        finally:
            tracemalloc.stop()

    # numpy's allocations are traced: the sorted send and completion times, little else
    assert peak_mb(plots._timeline, "timeline.png") < 2 * column_mb + 8
    assert peak_mb(plots._ttfc_vs_prompt, "ttfc_vs_prompt.png") < column_mb / 4


def _caught(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures the plots draw, caught instead of saved."""
    figures: list[Figure] = []

    def keep(fig: Figure, path: Path) -> Path:
        figures.append(fig)
        return path

    monkeypatch.setattr(plots, "save_png", keep)
    return figures


def test_send_rate_is_over_the_sends_not_the_drain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100 sends at 10/s over 0-9.9 s, each answered 10 s later: the drain ends at 19.9 s
    sent = np.arange(100) / 10
    figures = _caught(monkeypatch)
    table = pa.table({"sent_at": sent, "completed_at": sent + 10})
    assert plots._timeline(ColumnSource.of(table), tmp_path / "timeline.png") is not None
    (stairs,) = figures[0].axes[1].patches
    rates, edges = stairs.get_data()[0], stairs.get_data()[1]
    assert (edges[0], edges[-1]) == (0, pytest.approx(9.9))  # (before: bins up to 19.9 s)
    assert 9.5 < rates.min() <= rates.max() < 10.5  # (before: the last half of the bins 0)


def test_sends_at_one_instant_draw_a_note_not_a_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _caught(monkeypatch)
    table = pa.table({"sent_at": [5.0, 5.0], "completed_at": [6.0, 7.0]})
    plots._timeline(ColumnSource.of(table), tmp_path / "timeline.png")
    bottom = figures[0].axes[1]
    assert not bottom.patches
    assert [t.get_text() for t in bottom.texts] == [
        "2 requests sent at one instant (5.000 s): no rate"
    ]


def test_cdf_marks_the_summarys_percentiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _caught(monkeypatch)
    values = np.random.default_rng(1).exponential(0.05, 5000)
    found = digest(values, "s", cdf_points=plots.CDF_POINTS)
    plots._cdf(found, "ttfc", tmp_path / "ttfc_cdf.png")
    lines = {line.get_label(): line for line in figures[0].axes[0].get_lines()}
    for key in ("p50", "p99"):
        (label,) = [name for name in lines if str(name).startswith(f"{key} ")]
        assert lines[label].get_xdata()[0] == found.stats[key] * 1000
    assert figures[0].axes[0].get_legend() is not None


def test_cdf_of_one_sample_is_a_visible_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _caught(monkeypatch)
    plots._cdf(digest(np.array([0.02]), "s", cdf_points=plots.CDF_POINTS), "e2e", tmp_path / "x")
    ax = figures[0].axes[0]
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [20.0, 20.0]
    assert list(line.get_ydata()) == [0.0, 1.0]  # (before: one point at 0, nothing drawn)
    assert [t.get_text() for t in ax.texts] == ["one sample: 20 ms"]


def test_ramp_plot_draws_each_windows_latency_at_its_offered_rate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _caught(monkeypatch)
    windows = [
        {"offered_rate": 2.0, "ttfc_p50": 0.01, "ttfc_p99": 0.02, "e2e_p50": 0.3, "e2e_p99": 0.4},
        {"offered_rate": 4.0, "ttfc_p50": None, "ttfc_p99": None, "e2e_p50": None, "e2e_p99": None},
        {"offered_rate": 8.0, "ttfc_p50": 0.05, "ttfc_p99": 0.2, "e2e_p50": 0.6, "e2e_p99": 0.9},
    ]
    ramp = {"shape": "linear", "start_rate": 2.0, "end_rate": 8.0, "duration": 6.0}
    assert plots.write_ramp_plot(tmp_path, ramp | {"windows": windows}) == [
        tmp_path / "plots" / "ramp.png"
    ]
    ttfc, e2e = figures[0].axes
    drawn = {
        str(line.get_label()): (list(line.get_xdata()), list(line.get_ydata()))
        for ax in (ttfc, e2e)
        for line in ax.get_lines()
    }
    assert drawn == {  # ms; the window without a request left out, not drawn at 0
        "TTFC p50": ([2.0, 8.0], [10.0, 50.0]),
        "TTFC p99": ([2.0, 8.0], [20.0, 200.0]),
        "E2E p50": ([2.0, 8.0], [300.0, 600.0]),
        "E2E p99": ([2.0, 8.0], [400.0, 900.0]),
    }
    assert e2e.get_xlabel() == "offered rate in the window (sessions/s)"
    assert ttfc.get_ylabel() == "TTFC (ms)"


def test_no_ramp_plot_without_a_ramp_or_latency(tmp_path: Path) -> None:
    assert plots.write_ramp_plot(tmp_path, None) == []
    empty = {"offered_rate": 2.0, "ttfc_p50": None, "e2e_p50": None}
    assert plots.write_ramp_plot(tmp_path, {"windows": [empty]}) == []
    assert not (tmp_path / "plots").exists()


def _cdf_in_a_figure_of_its_own(digest: Digest, name: str, path: Path) -> None:
    """A CDF drawn as before the CDFs shared one figure: a new figure, its artists added."""
    assert digest.cdf is not None
    assert digest.median is not None
    xs = digest.cdf * 1000
    fig = plots._figure()
    ax = fig.add_subplot()
    if xs.size == 1:
        ax.plot([xs[0], xs[0]], [0.0, 1.0], marker="o", label="the only sample")
        plots._note(ax, f"one sample: {xs[0]:.4g} ms")
    else:
        ax.plot(xs, np.linspace(0, 1, xs.size), drawstyle="steps-post", label="CDF")
    for key, style in plots.CDF_MARKS:
        value = digest.stats.get(key)
        if value is not None and xs.size > 1:
            label = f"{key} {value * 1000:.4g} ms"
            ax.axvline(value * 1000, color="grey", linestyle=style, linewidth=1, label=label)
    ax.set_xlabel(f"{name.upper()} (ms)")
    ax.set_ylabel("fraction of samples")
    ax.set_ylim(-0.03, 1.03)
    samples = counted(digest.count, "sample")
    ax.set_title(f"{name.upper()} CDF ({samples}, p50 {digest.median * 1000:.3g} ms)")
    ax.legend(loc="lower right", fontsize="small")
    ax.grid(alpha=0.3)
    save_png(fig, path)


def test_the_cdfs_drawn_in_one_figure_are_the_images_of_a_figure_each(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    samples = {
        "ttfc": rng.exponential(0.05, 3000),  # a wide CDF first: its axis must not stay
        "tbc": np.zeros(600),  # all at one value: a singular axis
        "tpot": np.array([0.004]),  # one sample: a figure of its own, between shared ones
        "e2e": rng.normal(2.0, 0.01, 400),  # a narrow one, far from the first
    }
    digests = {
        name: digest(values, "s", cdf_points=plots.CDF_POINTS) for name, values in samples.items()
    }
    shared = plots.write_cdf_plots(tmp_path / "shared", digests)
    assert [path.name for path in shared] == [f"{name}_cdf.png" for name in plots.CDF_METRICS]
    for name in plots.CDF_METRICS:
        own = tmp_path / f"own_{name}.png"
        _cdf_in_a_figure_of_its_own(digests[name], name, own)
        assert (imread(tmp_path / "shared" / "plots" / f"{name}_cdf.png") == imread(own)).all()
