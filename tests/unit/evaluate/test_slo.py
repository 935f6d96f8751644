"""SLOs met and unmet, and goodput."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.evaluate.builders import request, requests_table, session, sessions_table
from veeksha.evaluate.sample import ArraySample
from veeksha.evaluate.slo import (
    SloResult,
    all_met,
    goodput,
    judge_slos,
    request_meets,
    slo_quantile,
)
from veeksha.evaluate.stats import quantiles
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


def _judge(rows: list[dict[str, object]], slos: list[SLO]) -> list[SloResult]:
    table = requests_table(rows)
    return judge_slos(slos, metric_digests(table, slos), table)


def test_slos_met_and_unmet() -> None:
    slos = [_slo("ttfc", 0.5, 0.25), _slo("ttfc", 1.0, 0.25), _slo("tbc", 0.75, 0.011)]
    results = _judge(ROWS[:3], slos)  # every request answered
    assert [r.met for r in results] == [True, False, True]
    assert results[0].observed == pytest.approx(0.2)
    assert results[1].observed == pytest.approx(0.3)
    assert results[2].samples == 5
    assert results[2].unfinished == 0
    assert results[0].to_dict()["threshold"] == 0.25
    assert all_met(results) is False
    assert all_met(results[:1]) is True
    assert all_met([]) is None


def test_an_slo_without_data_is_not_met() -> None:
    slos = [_slo("e2e", 0.99, 1.0)]
    results = _judge([], slos)
    assert results[0].observed is None
    assert results[0].met is False
    assert results[0].beyond_finished is False


# 8 answered requests, e2e 1..8 s, each with its first chunk 0.1 s after it was sent
FINISHED = [request(i, sent=0.0, chunks=(0.1, i + 1.0)) for i in range(8)]


def test_requests_that_never_finished_count_above_every_bound() -> None:
    # the answered ones meet p90 e2e <= 10 s (7.3 s); two timeouts cannot be left out
    slos = [_slo("e2e", 0.9, 10.0)]
    assert _judge(FINISHED, slos)[0].met is True
    timeouts = [request(i, sent=0.0, chunks=(), completed=5.0, status="timeout") for i in (8, 9)]
    (result,) = _judge(FINISHED + timeouts, slos)
    assert result.met is False
    assert result.beyond_finished is True  # virtual index 0.9 * 9 = 8.1: past the 8 finished
    assert result.observed is None
    assert (result.samples, result.unfinished) == (10, 2)
    assert result.to_dict()["observed"] is None
    # a lower percentile stays among the finished values, at the rank they push it to
    (p50,) = _judge(FINISHED + timeouts, [_slo("e2e", 0.5, 10.0)])
    assert p50.met is True
    assert p50.observed == pytest.approx(5.5)  # index 4.5 of 1..8, +inf, +inf (not 4.5 s)


def test_every_metric_counts_unfinished_requests_and_ttfc_keeps_a_first_chunk() -> None:
    unfinished = [
        request(8, sent=0.0, chunks=(0.2,), completed=3.0, status="timeout"),  # first chunk
        request(9, sent=0.0, chunks=(), completed=0.5, status="error"),
        request(10, sent=1.0, chunks=(), completed=1.5, status="cancelled"),  # cut off, 0.5 s
        request(11, chunks=(), status="cancelled", unsent=True),  # never sent: not asked
    ]
    slos = [_slo(m, 0.5, 100.0) for m in ("ttfc", "e2e", "tpot", "tbc", "normalized_e2e")]
    results = {r.metric: r for r in _judge(FINISHED + unfinished, slos)}
    # the cut-off was in flight 0.5 s, under the 100 s bound: it may have met it, left out
    assert {m: r.unfinished for m, r in results.items()} == {
        "ttfc": 1,  # the timeout got its first chunk: its TTFC, 0.2 s, is a value
        "e2e": 2,
        "tpot": 2,
        "tbc": 2,
        "normalized_e2e": 2,
    }
    assert results["ttfc"].samples == 10
    assert results["tbc"].samples == 8 + 2  # one gap per answered request, one per unfinished
    # ttfc: 8 × 0.1 s, 0.2 s, +inf: the p95 (index 8.55) is past the 9 values with a first
    # chunk; lower ones are among the answered ones
    (p95,) = _judge(FINISHED + unfinished, [_slo("ttfc", 0.95, 100.0)])
    assert p95.beyond_finished is True
    assert p95.met is False
    # (a bound of 0.6 s: the cut-off, 0.5 s in flight, stays out; at 0.15 s it would count)
    (p75,) = _judge(FINISHED + unfinished, [_slo("ttfc", 0.75, 0.6)])
    assert p75.observed == pytest.approx(0.1)  # index 6.75 of 10
    assert p75.met is True
    (p89,) = _judge(FINISHED + unfinished, [_slo("ttfc", 8 / 9, 0.6)])
    assert p89.observed == pytest.approx(0.2)  # index 8: the timeout's own TTFC
    (tight,) = _judge(FINISHED + unfinished, [_slo("ttfc", 0.85, 0.15)])
    assert (tight.unfinished, tight.beyond_finished) == (2, True)  # index 8.5 of 11


def test_a_request_cut_off_in_flight_counts_only_once_it_outlived_the_bound() -> None:
    # cut off by the run's stop 0.5 s and 2.5 s after it was sent, no first chunk: its TTFC
    # and E2E exceed those times, nothing more is known
    short = request(8, sent=1.0, chunks=(), completed=1.5, status="cancelled")
    long = request(9, sent=1.0, chunks=(), completed=3.5, status="cancelled")
    slos = [_slo("e2e", 0.5, 1.0), _slo("ttfc", 0.5, 1.0), _slo("tpot", 0.5, 1.0)]
    e2e, ttfc, tpot = _judge([*FINISHED, short, long], slos)
    assert (e2e.unfinished, ttfc.unfinished) == (1, 1)  # the 2.5 s one could not have met 1 s
    assert (e2e.samples, ttfc.samples) == (9, 9)  # the 0.5 s one is left out
    assert tpot.unfinished == 0  # a cut-off says nothing of the time per token
    (loose,) = _judge([*FINISHED, short, long], [_slo("e2e", 0.5, 5.0)])
    assert (loose.unfinished, loose.samples) == (0, 8)  # neither outlived 5 s
    # a failure counts whatever its time: the server gave up on it
    failed = request(10, sent=1.0, chunks=(), completed=1.2, status="error")
    (strict,) = _judge([*FINISHED, failed], [_slo("e2e", 0.5, 5.0)])
    assert strict.unfinished == 1
    # a request its user abandoned is cut off the same way (the server did not fail it)
    short, long = (dict(row, status="abandoned", error_kind="abandoned") for row in (short, long))
    e2e, ttfc, tpot = _judge([*FINISHED, short, long], slos)
    assert (e2e.unfinished, ttfc.unfinished, tpot.unfinished) == (1, 1, 0)
    assert (e2e.samples, ttfc.samples) == (9, 9)


def _shard_lost(session_id: int, dispatched: float, last_known: float) -> dict[str, object]:
    """A distributed run's row of a request in flight on a shard that was lost: no send, no
    answer, completed when it was last known in flight (veeksha.distributed.lost)."""
    row = request(session_id, dispatched=dispatched, chunks=(), status="error")
    row |= {"sent_at": None, "completed_at": last_known, "error_kind": "shard_lost"}
    return row


def test_a_request_lost_with_its_shard_counts_only_once_it_outlived_the_bound() -> None:
    # a shard lost (its engine killed) 0.2 s and 2.5 s after it dispatched them: their outcome
    # is unknown (the server did not fail them), as a cut-off's, so only the one that was
    # already in flight longer than the bound cannot have met it
    short, long = _shard_lost(8, 1.0, 1.2), _shard_lost(9, 1.0, 3.5)
    slos = [_slo("e2e", 0.99, 1.0), _slo("ttfc", 0.5, 1.0), _slo("tbc", 0.5, 1.0)]
    e2e, ttfc, tbc = _judge([*FINISHED, short, long], slos)
    assert (e2e.unfinished, ttfc.unfinished, tbc.unfinished) == (1, 1, 0)
    assert (e2e.samples, ttfc.samples) == (9, 9)  # the 0.2 s one is left out
    # the answered ones meet p99 E2E <= 10 s (7.9 s): a lost one counted as a failure (+inf)
    # would put the p99 past them
    (met,) = _judge([*FINISHED, short, long], [_slo("e2e", 0.99, 10.0)])
    assert (met.unfinished, met.samples, met.met) == (0, 8, True)


def test_a_request_lost_with_its_worker_is_judged_as_one_cut_off() -> None:
    # a worker process died 0.3 s and 2.5 s after it sent them (the pool sets sent_at to the
    # dispatch, completed_at to when it saw the death): veeksha lost them, the server did not
    # fail them
    lost = [
        request(8, sent=1.0, chunks=(), completed=1.3, status="error"),
        request(9, sent=1.0, chunks=(), completed=3.5, status="error"),
    ]
    for row in lost:
        row["error_kind"] = "worker_lost"
    e2e, tpot = _judge([*FINISHED, *lost], [_slo("e2e", 0.5, 1.0), _slo("tpot", 0.5, 1.0)])
    assert (e2e.unfinished, e2e.samples, tpot.unfinished) == (1, 9, 0)


@pytest.mark.parametrize("unfinished", [0, 1, 3, 7])
@pytest.mark.parametrize("percentile", [0.0, 0.3, 0.5, 0.9, 0.99, 1.0])
def test_slo_quantile_is_numpys_with_the_unfinished_as_infinity(
    unfinished: int, percentile: float
) -> None:
    finished = np.array([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0, 3.5, 8.0, 7.0])
    got = slo_quantile(ArraySample(finished), percentile, unfinished)
    whole = np.concatenate((finished, np.full(unfinished, 1e300)))  # (inf: numpy's lerp NaNs)
    expected = float(quantiles(whole, [percentile])[0])
    if expected > 1e299:
        assert got == math.inf
    else:
        assert got == pytest.approx(expected, rel=1e-12)
    assert slo_quantile(ArraySample(np.empty(0)), percentile, unfinished) == (
        None if unfinished == 0 else math.inf
    )


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


def _thinking(session_id: int, answer: float | None, status: str = "ok") -> dict[str, object]:
    """A reasoning model's request: its first chunk (thinking) at 0.1 s, its answer's at
    ``answer`` (None: it ran out of tokens while thinking)."""
    row = request(session_id, sent=0.0, chunks=(0.1, 0.2, 0.9), status=status)
    return row | {"reasoning_chunks": 2, "answer_ttfc": answer}


def test_an_answer_ttfc_slo_counts_the_answers_that_never_came_above_its_bound() -> None:
    slo = _slo("answer_ttfc", 0.5, 1.0)
    answered = [_thinking(i, 0.2 + 0.1 * i) for i in range(3)]  # 0.2, 0.3, 0.4 s
    (result,) = _judge(answered, [slo])
    assert (result.met, result.observed, result.unfinished) == (True, pytest.approx(0.3), 0)
    # two that thought until their output ran out, and one that failed: above every bound
    worse = [*answered, _thinking(3, None), _thinking(4, None), _thinking(5, None, "error")]
    (result,) = _judge(worse, [slo])
    assert (result.met, result.samples, result.unfinished) == (False, 6, 3)
    assert result.beyond_finished  # (the p50 falls among the 3 that never answered)
    table = requests_table(worse)
    assert request_meets(table, [slo]).tolist() == [True] * 3 + [False] * 3
    # against a model that does not think: no data, not met (as any SLO without data)
    (result,) = _judge(ROWS[:3], [slo])
    assert (result.met, result.observed, result.samples) == (False, None, 0)


def test_a_run_recorded_before_answer_ttfc_existed_is_judged_without_it() -> None:
    table = requests_table(ROWS).drop_columns(["answer_ttfc", "reasoning_chunks"])
    slos = [_slo("answer_ttfc", 0.5, 1.0), _slo("ttfc", 0.5, 0.25)]
    results = judge_slos(slos, metric_digests(table, slos), table)
    assert [(r.met, r.samples) for r in results] == [(False, 1), (True, 4)]  # (1: the error)
    assert request_meets(table, slos[:1]).tolist() == [True, True, True, False]
