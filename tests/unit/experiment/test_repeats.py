"""Repeated runs (``--repeats``): the points they make, Student's t quantile (against scipy), the
statistics of each metric over the repeats, repeats.json and the console table."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console
from scipy import stats

from veeksha.experiment.repeats import (
    REPEATS_CSV,
    aggregate,
    read_repeats,
    render_repeats,
    student_t_quantile,
    with_repeats,
    write_repeats,
)
from veeksha.experiment.repeats_compare import compare_repeats, welch
from veeksha.scenario.loader import load_points_text

_SWEEP = """
seed: 7
traffic_scheduler:
  type: rate
  interval_generator: {type: poisson, arrival_rate: !expand [4, 8]}
"""


@pytest.mark.parametrize("df", [1, 2, 4, 9, 30, 1000])
@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.9995])
def test_the_t_quantile_is_scipys(p: float, df: int) -> None:
    assert student_t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-8)
    assert student_t_quantile(1 - p, df) == pytest.approx(stats.t.ppf(1 - p, df), rel=1e-8)


def test_the_t_quantile_refuses_what_has_none() -> None:
    with pytest.raises(ValueError, match="0 < p < 1"):
        student_t_quantile(1.0, 3)


def test_each_point_is_repeated_innermost_with_its_seed_or_the_next() -> None:
    points = load_points_text(_SWEEP, "s.yaml")
    repeated = with_repeats(points, 3)
    assert [p.label for p in repeated.points] == [
        f"arrival_rate={rate},repeat={k}" for rate in (4, 8) for k in (1, 2, 3)
    ]
    assert [p.index for p in repeated.points] == list(range(6))
    assert repeated.swept_keys[-1] == "repeat"
    assert repeated.is_sweep
    assert {p.scenario.seed for p in repeated.points} == {7}  # (the same workload)
    varied = with_repeats(points, 3, vary_seed=True)
    assert [p.scenario.seed for p in varied.points] == [7, 8, 9, 7, 8, 9]
    plain = with_repeats(load_points_text("seed: 1\n", "p.yaml"), 2)
    assert [p.label for p in plain.points] == ["repeat=1", "repeat=2"]


def _table(rows: list[tuple[int, int, str, str, float, float]]) -> pd.DataFrame:
    """A sweep table of (rate, repeat, status, health, requests/s, TTFC p99 s) rows."""
    return pd.DataFrame(
        [
            {
                "arrival_rate": rate,
                "repeat": k,
                "status": status,
                "health": health,
                "requests_per_s": rps,
                "ttfc_p99_s": ttfc,
                "error_rate": 0.0,
            }
            for rate, k, status, health, rps, ttfc in rows
        ]
    )


_MANIFEST = {
    "swept_keys": ["traffic_scheduler.interval_generator.arrival_rate", "repeat"],
    "short_names": {
        "traffic_scheduler.interval_generator.arrival_rate": "arrival_rate",
        "repeat": "repeat",
    },
    "repeats": {"count": 5, "confidence": 0.95},
}


def test_each_metric_has_its_mean_spread_and_interval_over_the_complete_runs() -> None:
    ttfc = [0.150, 0.152, 0.148, 0.155, 0.151]
    rows = [(4, k + 1, "complete", "PASS", 4.0 + k / 100, t) for k, t in enumerate(ttfc)]
    rows += [(8, 1, "complete", "FAIL", 8.0, 0.2), (8, 2, "complete", "PASS", 8.2, 0.3)]
    rows += [(8, 3, "interrupted", "PASS", 1.0, 9.0)]  # (not counted)
    data = aggregate(_table(rows), _MANIFEST)
    assert data["confidence"] == 0.95
    assert data["repeats"] == 5
    first, second = data["groups"]
    assert first["values"] == {"arrival_rate": 4}
    assert first["runs"] == first["of"] == 5
    t = first["metrics"]["ttfc_p99_s"]
    assert t["n"] == 5
    assert t["mean"] == pytest.approx(0.1512)
    assert t["std"] == pytest.approx(stats.tstd(ttfc))
    assert t["se"] == pytest.approx(stats.sem(ttfc))
    assert t["t_critical"] == pytest.approx(stats.t.ppf(0.975, 4))
    low, high = stats.t.interval(0.95, 4, loc=0.1512, scale=stats.sem(ttfc))
    assert (t["ci_low"], t["ci_high"]) == (pytest.approx(low), pytest.approx(high))
    assert t["cv"] == pytest.approx(stats.tstd(ttfc) / 0.1512)
    assert (t["min"], t["max"]) == (0.148, 0.155)
    assert second["runs"] == 2
    assert second["of"] == 3
    assert second["health_failed"] == 1
    assert second["metrics"]["requests_per_s"]["mean"] == pytest.approx(8.1)
    assert first["metrics"]["error_rate"]["cv"] is None  # (a mean of 0: no CV)


def test_one_run_has_no_spread() -> None:
    data = aggregate(_table([(4, 1, "complete", "PASS", 4.0, 0.1)]), _MANIFEST)
    metric = data["groups"][0]["metrics"]["requests_per_s"]
    assert metric["n"] == 1
    assert metric["mean"] == 4.0
    assert metric["std"] is metric["ci_low"] is metric["ci_high"] is None


def test_the_files_and_the_table_at_80_columns(tmp_path: Path) -> None:
    rows = [(4, k, "complete", "PASS", 4.0 + k / 10, 0.1 + k / 100) for k in (1, 2, 3)]
    write_repeats(tmp_path, aggregate(_table(rows), _MANIFEST))
    data = read_repeats(tmp_path)
    assert data["groups"][0]["metrics"]["requests_per_s"]["mean"] == pytest.approx(4.2)
    lines = (tmp_path / REPEATS_CSV).read_text().splitlines()
    assert lines[0] == "group,metric,n,mean,std,min,max,cv,se,t_critical,ci_low,ci_high"
    assert lines[1].startswith("arrival_rate=4,requests_per_s,3,")
    out = io.StringIO()
    render_repeats(Console(file=out, width=80, color_system=None), data)
    text = out.getvalue()
    assert "arrival_rate=4: repeats: 3 of 3 runs complete" in text
    assert "± 95% CI" in text
    half = 1000 * stats.t.ppf(0.975, 2) * stats.sem([0.11, 0.12, 0.13])
    row = next(line for line in text.splitlines() if "TTFC p99 (ms)" in line)
    assert f"{half:.4g}" in row
    assert "120" in row
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    assert math.isfinite(json.loads(json.dumps(data))["groups"][0]["metrics"]["ttfc_p99_s"]["se"])


def test_welchs_test_is_scipys() -> None:
    a = {"n": 5, "mean": 150.0, "std": 2.6}
    b = {"n": 4, "mean": 156.0, "std": 5.1}
    test = welch(a, b)
    assert test is not None
    t, df, p = test
    expected = stats.ttest_ind_from_stats(156.0, 5.1, 4, 150.0, 2.6, 5, equal_var=False)
    assert t == pytest.approx(expected.statistic)
    assert p == pytest.approx(expected.pvalue, rel=1e-6)
    assert df == pytest.approx(
        (2.6**2 / 5 + 5.1**2 / 4) ** 2 / ((2.6**2 / 5) ** 2 / 4 + (5.1**2 / 4) ** 2 / 3)
    )
    assert welch({"n": 1, "mean": 1.0, "std": None}, b) is None
    assert welch({"n": 3, "mean": 0.0, "std": 0.0}, {"n": 3, "mean": 0.0, "std": 0.0})[2] == 1.0


def _repeats_folder(folder: Path, ttfc: list[float], rps: list[float]) -> Path:
    rows = [
        (4, k + 1, "complete", "PASS", r, t) for k, (t, r) in enumerate(zip(ttfc, rps, strict=True))
    ]
    plain = {**_MANIFEST, "swept_keys": ["repeat"], "short_names": {"repeat": "repeat"}}
    folder.mkdir()
    write_repeats(folder, aggregate(_table(rows).drop(columns="arrival_rate"), plain))
    return folder


def test_compare_says_which_differences_are_larger_than_the_noise(tmp_path: Path) -> None:
    a = _repeats_folder(tmp_path / "a", [0.100, 0.102, 0.098, 0.101], [10.0, 10.2, 9.9, 10.1])
    b = _repeats_folder(tmp_path / "b", [0.120, 0.123, 0.119, 0.121], [10.1, 9.9, 10.2, 10.0])
    out = io.StringIO()
    compare_repeats(Console(file=out, width=80, color_system=None), [a, b])
    text = out.getvalue()
    assert "a → b: 4 and 4 runs, differs if p < 0.05" in " ".join(text.split())
    ttfc = next(line for line in text.splitlines() if "TTFC p99" in line)
    assert "+20.4%" in ttfc
    assert ttfc.rstrip(" │").endswith("yes")
    rps = next(line for line in text.splitlines() if "requests/s" in line)
    assert rps.rstrip(" │").endswith("no")
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_plot_draws_each_run_and_the_interval(tmp_path: Path) -> None:
    from veeksha.experiment.repeats_plot import write_repeats_plot

    rows = [
        (4, k, "complete", "PASS" if k != 2 else "FAIL", 4.0 + k / 10, 0.1 + k / 100)
        for k in (1, 2, 3)
    ]
    rows += [(8, k, "complete", "PASS", 8.0 + k / 10, 0.2 + k / 100) for k in (1, 2, 3)]
    table = _table(rows)
    for column in ("output_tokens_per_s", "ttfc_p50_s", "e2e_p50_s", "e2e_p99_s"):
        table[column] = table["requests_per_s"]
    data = aggregate(table, _MANIFEST)
    path = write_repeats_plot(tmp_path, table, _MANIFEST, data)
    assert path == tmp_path / "plots" / "repeats.png"
    png = path.read_bytes()
    assert png.startswith(b"\x89PNG")
    assert len(png) > 20_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (900, 720)  # (10 × 8 inches at 90 dpi)
    none = table.assign(status="interrupted")
    assert write_repeats_plot(tmp_path / "none", none, _MANIFEST, data) is None
