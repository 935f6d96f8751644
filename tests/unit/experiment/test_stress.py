"""``veeksha stress``'s pure parts: the levels, the auto search's stopping rule, the figures of a
point from its rows, the checks, the settings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from veeksha.errors import ScenarioError
from veeksha.experiment.microbench.config import load_config
from veeksha.experiment.microbench.stress import analyse_point, measured_start, stress_checks
from veeksha.experiment.microbench.stress_config import StressConfig
from veeksha.experiment.microbench.stress_levels import auto_levels, log_spaced


def _saturating(knee: float, per_level: float = 100.0) -> tuple[list[float], object]:
    """A fake point function: throughput grows linearly up to ``knee``, then stays flat."""
    calls: list[float] = []

    def measure(level: float) -> float:
        calls.append(level)
        return per_level * min(level, knee)

    return calls, measure


def test_auto_doubles_until_the_gain_falls_under_the_threshold_then_fills_the_knee() -> None:
    calls, measure = _saturating(knee=6)
    levels = auto_levels(
        measure, start=1, max_level=1024, threshold=0.10, fill_points=2, integer=True
    )
    # 100, 200, 400, 600 (+50 %), 600 at 16 (+0 %): stop at 16; knee in (4, 16): 6.35, 10.08
    assert calls == [1, 2, 4, 8, 16, 6, 10]
    assert levels == calls


def test_auto_stops_on_a_gain_just_under_the_threshold_not_above() -> None:
    gains = {1: 100.0, 2: 111.0, 4: 121.0}  # +11 % goes on, +9 % stops
    calls: list[float] = []

    def measure(level: float) -> float:
        calls.append(level)
        return gains[int(level)]

    auto_levels(measure, start=1, max_level=64, threshold=0.10, fill_points=0, integer=True)
    assert calls == [1, 2, 4]


def test_auto_never_passes_max_level_and_fills_nothing_unsaturated() -> None:
    _, measure = _saturating(knee=1e9)
    levels = auto_levels(
        measure, start=0.5, max_level=5, threshold=0.1, fill_points=3, integer=False
    )
    assert levels == [0.5, 1.0, 2.0, 4.0]


def test_levels_are_log_spaced_and_whole_for_a_concurrency() -> None:
    assert log_spaced(1, 64, 7, integer=True) == [1, 2, 4, 8, 16, 32, 64]
    assert log_spaced(1, 4, 6, integer=True) == [1, 2, 3, 4]  # rounded duplicates dropped
    assert log_spaced(2, 8, 3, integer=False) == [2, 4, 8]


def _rows() -> pd.DataFrame:
    # window [1, 3): a warmup request decoding across its start, two measured ones, one late
    return pd.DataFrame(
        {
            "phase": ["warmup", "measured", "measured", "measured"],
            "status": ["ok", "ok", "ok", "error"],
            "ready_at": [0.0, 1.0, 2.0, 2.9],
            "first_chunk_at": [0.5, 1.1, 2.1, None],
            "completed_at": [1.5, 2.0, 3.5, 3.0],
            "chunk_times": [
                np.array([0.5, 1.0, 1.5]),  # 2 in the window
                np.array([1.1, 1.5, 2.0]),  # 3
                np.array([2.1, 2.8, 3.5]),  # 2
                None,
            ],
            "output_tokens": [6, 3, 3, None],  # the warmup one: 2 tokens per chunk
            "prompt_tokens_total": [100, 100, 100, 100],
            "ttfc": [0.5, 0.1, 0.1, None],
            "e2e": [1.5, 1.0, 1.5, None],
            "tpot": [0.5, 0.45, 0.7, None],
        }
    )


def test_a_point_counts_throughput_inside_its_steady_window_only() -> None:
    point = analyse_point(4, _rows(), 2.0, "points/x", "PASS")
    assert point["window_s"] == 2.0
    assert point["output_tokens_per_s"] == pytest.approx((2 * 2 + 3 + 2) / 2)
    assert point["input_tokens_per_s"] == pytest.approx(200 / 2)  # two prefills in the window
    assert point["requests_per_s"] == pytest.approx(2 / 2)  # the warmup one counts too
    assert (point["samples"], point["failed"]) == (2, 1)
    assert point["e2e_p50_ms"] == pytest.approx(1250)
    assert point["interactivity_p50"] == pytest.approx(1 / 0.575)


def test_a_reasoning_models_answer_ttfc_is_a_points_figure_of_its_own() -> None:
    rows = _rows()
    assert analyse_point(4, rows, 2.0, "p", "PASS")["answer_ttfc_p50_ms"] is None  # (no column)
    rows["answer_ttfc"] = [0.9, 0.3, 0.5, None]  # (the warmup's and the failure's not counted)
    point = analyse_point(4, rows, 2.0, "p", "PASS")
    assert point["answer_ttfc_p50_ms"] == pytest.approx(400)
    assert point["answer_ttfc_p99_ms"] == pytest.approx(498)
    rows["answer_ttfc"] = [None] * 4  # (a model that does not think)
    assert analyse_point(4, rows, 2.0, "p", "PASS")["answer_ttfc_p99_ms"] is None


def _poisson_point(rng: np.random.Generator, rate: float, warmup: float, duration: float) -> dict:
    """The rows of a rate point as the engine makes them: arrivals from t0 at Poisson gaps,
    warmup until ``warmup``, measured ones until ``duration`` after the first measured arrival;
    each request answered in 20 ms (three chunks)."""
    gaps = rng.exponential(1 / rate, size=int(4 * rate * (warmup + duration)) + 50)
    ready = np.concatenate([[0.0], np.cumsum(gaps)])
    first = ready[ready >= warmup][0]
    ready = ready[ready < first + duration]
    n = ready.size
    return {
        "phase": np.where(ready < warmup, "warmup", "measured"),
        "status": ["ok"] * n,
        "ready_at": ready,
        "first_chunk_at": ready + 0.005,
        "completed_at": ready + 0.02,
        "chunk_times": [t + np.array([0.005, 0.01, 0.02]) for t in ready],
        "output_tokens": [3] * n,
        "prompt_tokens_total": [100] * n,
        "ttfc": [0.005] * n,
        "e2e": [0.02] * n,
        "tpot": [0.0075] * n,
    }


def test_an_open_loop_points_request_rate_is_the_offered_rate_on_average() -> None:
    # veeksha stress --quick --rates 2 read 3.00 req/s at 2: 9 completions in its 3 s window.
    # Short windows are noisy (Poisson: ~6 ± 2.4 arrivals in 3 s), but a window that starts at
    # the first measured arrival also holds that arrival and a Poisson number of others: about
    # one request (1 / duration req/s) too many on average. It starts at the warmup's end.
    # (1 s windows: the bias is 1 req/s, six standard errors of the mean of 100 points.)
    rate, warmup, duration, points = 2.0, 0.5, 1.0, 100
    rng = np.random.default_rng(7)
    by_clock, by_arrival = [], []
    for _ in range(points):
        rows = pd.DataFrame(_poisson_point(rng, rate, warmup, duration))
        by_clock.append(analyse_point(rate, rows, duration, "p", "PASS", warmup)["requests_per_s"])
        by_arrival.append(analyse_point(rate, rows, duration, "p", "PASS")["requests_per_s"])
    spread = np.sqrt(rate / duration / points)  # the standard error of the mean: ~0.14
    assert abs(np.mean(by_clock) - rate) < 3 * spread
    assert np.mean(by_arrival) - rate > 3 * spread  # (the old window, from the first arrival)


def test_an_open_loop_point_without_warmup_is_not_a_request_too_many() -> None:
    # warmup_duration: 0: the measured phase starts at t0, which is the first arrival (the
    # engine releases it at ready_at 0.0), so a window from t0 held it besides the Poisson
    # number of others, as the first-arrival window did. An open loop's window leaves out the
    # request arriving at its start: what remains holds rate × duration arrivals on average.
    rate, duration, points = 2.0, 1.0, 100
    rng = np.random.default_rng(11)
    fixed, old = [], []
    for _ in range(points):
        rows = pd.DataFrame(_poisson_point(rng, rate, 0.0, duration))
        assert rows["ready_at"].iloc[0] == 0.0
        point = analyse_point(rate, rows, duration, "p", "PASS", 0.0, open_loop=True)
        fixed.append(point["requests_per_s"])
        old.append(analyse_point(rate, rows, duration, "p", "PASS", 0.0)["requests_per_s"])
    spread = np.sqrt(rate / duration / points)
    assert abs(np.mean(fixed) - rate) < 3 * spread
    assert np.mean(old) - rate > 3 * spread  # (the window that counted the t0 arrival)
    # a closed loop's requests at t0 are its load, not a sample of arrivals: they count
    rows = pd.DataFrame(_poisson_point(rng, rate, 0.0, duration))
    closed = analyse_point(rate, rows, duration, "p", "PASS", 0.0)
    in_window = int(np.sum(rows["completed_at"] < duration))
    assert closed["requests_per_s"] == pytest.approx(in_window / duration)


def test_the_window_starts_where_the_points_measured_phase_did() -> None:
    phases = [{"name": "warmup", "start": 0.0, "end": 1.0}, {"name": "measured", "start": 1.0}]
    assert measured_start({"run": {"phases": phases}}) == 1.0
    assert measured_start({}) is None  # (a run that wrote no summary: its first measured arrival)
    # the rows above from 0.9: the warmup request's chunk at 1.0 and the first completion count
    point = analyse_point(4, _rows(), 2.0, "points/x", "PASS", 0.9)
    assert point["output_tokens_per_s"] == pytest.approx((2 * 2 + 3 + 2) / 2)
    assert point["requests_per_s"] == pytest.approx(2 / 2)


def test_checks_name_each_offending_level_and_a_drop_only_warns() -> None:
    def point(level: float, throughput: float, samples: int = 30, failed: int = 0) -> dict:
        return {
            "level": level,
            "output_tokens_per_s": throughput,
            "samples": samples,
            "failed": failed,
            "health": "PASS",
        }

    checks = {c.name: c for c in stress_checks([point(1, 100), point(2, 190)], 20, "c")}
    assert all(c.passed for c in checks.values())
    table = [point(1, 100, samples=5), point(2, 200, failed=2), point(4, 150)]
    checks = {c.name: c for c in stress_checks(table, 20, "c")}
    assert checks["enough_samples"].detail == "below 20 measured ok requests: c=1: 5"
    assert checks["no_failures"].detail == "failed requests: c=2: 2"
    drop = checks["monotone_throughput"]
    assert (drop.passed, drop.warning) == (False, True)
    assert "c=4: 150.0 tokens/s < 200.0 at c=2" in drop.detail
    empty = point(1, 0, samples=0) | {"output_tokens_per_s": None}  # a point with no rows
    checks = {c.name: c for c in stress_checks([empty, point(2, 50)], 20, "c")}
    assert checks["monotone_throughput"].passed
    assert not checks["enough_samples"].passed


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"concurrencies": ["0", "4"]}, "concurrencies: every level must be > 0"),
        ({"concurrencies": "2", "rates": "3"}, "give concurrencies or rates, not both"),
        ({"mode": "range", "rates": "3"}, "concurrencies and rates are for mode manual"),
        ({"traffic": "rate"}, "traffic: rate in manual mode takes its levels from rates"),
        ({"mode": "range", "min_level": "8", "max_level": "2"}, "is below min_level"),
        ({"input_length": "131000", "output_length": "128"}, "exceed the model context"),
    ],
)
def test_bad_settings_are_named(flags: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_config(StressConfig, None, flags)


def test_the_list_given_sets_the_traffic() -> None:
    assert load_config(StressConfig, None, {"rates": ["2", "4"]}).traffic == "rate"
    quick = load_config(StressConfig, None, {"quick": True})
    assert (quick.traffic, quick.concurrencies, quick.point_duration) == (
        "concurrency",
        [1, 2, 4, 8],
        3.0,
    )
    assert load_config(StressConfig, None, {"mode": "auto"}).traffic == "concurrency"


def test_a_rate_point_is_a_timed_open_loop_run() -> None:
    from veeksha.experiment.microbench.points import point_scenario
    from veeksha.experiment.microbench.stress import _spec

    config = load_config(StressConfig, None, {"quick": True, "rates": ["2.5", "5"]})
    scenario = point_scenario(config, _spec(config, 1, 5.0))
    traffic = scenario.traffic_scheduler
    assert traffic.type == "rate"
    assert traffic.interval_generator.arrival_rate == 5.0  # type: ignore[union-attr]
    runtime = scenario.runtime
    assert (runtime.max_sessions, runtime.warmup_seconds, runtime.benchmark_timeout) == (-1, 1, 3)
    assert scenario.seed == config.seed + 1


def test_the_printed_table_has_the_answer_ttfc_only_for_a_reasoning_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from veeksha.experiment.microbench.cli import _stress_table

    point = analyse_point(4, _rows(), 2.0, "p", "PASS")
    _stress_table({"traffic": "concurrency", "points": [point]})
    assert "answer" not in capsys.readouterr().out
    rows = _rows()
    rows["answer_ttfc"] = [0.9, 0.3, 0.5, None]
    _stress_table({"traffic": "concurrency", "points": [analyse_point(4, rows, 2.0, "p", "PASS")]})
    out = capsys.readouterr().out
    assert "answer TTFC" in out
    assert "400.00" in out
