"""Per-phase evaluation: each phase judged against its own rate, the run's arrival checks
combined from the phases', the warmup out of the headline."""

from __future__ import annotations

from tests.unit.evaluate.builders import (
    request,
    requests_table,
    scenario,
    session,
    sessions_table,
)
from veeksha.evaluate.run import compute_evaluation

PHASES = [
    {"name": "warmup", "duration": 1},
    {"name": "slow", "duration": 10, "interval": 0.5},
    {"name": "fast", "duration": 10, "interval": 0.25},
]
WINDOWS = [
    {"name": "warmup", "start": 0.0, "end": 1.0},
    {"name": "slow", "start": 1.0, "end": 11.0},
    {"name": "fast", "start": 11.0, "end": 21.0},
]


def tables(fast_gap: float):  # type: ignore[no-untyped-def]
    """Fixed gaps: warmup 0, 0.5; slow every 0.5 s from 1 s; fast every ``fast_gap`` from 11 s."""
    starts = [("warmup", 0.0), ("warmup", 0.5)]
    starts += [("slow", 1 + 0.5 * k) for k in range(20)]
    starts += [("fast", 11 + fast_gap * k) for k in range(int(10 / fast_gap))]
    requests = [
        request(i, ready=t, chunks=(t + 0.01, t + 0.02), phase=phase)
        for i, (phase, t) in enumerate(starts)
    ]
    sessions = [session(i, t, t + 0.02, phase=phase) for i, (phase, t) in enumerate(starts)]
    return requests_table(requests), sessions_table(sessions)


def evaluate(fast_gap: float):  # type: ignore[no-untyped-def]
    cfg = scenario(
        traffic_scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 1}},
        phases=PHASES,
        runtime={"max_sessions": -1, "benchmark_timeout": 60},
        evaluators=[
            {
                "type": "performance",
                "slos": [{"name": "ttfc", "metric": "ttfc", "percentile": 0.5, "value": 1}],
            }
        ],
    )
    requests, sessions = tables(fast_gap)
    return compute_evaluation(cfg, requests, sessions, {"phases": WINDOWS})


def test_each_phase_is_judged_against_its_own_rate() -> None:
    evaluation = evaluate(0.25)
    phases = evaluation.summary["phases"]
    assert list(phases) == ["slow", "fast"]  # the warmup has no entry
    assert phases["slow"]["requests"]["total"] == 20
    assert phases["fast"]["requests"]["total"] == 40
    assert phases["fast"]["window"] == {"start": 11.0, "end": 21.0}
    assert phases["slow"]["health"]["checks"]["arrival_distribution"] == "PASS"
    assert phases["fast"]["health"]["checks"]["arrival_distribution"] == "PASS"
    assert phases["fast"]["slos"]["all_met"] is True
    assert evaluation.summary["requests"]["total"] == 60  # the headline leaves the warmup out
    checks = {r.name: r for r in evaluation.health.results}
    assert checks["dispatch_rate"].status == "PASS"
    assert set(checks["dispatch_rate"].statistics) == {"slow", "fast"}


def test_a_phase_off_its_rate_fails_the_run() -> None:
    evaluation = evaluate(0.5)  # the fast phase ran at the slow phase's rate
    phases = evaluation.summary["phases"]
    assert phases["slow"]["health"]["checks"]["arrival_distribution"] == "PASS"
    assert phases["fast"]["health"]["checks"]["arrival_distribution"] == "FAIL"
    assert phases["fast"]["health"]["verdict"] == "FAIL"
    checks = {r.name: r for r in evaluation.health.results}
    assert checks["arrival_distribution"].status == "FAIL"
    assert checks["dispatch_rate"].status == "FAIL"
    assert "fast: FAIL" in checks["dispatch_rate"].detail


def test_a_session_crossing_a_boundary_is_counted_once_in_its_own_phase() -> None:
    # session 0 started in the warmup, its second turn released in `slow`; session 1 started
    # in `slow`, its second turn released in `fast`: both ended ok, both have their row
    requests, sessions = tables(0.25)
    crossing = [
        request(0, 1, parents=[0], ready=1.2, chunks=(1.21, 1.22), phase="slow"),
        request(2, 1, parents=[0], ready=11.1, chunks=(11.11, 11.12), phase="fast"),
    ]
    requests = requests_table(requests.to_pylist() + crossing)
    cfg = scenario(
        traffic_scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 1}},
        phases=PHASES,
        runtime={"max_sessions": -1, "benchmark_timeout": 60},
    )
    summary = compute_evaluation(cfg, requests, sessions, {"phases": WINDOWS}).summary
    run = summary["sessions"]
    assert (run["total"], run["ok"], run["incomplete"], run["unrecorded"]) == (60, 60, 0, 0)
    assert run["success_rate"] == 1.0
    for name, total in (("slow", 20), ("fast", 40)):
        own = summary["phases"][name]["sessions"]
        counts = (own["total"], own["ok"], own["incomplete"], own["unrecorded"])
        assert counts == (total, total, 0, 0)
    assert summary["phases"]["fast"]["requests"]["total"] == 41  # the later turn is fast's


def test_a_session_without_any_row_is_still_unrecorded_in_a_phase() -> None:
    requests, sessions = tables(0.25)
    orphan = request(999, ready=12.0, chunks=(12.01, 12.02), phase="fast")  # a killed run
    requests = requests_table([*requests.to_pylist(), orphan])
    cfg = scenario(
        traffic_scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 1}},
        phases=PHASES,
        runtime={"max_sessions": -1, "benchmark_timeout": 60},
    )
    summary = compute_evaluation(cfg, requests, sessions, {"phases": WINDOWS}).summary
    assert summary["phases"]["fast"]["sessions"]["unrecorded"] == 1
    assert summary["sessions"]["unrecorded"] == 1


def test_a_phase_leaves_tool_rows_out_as_the_run_does() -> None:
    requests, sessions = tables(0.25)
    tool = request(2, 1, parents=[0], ready=1.1, chunks=(1.3,), phase="slow") | {"kind": "tool"}
    tool["worker_id"] = None
    requests = requests_table([*requests.to_pylist(), tool])
    cfg = scenario(
        traffic_scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 1}},
        phases=PHASES,
        runtime={"max_sessions": -1, "benchmark_timeout": 60},
    )
    summary = compute_evaluation(cfg, requests, sessions, {"phases": WINDOWS}).summary
    assert summary["requests"]["total"] == 60  # the run: LLM requests only
    slow = summary["phases"]["slow"]
    assert slow["requests"]["total"] == 20
    assert slow["throughput"]["completed_requests"] == 20
    assert slow["latency"]["ttfc"]["count"] == 20
    phases_total = sum(p["requests"]["total"] for p in summary["phases"].values())
    assert phases_total == summary["requests"]["total"]


def test_plots_of_the_measured_rows_do_not_mark_the_warmup_they_leave_out() -> None:
    from veeksha.evaluate.run import plot_boundaries, warmup_window

    assert plot_boundaries(WINDOWS) == [("slow", 1.0), ("fast", 11.0)]  # (before: warmup at 0)
    assert warmup_window(WINDOWS) == (0.0, 1.0)  # shaded on server_timeline.png, which draws it
    assert warmup_window(WINDOWS[1:]) is None
