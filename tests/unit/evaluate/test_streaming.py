"""The progress line's percentiles: numpy's, bit for bit, without importing numpy.ma."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np

from veeksha.evaluate.stats import percentiles
from veeksha.evaluate.streaming import StreamingMetrics

QS = (0, 1, 33.3, 50, 90, 99, 99.9, 100)


def test_percentiles_equal_numpys() -> None:
    rng = np.random.default_rng(7)
    cases: list[list[float]] = [[0.25], [1.0, 2.0], [3.0, 3.0, 3.0]]
    for n in (5, 99, 100, 101, 2500):
        cases.append(list(rng.random(n) * 1e-3))  # TTFCs in seconds
        cases.append(list(rng.integers(0, 4, n).astype(float)))  # ties
        cases.append(list(rng.normal(0.0, 1e6, n)))
    for values in cases:
        assert percentiles(np.asarray(values), QS).tolist() == [
            float(np.percentile(values, q)) for q in QS
        ]


def test_percentiles_of_values_with_a_nan_are_nan() -> None:
    assert all(math.isnan(p) for p in percentiles(np.array([1.0, math.nan, 2.0]), (50, 99)))
    assert all(math.isnan(float(np.percentile([1.0, math.nan, 2.0], q))) for q in (50, 99))


def test_a_snapshot_does_not_import_numpy_ma() -> None:
    code = (
        "import sys\n"
        "from veeksha.evaluate.streaming import StreamingMetrics\n"
        "s = StreamingMetrics()\n"
        "s.add({'status': 'ok', 'ttfc': 0.05, 'e2e': 0.4})\n"
        "assert 'TTFC p50 50.0 ms' in s.snapshot()\n"
        "print('numpy.ma' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cancelled_rows_are_not_counted_as_completed_requests() -> None:
    # A stop cancels every node not yet sent: 223 rows at once. Was: "285 req (57.0 req/s,
    # 0 failed)" for an interval in which 62 requests completed.
    ticks = iter([0.0, 5.0, 10.0])
    streaming = StreamingMetrics(clock=lambda: next(ticks))
    for _ in range(62):
        streaming.add({"status": "ok", "ttfc": 0.05, "e2e": 0.4})
    streaming.add({"status": "error"})
    for _ in range(223):
        streaming.add({"status": "cancelled"})
    line = streaming.snapshot()
    assert line.startswith("last 5.0s: 63 req (12.6 req/s, 1 failed, 223 cancelled)"), line
    assert streaming.snapshot() == "last 5.0s: 0 req (0.0 req/s, 0 failed)"


def test_abandoned_rows_are_requests_but_not_failures() -> None:
    ticks = iter([0.0, 5.0, 10.0])
    streaming = StreamingMetrics(clock=lambda: next(ticks))
    for _ in range(8):
        streaming.add({"status": "ok", "ttfc": 0.05, "e2e": 0.4})
    streaming.add({"status": "timeout"})
    for _ in range(3):
        streaming.add({"status": "abandoned"})
    line = streaming.snapshot()
    assert line.startswith("last 5.0s: 12 req (2.4 req/s, 1 failed, 3 abandoned)"), line
    assert streaming.snapshot() == "last 5.0s: 0 req (0.0 req/s, 0 failed)"


def test_a_reasoning_models_answers_show_their_time_to_the_answer() -> None:
    ticks = iter([0.0, 5.0, 10.0])
    metrics = StreamingMetrics(clock=lambda: next(ticks))
    metrics.add({"status": "ok", "ttfc": 0.05, "e2e": 1.0, "answer_ttfc": 0.5})
    metrics.add({"status": "ok", "ttfc": 0.05, "e2e": 1.0, "answer_ttfc": 0.7})
    line = metrics.snapshot()
    assert "TTFC p50 50.0 ms p99 50.0 ms  answer p50 0.6 s p99 0.698 s  E2E" in line
    metrics.add({"status": "ok", "ttfc": 0.05, "e2e": 1.0, "answer_ttfc": None})
    assert "answer" not in metrics.snapshot()  # (a new interval; a model that does not think)
