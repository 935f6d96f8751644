"""``veeksha diff``'s matching: the points both results measured, the newest result of a
folder, and nothing comparable as bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veeksha.errors import ConfigurationError
from veeksha.experiment.microbench.diff import compare


def _write(folder: Path, document: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{document['benchmark']}_results.json").write_text(json.dumps(document))


def _stress(levels: list[float], tput: float, created: str, traffic: str = "concurrency") -> dict:
    points = [{"level": v, "output_tokens_per_s": tput * v, "e2e_p50_ms": 100.0} for v in levels]
    return {"benchmark": "stress", "traffic": traffic, "created_at": created, "points": points}


def test_levels_measured_by_both_are_compared_and_the_newest_result_wins(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "old", _stress([1, 2], 1.0, "2026-01-01T00:00:00+00:00"))
    _write(tmp_path / "a" / "new", _stress([1, 2, 4], 10.0, "2026-02-01T00:00:00+00:00"))
    _write(tmp_path / "b", _stress([2, 4, 8], 15.0, "2026-02-01T00:00:00+00:00"))
    decode = {"benchmark": "decode", "points": [], "fits": []}
    _write(tmp_path / "b" / "d", decode)  # only on one side: not compared
    pairs, changes, notes = compare(tmp_path / "a", tmp_path / "b")
    assert list(pairs) == ["stress"]
    tput = {c.point: c.change for c in changes if c.metric == "output_tokens_per_s"}
    assert tput == {"c=2": pytest.approx(0.5), "c=4": pytest.approx(0.5)}
    assert any("2 stress results; using the newest" in note for note in notes)


def test_different_traffic_or_no_common_benchmark_is_nothing_comparable(tmp_path: Path) -> None:
    _write(tmp_path / "a", _stress([1], 1.0, "x"))
    _write(tmp_path / "b", _stress([1], 1.0, "x", traffic="rate"))
    with pytest.raises(ConfigurationError, match=r"nothing comparable.*concurrency against rate"):
        compare(tmp_path / "a", tmp_path / "b")
    (tmp_path / "c" / "x").mkdir(parents=True)
    (tmp_path / "c" / "x" / "prefill_results.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match=r"prefill_results\.json: not a readable results"):
        compare(tmp_path / "a", tmp_path / "c")


def _prefill(health: list[str]) -> dict:
    points = [
        {"input_length": n, "ttfc_p50_ms": n / 10, "ttfc_p99_ms": n / 5, "health": verdict}
        for n, verdict in zip([128, 512], health, strict=True)
    ]
    fit = {"slope_ms_per_1k_tokens": 100.0, "intercept_ms": 5.0}
    return {"benchmark": "prefill", "created_at": "x", "points": points, "fit": fit}


def test_a_change_at_an_unhealthy_point_says_so_and_its_fit_counts_them(tmp_path: Path) -> None:
    _write(tmp_path / "a", _prefill(["PASS", "PASS"]))
    _write(tmp_path / "b", _prefill(["PASS", "FAIL"]))
    _, changes, _ = compare(tmp_path / "a", tmp_path / "b")
    health = {(c.point, c.metric): c.health for c in changes}
    assert health[("L=128", "ttfc_p50_ms")] == ""
    assert health[("L=512", "ttfc_p50_ms")] == "B:FAIL"
    assert health[("L=512", "ttfc_p99_ms")] == "B:FAIL"
    assert health[("fit", "slope_ms_per_1k_tokens")] == "B:1 unhealthy"


def test_the_plot_rings_unhealthy_points(tmp_path: Path) -> None:
    from matplotlib.image import imread

    from veeksha.experiment.microbench.diff_plots import diff_plot

    healthy = (_prefill(["PASS", "PASS"]), _prefill(["PASS", "PASS"]))
    marked = (_prefill(["PASS", "PASS"]), _prefill(["PASS", "FAIL"]))
    plain = imread(diff_plot("prefill", healthy, ("a", "b"), tmp_path / "plain.png"))
    ringed = imread(diff_plot("prefill", marked, ("a", "b"), tmp_path / "ringed.png"))

    def red(image) -> int:  # pure red pixels: only the rings are drawn in "red"
        return int(((image[..., 0] > 0.9) & (image[..., 1] < 0.1) & (image[..., 2] < 0.1)).sum())

    assert red(plain) == 0
    assert red(ringed) > 20


def _prefill_images(slope: float) -> dict:
    points = [
        {
            "image_side": side,
            "megapixels": side * side / 1e6,
            "input_length": 32,
            "ttfc_p50_ms": 5 + slope * side * side / 1e6,
            "ttfc_p99_ms": 6 + slope * side * side / 1e6,
            "health": "PASS",
        }
        for side in (224, 448)
    ]
    fit = {"slope_ms_per_megapixel": slope, "intercept_ms": 5.0}
    return {"benchmark": "prefill", "created_at": "x", "points": points, "fit": fit}


def test_prefill_by_image_size_is_compared_side_by_side_and_drawn(tmp_path: Path) -> None:
    from veeksha.experiment.microbench.diff_plots import diff_plot

    _write(tmp_path / "a", _prefill_images(60.0))
    _write(tmp_path / "b", _prefill_images(90.0))
    _, changes, _ = compare(tmp_path / "a", tmp_path / "b")
    by = {(c.point, c.metric): c.change for c in changes}
    assert by[("fit", "slope_ms_per_megapixel")] == pytest.approx(0.5)
    assert set(by) >= {("224x224", "ttfc_p50_ms"), ("448x448", "ttfc_p50_ms")}
    pair = (_prefill_images(60.0), _prefill_images(90.0))
    assert diff_plot("prefill", pair, ("a", "b"), tmp_path / "d.png").stat().st_size > 0
