"""A value's statistical verdict: SLO intervals against thresholds, extra runs while undecided,
and unhealthy runs retried once, never judged."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from veeksha.experiment.capacity.judge import Judgement, judge
from veeksha.experiment.capacity.measure import ProbeRun, RunRequest, measure_value
from veeksha.experiment.capacity.search import FAIL, PASS, UNDECIDED, UNHEALTHY
from veeksha.scenario.models import SLO

P90_TTFC = SLO(name="p90 ttfc", metric="ttfc", percentile=0.9, value=0.1)
P50_E2E = SLO(name="p50 e2e", metric="e2e", percentile=0.5, value=1.0)


def sample(n: int, fast: float, slow: float, slow_share: float) -> np.ndarray:
    k = round(n * slow_share)
    return np.array([fast] * (n - k) + [slow] * k)


def test_an_slo_passes_fails_or_stays_undecided_by_its_interval() -> None:
    quick = sample(60, 0.05, 0.2, 0.0)
    assert judge([P90_TTFC], [[quick]], 0.95).verdict == PASS
    slow = sample(60, 0.05, 0.2, 0.3)
    assert judge([P90_TTFC], [[slow]], 0.95).verdict == FAIL
    # 10 % slow: the p90 sits on the edge, the interval straddles the threshold
    edge = sample(60, 0.05, 0.2, 0.1)
    judged = judge([P90_TTFC], [[edge]], 0.95)
    assert judged.verdict == UNDECIDED
    interval = judged.slos[0].interval
    assert interval.low <= 0.1 < interval.high
    # too few values to bound a p90 from above at 95 %, however fast
    assert judge([P90_TTFC], [[quick[:20]]], 0.95).verdict == UNDECIDED
    # nothing measured (the warmup took the whole run): nothing known
    assert judge([P90_TTFC], [[np.empty(0)]], 0.95).verdict == UNDECIDED
    # every request failed: each infinitely slow
    assert judge([P90_TTFC], [[np.full(5, np.inf)]], 0.95).verdict == FAIL


def test_runs_are_pooled_and_every_slo_must_pass() -> None:
    few = sample(20, 0.05, 0.2, 0.0)
    assert judge([P90_TTFC], [[few], [few], [few]], 0.95).verdict == PASS
    both = judge([P90_TTFC, P50_E2E], [[few, few + 2], [few, few + 2]], 0.95)
    assert [j.verdict for j in both.slos] == [PASS, FAIL]
    assert both.verdict == FAIL
    mixed = judge([P90_TTFC, P50_E2E], [[few[:10], few]], 0.95)
    assert [j.verdict for j in mixed.slos] == [UNDECIDED, PASS]
    assert mixed.verdict == UNDECIDED
    assert mixed.slos[0].to_dict()["threshold"] == 0.1


class FakeRunner:
    """Runs that are healthy or not, in order, each with ``per_run`` values of a server whose
    share of slow requests is ``slow_share``."""

    def __init__(self, health: Sequence[bool], per_run: int, slow_share: float) -> None:
        self.health = list(health)
        self.per_run = per_run
        self.slow_share = slow_share
        self.requests: list[RunRequest] = []

    def __call__(self, request: RunRequest) -> ProbeRun:
        self.requests.append(request)
        healthy = self.health.pop(0) if self.health else True
        n = self.per_run * 2**request.extension
        values = sample(n, 0.05, 0.2, self.slow_share)
        folder = Path(f"run{len(self.requests)}")
        if not healthy:
            return ProbeRun(request, folder, False, "health FAIL: generator_saturation")
        return ProbeRun(request, folder, True, "health PASS", (values,))


def judge_p90(runs: Sequence[ProbeRun]) -> Judgement:
    return judge([P90_TTFC], [run.samples for run in runs], 0.95)


def test_an_undecided_value_spends_more_requests_until_decided() -> None:
    runner = FakeRunner([], per_run=20, slow_share=0.0)  # 20 values cannot bound a p90
    result = measure_value(3, runner, judge_p90, max_extensions=2)
    assert result.verdict == PASS
    assert [r.extension for r in runner.requests] == [0, 1]  # 20 + 40 values: decided
    assert result.judgement is not None
    assert result.judgement.slos[0].interval.samples == 60


@pytest.mark.parametrize("max_extensions", [0, 1, 3])
def test_extensions_are_bounded_and_undecided_is_reported(max_extensions: int) -> None:
    runner = FakeRunner([], per_run=40, slow_share=0.1)  # always on the edge
    result = measure_value(3, runner, judge_p90, max_extensions)
    assert result.verdict == UNDECIDED
    assert [r.extension for r in runner.requests] == list(range(max_extensions + 1))


def test_an_unhealthy_run_is_retried_once_then_reported_never_judged() -> None:
    runner = FakeRunner([False, False], per_run=60, slow_share=0.0)
    result = measure_value(3, runner, judge_p90, max_extensions=2)
    assert result.verdict == UNHEALTHY
    assert result.judgement is None
    assert [(r.extension, r.retry) for r in runner.requests] == [(0, False), (0, True)]

    recovered = FakeRunner([False, True], per_run=60, slow_share=0.3)
    result = measure_value(3, recovered, judge_p90, max_extensions=2)
    assert result.verdict == FAIL
    assert [(r.extension, r.retry) for r in recovered.requests] == [(0, False), (0, True)]
    assert [run.healthy for run in result.runs] == [False, True]
    assert len(result.healthy_runs) == 1


def test_one_retry_per_value_and_healthy_runs_keep_their_verdict() -> None:
    # healthy but undecided, then the extension is unhealthy twice: still undecided
    runner = FakeRunner([True, False, False], per_run=20, slow_share=0.0)
    result = measure_value(3, runner, judge_p90, max_extensions=3)
    assert result.verdict == UNDECIDED
    assert [(r.extension, r.retry) for r in runner.requests] == [(0, False), (1, False), (1, True)]
    # a second unhealthy run later in the value gets no second retry
    runner = FakeRunner([False, True, False], per_run=20, slow_share=0.0)
    result = measure_value(3, runner, judge_p90, max_extensions=3)
    assert result.verdict == UNDECIDED
    assert len(runner.requests) == 3


def test_a_runs_samples_are_its_measured_values_and_failures(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from veeksha.experiment.capacity.probe import read_slo_samples

    table = pa.table(
        {
            "phase": ["warmup", "measured", "measured", "measured", "measured", "warmup"],
            "status": ["ok", "ok", "timeout", "ok", "cancelled", "error"],
            "sent_at": [0.0, 1.0, 1.0, 1.0, None, 0.0],
            "first_chunk_at": [9.0, 1.1, None, 1.3, None, None],
            "completed_at": [9.5, 1.5, 2.0, 1.5, 3.0, 0.5],
            "ttfc": [9.0, 0.1, None, 0.3, None, None],  # failed requests have no TTFC
            "tbc": pa.array(
                [[9.0], [0.01, 0.02], None, [0.03], None, None], pa.list_(pa.float64())
            ),
        }
    )
    pq.write_table(table, tmp_path / "requests.parquet")
    tbc = SLO(name="tbc", metric="tbc", percentile=0.5, value=1)
    ttfc, gaps, again = read_slo_samples(tmp_path, [P90_TTFC, tbc, P90_TTFC])
    # the measured timeout met no objective; the cancelled request was never sent
    assert ttfc.tolist() == [0.1, 0.3, float("inf")]
    assert gaps.tolist() == [0.01, 0.02, 0.03, float("inf")]
    assert again.tolist() == ttfc.tolist()
    (missing,) = read_slo_samples(tmp_path / "nowhere", [P90_TTFC])
    assert missing.size == 0
    # the counts a probe reports beside them: measured requests of every status, failed ones
    from veeksha.experiment.capacity.probe import read_probe_sample

    counted = read_probe_sample(tmp_path, [P90_TTFC])
    assert (counted.requests, counted.failed) == (4, 1)
    assert counted.values[0].tolist() == ttfc.tolist()
    assert (read_probe_sample(tmp_path / "nowhere", [P90_TTFC]).requests) == 0


def test_a_runs_samples_leave_tool_calls_out_and_take_named_phases(tmp_path: Path) -> None:
    # as the run's own SLOs: a tool row's call time is no TTFC, a named phase is measured
    import pyarrow as pa
    import pyarrow.parquet as pq

    from veeksha.experiment.capacity.probe import read_slo_samples

    table = pa.table(
        {
            "phase": ["warmup", "rate_4", "rate_4", "rate_8", "rate_8"],
            "status": ["ok", "ok", "ok", "ok", "error"],
            "sent_at": [0.0, 1.0, 1.0, 1.0, 1.0],
            "first_chunk_at": [9.0, 1.1, 6.0, 1.2, None],
            "completed_at": [9.5, 1.5, 6.0, 1.5, 2.0],
            "kind": ["llm", "llm", "tool", None, "llm"],
            "ttfc": [9.0, 0.1, 5.0, 0.2, None],
        }
    )
    pq.write_table(table, tmp_path / "requests.parquet")
    (ttfc,) = read_slo_samples(tmp_path, [P90_TTFC])
    assert ttfc.tolist() == [0.1, 0.2, float("inf")]
    from veeksha.experiment.capacity.probe import read_probe_sample

    counted = read_probe_sample(tmp_path, [P90_TTFC])
    assert (counted.requests, counted.failed) == (3, 1)  # the tool call is no request here


def test_a_runs_samples_judge_unfinished_requests_as_the_run_does(tmp_path: Path) -> None:
    # the run's own rule (evaluate.slo): a request cut off in flight longer than the bound
    # cannot have met it, one cut off sooner is left out (censored), and a timeout that got its
    # first chunk has a TTFC
    import pyarrow as pa
    import pyarrow.parquet as pq

    from veeksha.experiment.capacity.probe import read_probe_sample

    table = pa.table(
        {
            "phase": ["measured"] * 5,
            "status": ["ok", "timeout", "cancelled", "cancelled", "cancelled"],
            "sent_at": [1.0, 1.0, 2.0, 4.95, None],  # the last was cancelled before it was sent
            "first_chunk_at": [1.1, 1.4, None, None, None],
            "completed_at": [1.5, 6.0, 5.0, 5.0, 5.0],  # the cut-offs: 3 s and 0.05 s in flight
            "ttfc": [0.1, None, None, None, None],
            "e2e": [0.5, None, None, None, None],
        }
    )
    pq.write_table(table, tmp_path / "requests.parquet")
    e2e = SLO(name="e2e", metric="e2e", percentile=0.5, value=1)
    counted = read_probe_sample(tmp_path, [P90_TTFC, e2e])
    ttfc, e2es = (values.tolist() for values in counted.values)
    assert sorted(ttfc) == pytest.approx([0.1, 0.4, float("inf")])
    assert e2es == [0.5, float("inf"), float("inf")]
    assert (counted.requests, counted.failed) == (5, 3)


def test_failed_requests_break_a_percentile_they_reach() -> None:
    answered = sample(60, 0.05, 0.2, 0.0)
    shed = np.concatenate((answered, np.full(20, np.inf)))  # a quarter of the requests failed
    judged = judge([P90_TTFC], [[shed]], 0.95)
    assert judged.verdict == FAIL
    assert judged.slos[0].to_dict()["estimate"] is None  # infinite: no number in JSON
    assert judge([P90_TTFC], [[np.append(answered, np.inf)]], 0.95).verdict == PASS
