"""SLOs met and unmet, and goodput."""

from __future__ import annotations

import pytest

from tests.unit.evaluate.builders import request, requests_table, session, sessions_table
from veeksha.evaluate.slo import all_met, goodput, judge_slos, request_meets
from veeksha.evaluate.summary import metric_digests
from veeksha.scenario.models import SLO


def _slo(metric: str, percentile: float, value: float) -> SLO:
    return SLO(name=f"{metric} p{percentile}", metric=metric, percentile=percentile, value=value)  # type: ignore[arg-type]


ROWS = [
    request(0, sent=0.0, chunks=(0.1, 0.11, 0.12)),  # ttfc 0.1, gaps 10 ms
    request(1, sent=0.0, chunks=(0.2, 0.21, 0.25)),  # ttfc 0.2, gaps 10, 40 ms
    request(2, sent=0.0, chunks=(0.3, 0.31)),  # ttfc 0.3, gap 10 ms
    request(3, sent=0.0, chunks=(), status="error"),
]


def test_slos_met_and_unmet() -> None:
    slos = [_slo("ttfc", 0.5, 0.25), _slo("ttfc", 1.0, 0.25), _slo("tbc", 0.75, 0.011)]
    results = judge_slos(slos, metric_digests(requests_table(ROWS), slos))
    assert [r.met for r in results] == [True, False, True]
    assert results[0].observed == pytest.approx(0.2)
    assert results[1].observed == pytest.approx(0.3)
    assert results[2].samples == 5
    assert results[0].to_dict()["threshold"] == 0.25
    assert all_met(results) is False
    assert all_met(results[:1]) is True
    assert all_met([]) is None


def test_an_slo_without_data_is_not_met() -> None:
    slos = [_slo("e2e", 0.99, 1.0)]
    results = judge_slos(slos, metric_digests(requests_table([]), slos))
    assert results[0].observed is None
    assert results[0].met is False


def test_request_meets_every_slo() -> None:
    table = requests_table(ROWS)
    assert request_meets(table, []).tolist() == [True, True, True, False]
    assert request_meets(table, [_slo("ttfc", 0.99, 0.25)]).tolist() == [True, True, False, False]
    # request 1 has 1 of 2 gaps within 20 ms: meets p50, not p90
    assert request_meets(table, [_slo("tbc", 0.5, 0.02)]).tolist() == [True, True, True, False]
    assert request_meets(table, [_slo("tbc", 0.9, 0.02)]).tolist() == [True, False, True, False]


def test_an_undefined_tpot_breaks_no_slo() -> None:
    table = requests_table([request(0, sent=0.0, chunks=(0.1,))])
    assert request_meets(table, [_slo("tpot", 0.99, 0.001)]).tolist() == [True]


def test_goodput_counts_requests_and_sessions_meeting_every_slo() -> None:
    rows = [*ROWS, request(1, 1, parents=[0], sent=0.0, chunks=(0.1, 0.5))]
    sessions = sessions_table(
        [
            session(0, 0.0, 0.5),
            session(1, 0.0, 0.5),
            session(2, 0.0, 0.5),
            session(3, 0, 1, "error"),
        ]
    )
    out = goodput(requests_table(rows), sessions, [_slo("ttfc", 0.99, 0.25)], (0.0, 2.0))
    assert out["requests"] == 3  # ttfc 0.1, 0.2 and 0.1 of node 1
    assert out["sessions"] == 2  # sessions 0 and 1; 2 is too slow, 3 failed
    assert out["requests_per_s"] == pytest.approx(1.5)
    assert out["sessions_per_s"] == pytest.approx(1.0)
    assert out["request_fraction"] == pytest.approx(3 / 5)
    assert goodput(requests_table([]), sessions_table([]), [], None)["requests_per_s"] is None
