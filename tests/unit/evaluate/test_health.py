"""Each health check passing and failing on hand-built tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.unit.evaluate.builders import (
    request,
    requests_table,
    scenario,
    session,
    sessions_table,
)
from veeksha.evaluate.arrival_checks import ARRIVAL_DISTRIBUTION, DISPATCH_RATE
from veeksha.evaluate.checks import HEALTH_CHECKS, run_health_checks
from veeksha.evaluate.generator_checks import CPU_WAIT_NOTE, GENERATOR_SATURATION, LIFECYCLE_DELAYS
from veeksha.evaluate.health import FAIL, PASS, SKIP, WARN, HealthInput
from veeksha.evaluate.request_checks import (
    DEPENDENCIES,
    OUTPUT_LENGTH,
    PROMPT_LENGTH,
    dependency_lateness,
    first_rows,
)
from veeksha.evaluate.stats import measured_rows
from veeksha.scenario.models import Scenario


def _input(
    rows: list[dict[str, Any]],
    sessions: list[dict[str, Any]] | None = None,
    scen: Scenario | None = None,
    run_info: dict[str, Any] | None = None,
) -> HealthInput:
    table = requests_table(rows)
    return HealthInput(
        table,
        measured_rows(table),
        sessions_table(sessions or []),
        scen or scenario(),
        run_info or {},
    )


def _arrivals(starts: np.ndarray, scen: Scenario | None = None) -> HealthInput:
    rows = [request(i, ready=float(t), chunks=(t + 0.05,)) for i, t in enumerate(starts)]
    sessions = [session(i, float(t), float(t) + 0.05) for i, t in enumerate(starts)]
    return _input(rows, sessions, scen)


def _poisson_starts(rate: float, n: int = 300, seed: int = 1) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


def test_arrivals_at_the_configured_rate_pass() -> None:
    data = _arrivals(_poisson_starts(10.0))
    rate = DISPATCH_RATE(data)
    assert rate.status == PASS, rate.detail
    assert rate.statistics["configured_rate"] == pytest.approx(10.0)
    assert rate.statistics["started_rate"] == pytest.approx(10.0, rel=0.15)
    ks = ARRIVAL_DISTRIBUTION(data)
    assert ks.status == PASS, ks.detail
    assert ks.statistics["p_value"] >= 0.01


def test_a_too_slow_rate_fails_the_rate_check() -> None:
    result = DISPATCH_RATE(_arrivals(_poisson_starts(5.0)))  # configured 10/s
    assert result.status == FAIL
    assert result.statistics["started_relative_error"] == pytest.approx(0.5, abs=0.1)


def test_late_sends_fail_the_rate_check_even_when_starts_are_on_time() -> None:
    starts = _poisson_starts(10.0)
    rows = [
        request(i, ready=float(t), sent=float(t) * 1.5, chunks=(t * 1.5 + 0.01,))
        for i, t in enumerate(starts)
    ]
    sessions = [session(i, float(t), float(t) * 1.5 + 0.01) for i, t in enumerate(starts)]
    result = DISPATCH_RATE(_input(rows, sessions))
    assert result.status == FAIL
    assert result.statistics["started_relative_error"] < 0.15
    assert result.statistics["sent_relative_error"] > 0.3


def test_a_small_sample_is_judged_against_sampling_noise() -> None:
    starts = np.array([0.0, 0.05, 0.1, 0.2, 0.25, 0.3, 0.4, 0.45])  # 7 gaps: 15.6/s vs 10/s
    result = DISPATCH_RATE(_arrivals(starts))
    assert result.statistics["allowed_relative_error"] > 0.9
    assert result.status == PASS


def test_ks_mismatch_fails() -> None:
    starts = np.arange(300) * 0.1  # a perfect 10/s rate, but no exponential gaps
    data = _arrivals(starts)
    assert DISPATCH_RATE(data).status == PASS
    ks = ARRIVAL_DISTRIBUTION(data)
    assert ks.status == FAIL
    assert ks.statistics["p_value"] < 0.01


def test_gamma_arrivals_are_tested_against_gamma() -> None:
    scen = scenario(
        traffic_scheduler={
            "type": "rate",
            "interval_generator": {"type": "gamma", "arrival_rate": 10, "cv": 0.25},
        }
    )
    gaps = np.random.default_rng(3).gamma(16.0, 1 / 160.0, 300)
    assert ARRIVAL_DISTRIBUTION(_arrivals(np.cumsum(gaps), scen)).status == PASS
    exponential = _poisson_starts(10.0)
    assert ARRIVAL_DISTRIBUTION(_arrivals(exponential, scen)).status == FAIL


def test_fixed_interval_deviation() -> None:
    scen = scenario(
        traffic_scheduler={"type": "rate", "interval_generator": {"type": "fixed", "interval": 0.1}}
    )
    starts = np.arange(20) * 0.1
    assert ARRIVAL_DISTRIBUTION(_arrivals(starts, scen)).status == PASS
    starts[10:] += 0.02  # one gap 20 ms long
    result = ARRIVAL_DISTRIBUTION(_arrivals(starts, scen))
    assert result.status == FAIL
    assert result.statistics["max_deviation_s"] == pytest.approx(0.02)


def test_arrival_checks_skip_for_concurrent_traffic_and_few_sessions() -> None:
    scen = scenario(traffic_scheduler={"type": "concurrent", "target_concurrent_sessions": 2})
    data = _arrivals(_poisson_starts(10.0), scen)
    assert DISPATCH_RATE(data).status == SKIP
    assert ARRIVAL_DISTRIBUTION(data).status == SKIP
    assert DISPATCH_RATE(_arrivals(np.array([0.0, 0.1]))).status == SKIP


def test_session_starts_fall_back_to_roots_without_session_rows() -> None:
    starts = _poisson_starts(10.0)
    rows = [request(i, ready=float(t), chunks=(t + 0.05,)) for i, t in enumerate(starts)]
    result = DISPATCH_RATE(_input(rows))
    assert result.status == PASS
    assert result.statistics["sessions"] == len(starts)


def _chain(child_dispatched: float, *, wait: float = 0.5) -> list[dict[str, Any]]:
    parent = request(0, 0, ready=0.0, chunks=(0.1, 1.0))  # completes at 1.0
    child = request(
        0, 1, parents=[0], ready=1.0 + wait, wait=wait, dispatched=child_dispatched,
        chunks=(child_dispatched + 0.1, child_dispatched + 0.2),
        prompt_total=20 + 2 + 20,  # its history: the parent's prompt and 2-token answer
    )  # fmt: skip
    return [parent, child]


def test_dependencies_pass_when_order_is_kept() -> None:
    result = DEPENDENCIES(_input(_chain(1.5005)))
    assert result.status == PASS
    assert result.statistics["violations"] == 0
    assert result.statistics["lateness"]["max"] == pytest.approx(0.0005)


def test_an_injected_dependency_violation_fails() -> None:
    rows = _chain(1.2)  # dispatched before parent completion (1.0) + wait (0.5)
    result = DEPENDENCIES(_input(rows))
    assert result.status == FAIL
    assert result.statistics["violations"] == 1
    assert result.statistics["lateness"]["min"] == pytest.approx(-0.3)


def test_a_child_of_a_never_completed_parent_is_a_violation() -> None:
    parent = request(0, 0, unsent=True, status="cancelled")
    child = request(0, 1, parents=[0], ready=1.0, chunks=(1.1,))
    result = DEPENDENCIES(_input([parent, child]))
    assert result.status == FAIL
    assert result.statistics["parent_not_completed"] == 1


def test_a_missing_parent_row_is_not_a_violation() -> None:
    child = request(0, 1, parents=[0], ready=1.0, chunks=(1.1,))
    result = DEPENDENCIES(_input([child]))
    assert result.status == PASS
    assert result.statistics["parents_missing"] == 1


def test_a_request_later_than_the_threshold_fails() -> None:
    result = DEPENDENCIES(_input(_chain(7.0)))  # 5.5 s after it became ready
    assert result.status == FAIL
    assert result.statistics["late"] == 1


def test_a_turn_held_by_its_own_time_is_not_late_and_one_sent_before_it_is_early() -> None:
    # the parent answered at 1.0 s, think time 0.5 s; the child's trace row maps to 7.0 s
    held = _chain(7.0)
    held[1]["ready_at"] = held[1]["not_before"] = 7.0
    result = DEPENDENCIES(_input(held))
    assert result.status == PASS, result.detail
    assert result.statistics["late"] == 0
    assert result.statistics["lateness"]["max"] == pytest.approx(0.0)
    # sent 4 ms after its time: late by 4 ms, not by the 5.5 s its time imposed
    later = _chain(7.004)
    later[1]["not_before"] = 7.0
    assert DEPENDENCIES(_input(later)).statistics["lateness"]["max"] == pytest.approx(0.004)
    # dispatched after its parent's answer but before its own time: a violation
    early = _chain(3.0)
    early[1]["not_before"] = 7.0
    result = DEPENDENCIES(_input(early))
    assert result.status == FAIL
    assert result.statistics["violations"] == 1
    assert result.statistics["lateness"]["min"] == pytest.approx(-4.0)


def _reprompted_parent(child_dispatched: float) -> list[dict[str, Any]]:
    """A parent whose first answer (ending at 1.0) failed validation and was re-prompted at 1.0
    (its answer at 7.0 s), and its child (think time 0.5 s): ready at 7.5."""
    first = request(0, 0, ready=0.0, chunks=(0.1, 1.0))
    again = request(0, 0, ready=1.0, chunks=(1.1, 7.0), request_id=1)
    again["attempt"] = 1
    child = request(
        0, 1, parents=[0], ready=7.5, wait=0.5, dispatched=child_dispatched,
        chunks=(child_dispatched + 0.1,), request_id=2,
    )  # fmt: skip
    return [first | {"attempt": 0}, again, child | {"attempt": 0}]


def test_a_reprompted_parent_releases_its_children_at_its_last_attempts_end() -> None:
    """A node is done at its last attempt: its child, sent on time at 7.5, is not 6 s late
    (its first attempt's end, 1.0, + 0.5), nor is the re-prompt itself (ready when the first
    answer ended, at 1.0) late by the first attempt's 1 s; one sent after the first answer but
    before the re-prompt ended is a violation."""
    result = DEPENDENCIES(_input(_reprompted_parent(7.5)))
    assert result.status == PASS, result.detail
    assert result.statistics["violations"] == 0
    assert result.statistics["lateness"]["max"] == pytest.approx(0.0)
    result = DEPENDENCIES(_input(_reprompted_parent(2.0)))
    assert result.status == FAIL
    assert result.statistics["violations"] == 1
    assert result.statistics["lateness"]["min"] == pytest.approx(-5.5)
    # a re-prompt sent before the attempt it follows ended
    rows = _reprompted_parent(7.5)
    rows[1]["dispatched_at"] = 0.5
    assert DEPENDENCIES(_input(rows)).statistics["violations"] == 1


def test_the_wait_for_a_capped_clients_slot_is_not_lateness() -> None:
    """A child ready at 1.5 that waited 6 s for its client's slot (max_in_flight: queue_wait)
    and was sent 1 ms after the slot came: 1 ms late, not 6 s (the cap held it, not the
    generator)."""
    rows = _chain(7.501)
    rows[1]["queue_wait"] = 6.0
    result = DEPENDENCIES(_input(rows))
    assert result.status == PASS, result.detail
    assert result.statistics["late"] == 0
    assert result.statistics["lateness"]["max"] == pytest.approx(0.001)


def _lateness_with_attempts_by_hand(
    rows: list[dict[str, Any]],
) -> tuple[list[float], dict[str, int]]:
    """``dependency_lateness`` with re-prompts and slot waits, row by row: a parent's row is
    its node's last attempt; an attempt after the first is measured from the end of the one
    before it; lateness less the queue_wait."""
    last: dict[tuple[int, int], dict[str, Any]] = {}
    by_attempt = {(r["session_id"], r["node_id"], r["attempt"]): r for r in rows}
    for r in rows:
        key = (r["session_id"], r["node_id"])
        if key not in last or last[key]["attempt"] < r["attempt"]:
            last[key] = r
    firsts = [r | {"queue_wait": 0.0} for r in rows if r["attempt"] == 0]
    counts = {"dispatched": 0, "violations": 0, "parent_not_completed": 0, "parents_missing": 0}
    lateness = []
    for r in rows:
        if np.isnan(r["dispatched_at"]):
            continue
        counts["dispatched"] += 1
        if r["attempt"]:
            earliest = by_attempt[(r["session_id"], r["node_id"], r["attempt"] - 1)]["completed_at"]
        elif not r["parents"]:
            earliest = r["ready_at"]
        else:
            found = [last.get((r["session_id"], p)) for p in r["parents"]]
            done = [f["completed_at"] for f in found if f is not None]
            done = [d for d in done if not np.isnan(d)]
            earliest = max(done) + r["wait_after_ready"] if done else np.nan
            if any(f is None for f in found):
                counts["parents_missing"] += 1
            elif len(done) < len(found):
                counts["parent_not_completed"] += 1
        if r["dispatched_at"] < earliest - 1e-6:
            counts["violations"] += 1
        if not np.isnan(r["dispatched_at"] - earliest):
            lateness.append(r["dispatched_at"] - earliest - r["queue_wait"])
    counts["violations"] += counts["parent_not_completed"]
    assert firsts  # (every node has its first attempt)
    return lateness, counts


def test_dependency_lateness_with_reprompts_and_slot_waits_matches_a_row_by_row_count() -> None:
    rng = np.random.default_rng(11)
    rows: list[dict[str, Any]] = []
    for session_id in range(300):
        size = int(rng.integers(1, 6))
        for node in range(size):
            picks = rng.integers(0, node, int(rng.integers(0, 3))) if node else []
            parents = sorted({int(p) for p in picks})
            if node and not parents and rng.random() < 0.7:
                parents = [node - 1]
            for attempt in range(int(rng.choice([1, 1, 2, 3]))):
                rows.append(
                    {
                        "session_id": session_id,
                        "node_id": node,
                        "attempt": attempt,
                        "parents": parents,
                        "ready_at": float(rng.random() * 10),
                        "wait_after_ready": float(rng.choice([0.0, 0.25])),
                        "not_before": np.nan,
                        "queue_wait": float(rng.choice([0.0, 0.0, 0.5])),
                        "dispatched_at": np.nan
                        if rng.random() < 0.05
                        else float(rng.random() * 12),
                        "completed_at": np.nan if rng.random() < 0.05 else float(rng.random() * 12),
                    }
                )
    rng.shuffle(rows)  # type: ignore[arg-type]
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    lateness, counts = dependency_lateness(table)
    expected_lateness, expected_counts = _lateness_with_attempts_by_hand(rows)
    assert counts == expected_counts
    assert counts["parent_not_completed"] > 0
    assert sorted(lateness.tolist()) == pytest.approx(sorted(expected_lateness))


def test_prompt_length_within_and_beyond_tolerance() -> None:
    ok = [request(i, prompt_new=100 + i % 3, target_prompt=100, prompt_total=107) for i in range(5)]
    result = PROMPT_LENGTH(_input(ok))
    assert result.status == PASS
    assert result.statistics["server"]["template_offset"] == pytest.approx(7)
    off = [*ok, request(9, prompt_new=130, target_prompt=100, prompt_total=137)]
    result = PROMPT_LENGTH(_input(off))
    assert result.status == FAIL
    assert result.statistics["outside_tolerance"] == 1
    assert result.statistics["max_abs_deviation"] == 30


def test_prompt_length_uses_the_servers_count() -> None:
    rows = [request(i, prompt_new=100, target_prompt=100, prompt_total=100) for i in range(5)]
    rows.append(request(9, prompt_new=100, target_prompt=100, prompt_total=160))
    result = PROMPT_LENGTH(_input(rows))
    assert result.status == FAIL
    assert result.statistics["outside_tolerance"] == 0
    assert result.statistics["server"]["outside_tolerance"] == 1


def test_prompt_length_names_each_comparison_with_its_own_maximum() -> None:
    rows = [request(i, prompt_new=100, target_prompt=100, prompt_total=100) for i in range(4)]
    info = {"server_tokenizer": {"verification": {"sampled": 3, "deviations": [0, 40, -2]}}}
    result = PROMPT_LENGTH(_input(rows, run_info=info))
    assert result.status == FAIL
    assert result.detail == (
        "server /tokenize vs target: 1 of 3 off by more than 15 tokens (max 40); "
        "client count vs target: 0 of 4 (max 0); server usage vs expected: 0 of 4 (max 0)"
    )
    assert result.statistics["server_tokenize"]["outside_tolerance"] == 1
    assert result.statistics["max_abs_deviation"] == 0  # (the client's, as before)


def test_prompt_length_checks_each_turn_against_its_parents_usage() -> None:
    """A child's server total is its parent's total, the parent's answer and its own new part,
    plus a constant per turn (here 4 template tokens); a turn off by 30 is caught."""

    def session(sid: int, extra: int = 0) -> list[dict[str, Any]]:
        root = request(sid, 0, prompt_new=100, target_prompt=100, prompt_total=103)
        root["output_tokens"] = 10  # (the row's column)
        child = request(sid, 1, parents=[0], prompt_new=50, target_prompt=50)
        child["prompt_tokens_total"] = 103 + 10 + 50 + 4 + extra
        return [root, child]

    rows = [row for sid in range(5) for row in session(sid)]
    result = PROMPT_LENGTH(_input(rows))
    assert result.status == PASS
    assert result.statistics["server"]["turn_offset"] == 4
    assert result.statistics["server"]["turns"] == 5
    result = PROMPT_LENGTH(_input([*rows, *session(9, extra=30)]))
    assert result.status == FAIL
    assert result.detail.startswith(
        "server usage vs expected, less a template of 3 tokens a prompt and 4 a turn: "
        "1 of 12 off by more than 15 tokens (max 30)"
    )


def test_prompt_length_leaves_requests_with_images_out_of_the_servers_count() -> None:
    """A root with images: the server counts its image tokens too (here 160 more), which no
    tokenizer here knows, so it is not compared; its child, whose history holds the images,
    is (they are in the parent's count too); a child with images of its own is not."""

    def session(sid: int, own: bool = False) -> list[dict[str, Any]]:
        root = request(sid, 0, prompt_new=100, target_prompt=100, prompt_total=260)
        root["images"], root["output_tokens"] = 1, 10
        child = request(sid, 1, parents=[0], prompt_new=50, target_prompt=50)
        child["prompt_tokens_total"] = 260 + 10 + 50 + (160 if own else 0)
        if own:
            child["images"] = 1
        return [root, child]

    rows = [row for sid in range(4) for row in session(sid)] + session(8, own=True)
    rows.append(request(9, prompt_new=100, target_prompt=100, prompt_total=100))
    result = PROMPT_LENGTH(_input(rows))
    assert result.status == PASS, result.detail
    assert result.statistics["server"]["roots"] == 1
    assert result.statistics["server"]["turns"] == 4
    assert result.statistics["image_requests"] == 6
    assert result.detail.endswith(
        "; 6 requests with images not held to the server's count (it counts their image tokens too)"
    )


def _fixed_roots(total: int, n: int = 6) -> list[dict[str, Any]]:
    """``n`` roots of 200 target tokens each, which the server counts as ``total``."""
    return [request(i, prompt_new=200, target_prompt=200, prompt_total=total) for i in range(n)]


def test_prompt_length_cannot_take_a_share_of_alike_prompts_for_a_template() -> None:
    """Prompts of one length (200) that the server counts 1.5 times (300, ±3): another
    tokenizer than the client's, or a 100-token chat template? The old check took the median
    (100) away as a template and passed; a share of the prompt that large would stay within
    the tolerance on prompts this alike, so the check says it cannot tell (WARN)."""
    rows = _fixed_roots(300)
    for i, row in enumerate(rows):
        row["prompt_tokens_total"] += (i % 3 - 1) * 3
    result = PROMPT_LENGTH(_input(rows))
    assert result.status == WARN, result.detail
    assert result.statistics["server"]["offset_undecided"] is True
    assert result.statistics["server"]["template_offset"] == pytest.approx(100)
    assert result.detail == (
        "client count vs target: 0 of 6 (max 0); server usage vs expected, less a template of "
        "100 tokens a prompt: 0 of 6 (max 3); undecided: the server counts every prompt about "
        "100 tokens more than sent (50% of its median target), a chat template's or another "
        "tokenizer's than the client's: prompts of so alike lengths cannot tell (vary "
        "body_length_generator, or use client.tokenizer type server)"
    )


def test_prompt_length_takes_a_template_away_where_a_share_would_show() -> None:
    """Prompts of 100 to 400 tokens with 30 template tokens each: a share of the prompt as
    large (12% of the median 250) would leave the tolerance at the ends (by 18), so the
    constant is a template (PASS, named); the same prompts counted 1.5 times fail at the
    ends."""
    rows = [
        request(i, prompt_new=t, target_prompt=t, prompt_total=t + 30)
        for i, t in enumerate((100, 175, 250, 325, 400))
    ]
    result = PROMPT_LENGTH(_input(rows))
    assert result.status == PASS, result.detail
    assert "offset_undecided" not in result.statistics["server"]
    assert result.detail.endswith(
        "server usage vs expected, less a template of 30 tokens a prompt: 0 of 5 (max 0)"
    )
    for row in rows:
        row["prompt_tokens_total"] = row["target_prompt_tokens"] * 3 // 2
    result = PROMPT_LENGTH(_input(rows))
    assert result.status == FAIL
    assert result.statistics["server"]["max_abs_deviation"] == 75


def test_prompt_length_takes_a_template_away_where_the_servers_tokenizer_counted_the_prompts() -> (
    None
):
    """Prompts of one length with 100 template tokens, and the server's /tokenize sample
    counting the prompts exact: their lengths are the server's, the offset its template."""
    info = {"server_tokenizer": {"verification": {"sampled": 4, "deviations": [0, 0, 1, 0]}}}
    result = PROMPT_LENGTH(_input(_fixed_roots(300), run_info=info))
    assert result.status == PASS, result.detail
    assert "less a template of 100 tokens a prompt: 0 of 6 (max 0)" in result.detail


def _measured(prompt: int, turn: int) -> dict[str, Any]:
    """run_info with a chat template measured on the server's /tokenize at set-up."""
    template = {"prompt_tokens": prompt, "turn_tokens": turn, "counts": [], "contents": []}
    return {"server_tokenizer": {"chat_template": template}}


def test_prompt_length_takes_the_measured_template_away_exactly() -> None:
    """Prompts of one length with a 100-token template: the estimate could not tell it from
    another tokenizer (WARN, undecided); measured on the server's /tokenize it is known, and
    exactly that is taken away (PASS, named as measured)."""
    rows = _fixed_roots(300)
    result = PROMPT_LENGTH(_input(rows, run_info=_measured(100, 4)))
    assert result.status == PASS, result.detail
    assert result.detail.endswith(
        "server usage vs expected, less the measured template of 100 tokens a prompt: "
        "0 of 6 (max 0)"
    )
    assert result.statistics["server"]["template_measured"] is True
    assert "offset_undecided" not in result.statistics["server"]


def test_prompt_length_fails_usage_beyond_the_measured_template() -> None:
    """The server counts every prompt 100 tokens over its target but its template is 9: the
    rest is another tokenizer's (or prompts sized wrong). The median estimate took all 100
    away; the measured template leaves 91 in every request (FAIL)."""
    result = PROMPT_LENGTH(_input(_fixed_roots(300), run_info=_measured(9, 10)))
    assert result.status == FAIL, result.detail
    assert result.detail.startswith(
        "server usage vs expected, less the measured template of 9 tokens a prompt: "
        "6 of 6 off by more than 15 tokens (max 91)"
    )
    # turns too: a child counted its parent's conversation, answer, target and 30, not 10
    root = request(0, 0, prompt_new=100, target_prompt=100, prompt_total=109)
    root["output_tokens"] = 10
    child = request(0, 1, parents=[0], prompt_new=50, target_prompt=50)
    child["prompt_tokens_total"] = 109 + 10 + 50 + 30
    result = PROMPT_LENGTH(_input([root, child], run_info=_measured(9, 10)))
    assert result.status == FAIL, result.detail
    assert result.detail.startswith(
        "server usage vs expected, less the measured template of 9 tokens a prompt and 10 a "
        "turn: 1 of 2 off by more than 15 tokens (max 20)"
    )
    # (the completions API has no template: nothing measured is taken from its rows)
    completions = scenario(client={"type": "openai_completions"})
    rows = _fixed_roots(200)
    result = PROMPT_LENGTH(_input(rows, scen=completions, run_info=_measured(9, 10)))
    assert result.status == PASS, result.detail
    assert "template" not in result.detail


_TWO_SERVERS = [
    {"name": "x", "api_base": "http://h:1/v1", "model": "m", "tokenizer": {"type": "server"}},
    {"name": "y", "api_base": "http://h:2/v1", "model": "m", "tokenizer": {"type": "server"}},
]


def _info(clients: list[str], prompt: int, turn: int) -> dict[str, Any]:
    """A server tokenizer's facts: its clients, its measured template, a clean sample."""
    template = {"prompt_tokens": prompt, "turn_tokens": turn, "counts": [], "contents": []}
    return {
        "clients": clients,
        "chat_template": template,
        "verification": {"sampled": 2, "deviations": [0, 0]},
    }


def test_prompt_length_takes_each_clients_measured_template_away() -> None:
    """Two chat clients, each on a server of its own tokenizer (templates of 9 and 40 tokens
    a prompt): each client's rows lose their own server's template (was: the first's, from
    every row: the second's off by 31)."""
    rows = [
        request(i, prompt_new=t, target_prompt=t, prompt_total=t + (40 if i % 2 else 9))
        | {"client": "y" if i % 2 else "x"}
        for i, t in enumerate((50, 60, 400, 410, 1000, 1010))
    ]
    infos = [_info(["x"], 9, 10), _info(["y"], 40, 12)]
    run_info = {"server_tokenizer": infos[0], "server_tokenizers": infos}
    result = PROMPT_LENGTH(_input(rows, scen=scenario(clients=_TWO_SERVERS), run_info=run_info))
    assert result.status == PASS, result.detail
    assert "server usage vs expected, less each client's measured template: 0 of 6" in (
        result.detail
    )
    assert "server /tokenize vs target: 0 of 4 (max 0)" in result.detail
    assert result.statistics["server"]["template_measured"] is True
    assert result.statistics["server"]["max_abs_deviation"] == 0
    # a chat client whose template nobody measured: no measured one is taken from anyone
    # (the estimate is, from every chat row, as without any)
    only_x = {"server_tokenizer": infos[0]}
    result = PROMPT_LENGTH(_input(rows, scen=scenario(clients=_TWO_SERVERS), run_info=only_x))
    assert result.statistics["server"]["template_measured"] is False


def test_prompt_length_undecided_names_the_clients_tokenizer_key() -> None:
    rows = _fixed_roots(300)
    result = PROMPT_LENGTH(_input(rows, scen=scenario(clients=[{"name": "x"}])))
    assert result.status == WARN, result.detail
    assert result.detail.endswith(
        "(vary body_length_generator, or use the clients' tokenizer type server)"
    )
    result = PROMPT_LENGTH(_input(rows))
    assert result.detail.endswith("or use client.tokenizer type server)")


def test_prompt_length_compares_a_turn_only_with_a_parent_of_its_tokenizer() -> None:
    """A child on client y whose parent went to x, another tokenizer (another server): y's
    server counts the carried history in its own tokens, not x's total, so the turn is not
    compared (was: compared, and failed by the tokenizers' difference); a turn after its own
    tokenizer's parent still is."""
    root = request(0, 0, prompt_new=100, target_prompt=100, prompt_total=100) | {"client": "x"}
    root["output_tokens"] = 10
    across = request(0, 1, parents=[0], prompt_new=50, target_prompt=50) | {"client": "y"}
    across["prompt_tokens_total"] = 2 * (100 + 10) + 50  # (y counts x's words twice over)
    # (the completions API: no template taken away, so a turn's difference shows whole)
    plain = [client | {"type": "openai_completions"} for client in _TWO_SERVERS]
    scen = scenario(clients=plain)
    result = PROMPT_LENGTH(_input([root, across], scen=scen))
    assert result.status == PASS, result.detail
    assert result.statistics["server"]["turns"] == 0
    within = request(0, 1, parents=[0], prompt_new=50, target_prompt=50) | {"client": "x"}
    within["prompt_tokens_total"] = 2 * (100 + 10) + 50
    result = PROMPT_LENGTH(_input([root, within], scen=scen))
    assert result.status == FAIL, result.detail
    assert result.statistics["server"]["turns"] == 1


def test_prompt_length_takes_no_template_away_from_the_completions_api() -> None:
    """The completions API applies no chat template: prompts of one length that the server
    counts 1.5 times fail (the old check took the 100 away as a template and passed); a
    chat client's rows beside them still have theirs taken away."""
    completions = scenario(client={"type": "openai_completions"})
    result = PROMPT_LENGTH(_input(_fixed_roots(300), scen=completions))
    assert result.status == FAIL, result.detail
    assert result.detail.startswith(
        "server usage vs expected: 6 of 6 off by more than 15 tokens (max 100)"
    )
    assert result.statistics["server"]["template_offset"] is None
    assert result.statistics["server"]["completions_requests"] == 6
    both = scenario(
        clients=[
            {"name": "chat", "type": "openai_chat_completions"},
            {"name": "plain", "type": "openai_completions"},
        ]
    )
    rows = [
        request(i, prompt_new=t, target_prompt=t, prompt_total=t + (20 if i % 2 else 1))
        | {"client": "chat" if i % 2 else "plain"}
        for i, t in enumerate((50, 50, 400, 400, 1000, 1000))
    ]
    result = PROMPT_LENGTH(_input(rows, scen=both))
    assert result.status == PASS, result.detail
    assert result.statistics["server"]["template_offset"] == 20
    assert result.statistics["server"]["max_abs_deviation"] == 1


def test_prompt_length_says_when_the_server_could_not_be_asked() -> None:
    rows = [request(i, prompt_new=100, target_prompt=100, prompt_total=100) for i in range(2)]
    info = {"server_tokenizer": {"verification": {"deviations": [], "error": "POST x: reset"}}}
    result = PROMPT_LENGTH(_input(rows, run_info=info))
    assert result.status == PASS
    assert result.detail.endswith("server /tokenize vs target: not checked (POST x: reset)")
    assert result.statistics["server_tokenize_error"] == "POST x: reset"


def test_output_length() -> None:
    rows = [
        request(0, output_tokens=100, requested=100),
        request(1, output_tokens=90, requested=100),
    ]
    assert OUTPUT_LENGTH(_input(rows)).status == PASS
    short = [*rows, request(2, output_tokens=10, requested=100)]
    assert OUTPUT_LENGTH(_input(short)).status == FAIL
    failed = [*rows, request(2, output_tokens=10, requested=100, status="error")]
    assert OUTPUT_LENGTH(_input(failed)).status == PASS  # ok requests only


def _lagged(lags: np.ndarray) -> list[dict[str, Any]]:
    return [
        request(i, ready=i * 0.01, sent=i * 0.01 + float(lag), chunks=(i * 0.01 + 1.0,))
        for i, lag in enumerate(lags)
    ]


def test_generator_saturation_passes_with_small_lag() -> None:
    result = GENERATOR_SATURATION(
        _input(_lagged(np.full(200, 0.001)), run_info={"worker_cpu_s": 1.0})
    )
    assert result.status == PASS
    assert result.statistics["p99_ms"] == pytest.approx(1.0)
    assert result.statistics["slope_ms_per_s"] == pytest.approx(0.0, abs=1e-6)
    assert result.statistics["worker_cpu_utilisation"] == pytest.approx(1.0 / 1.99, rel=1e-3)


def test_generator_saturation_reports_the_workers_wait_and_names_it_on_failure() -> None:
    small = _lagged(np.full(200, 0.001))
    passed = GENERATOR_SATURATION(_input(small, run_info={"worker_cpu_wait_s": 0.1}))
    assert passed.status == PASS
    assert passed.statistics["worker_cpu_wait_share"] == pytest.approx(0.1 / 1.99, rel=1e-3)
    assert "waited" not in passed.detail  # reported, not flagged: the lag is fine
    large = _lagged(np.full(200, 0.05))
    failed = GENERATOR_SATURATION(_input(large, run_info={"worker_cpu_wait_s": 0.1}))
    assert failed.status == FAIL
    assert "the workers waited for a CPU 5.0% of the time" in failed.detail
    barely = GENERATOR_SATURATION(_input(large, run_info={"worker_cpu_wait_s": 0.01}))
    assert barely.statistics["worker_cpu_wait_share"] < CPU_WAIT_NOTE
    assert "waited" not in barely.detail
    assert "worker_cpu_wait_share" not in GENERATOR_SATURATION(_input(large)).statistics


def test_generator_saturation_names_the_main_process_wait_and_where_the_lag_arose() -> None:
    # 50 ms late before the hand-over (the main process), 1 ms in the worker
    late_in_main = [
        request(i, ready=i * 0.01, dispatched=i * 0.01 + 0.05, sent=i * 0.01 + 0.051)
        for i in range(200)
    ]
    failed = GENERATOR_SATURATION(_input(late_in_main, run_info={"main_cpu_wait_s": 0.1}))
    assert failed.status == FAIL
    assert failed.statistics["main_cpu_wait_share"] == pytest.approx(0.1 / 1.99, rel=1e-3)
    assert failed.statistics["main_part_p99_ms"] == pytest.approx(50.0, abs=1e-6)
    assert failed.statistics["worker_part_p99_ms"] == pytest.approx(1.0, abs=1e-6)
    assert "(the main process) 50.000 ms, after it (the worker) 1.000 ms" in failed.detail
    assert "the main process waited for a CPU 5.0% of the time" in failed.detail
    assert "the workers waited" not in failed.detail
    # late in the worker instead; a main-process wait under 1 % is reported, not named
    late_in_worker = _lagged(np.full(200, 0.05))
    other = GENERATOR_SATURATION(_input(late_in_worker, run_info={"main_cpu_wait_s": 0.01}))
    assert other.statistics["main_part_p99_ms"] == pytest.approx(0.0, abs=1e-6)
    assert other.statistics["worker_part_p99_ms"] == pytest.approx(50.0, abs=1e-6)
    assert other.statistics["main_cpu_wait_share"] < CPU_WAIT_NOTE
    assert "main process waited" not in other.detail
    passed = GENERATOR_SATURATION(_input(_lagged(np.full(200, 0.001))))
    assert "main_part_p99_ms" not in passed.statistics  # the parts explain a failure only


def test_generator_saturation_of_a_dry_run_names_no_worker_and_no_server() -> None:
    late = _lagged(np.full(200, 0.05))
    result = GENERATOR_SATURATION(
        _input(late, run_info={"num_workers": 0, "worker_cpu_s": 0.0, "worker_cpu_wait_s": None})
    )
    assert result.status == FAIL
    assert "dry run" in result.detail
    assert "server" not in result.detail
    assert "workers" not in result.detail
    assert "worker_cpu_utilisation" not in result.statistics


def test_generator_saturation_fails_on_requests_this_machine_refused_to_connect() -> None:
    # 3 of 200 never sent for want of a file descriptor (one in the warmup: every phase
    # counts), the lag otherwise small: the generator, not the server, limited the load
    rows = _lagged(np.full(200, 0.001))
    for i in (5, 50):
        rows[i] |= {"status": "error", "error_kind": "client_limit"}
    rows[0] |= {"status": "error", "error_kind": "client_limit", "phase": "warmup"}
    rows[9] |= {"status": "error", "error_kind": "connection_refused"}  # (the server's)
    result = GENERATOR_SATURATION(_input(rows))
    assert result.status == FAIL
    assert result.statistics["client_limit"] == 3
    assert result.detail.startswith("3 requests never sent: this machine refused a connection")
    assert "ulimit -Hn" in result.detail
    assert "lag p99" not in result.detail  # (the lag itself passed)
    # every request refused: nothing was sent, still the generator's failure, not a SKIP
    refused = [request(i, ready=i * 0.01, error_kind="client_limit", unsent=True) for i in range(5)]
    assert GENERATOR_SATURATION(_input(refused)).status == FAIL
    rows[5] = rows[50] = rows[0] = rows[1]
    passed = GENERATOR_SATURATION(_input(rows))
    assert passed.status == PASS
    assert passed.statistics["client_limit"] == 0


def test_generator_saturation_fails_on_p99() -> None:
    lags = np.full(200, 0.001)
    lags[::20] = 0.05
    result = GENERATOR_SATURATION(_input(_lagged(lags)))
    assert result.status == FAIL
    assert "generator" in result.detail


def test_generator_saturation_fails_on_a_growing_backlog() -> None:
    result = GENERATOR_SATURATION(_input(_lagged(np.linspace(0.0, 0.03, 200))))
    assert result.status == FAIL
    assert result.statistics["growth_ms"] == pytest.approx(30.0, rel=0.15)
    assert "grew" in result.detail
    assert len(result.statistics["windows"]) == 10


def _with_connections(opened: range | list[int], connect_s: float = 0.03) -> list[dict[str, Any]]:
    """200 requests sent 0.5 ms after ready, but ``opened`` sent ``connect_s`` later still:
    their worker opened a connection for them first (``connect_time``), as a remote server's
    round trip or a TLS handshake takes."""
    rows = _lagged(np.full(200, 0.0005))
    for i in opened:
        rows[i]["sent_at"] += connect_s
        rows[i]["generator_delay"] += connect_s
        rows[i]["connect_time"] = connect_s
    return rows


def test_generator_saturation_does_not_count_connection_set_up_as_lag() -> None:
    """5 % of the requests each waited 30 ms for a new connection (the first of a closed loop
    against a server 30 ms away): the network's and the server's time, not the generator's.
    The check passes and says how many opened one; a run recorded without ``connect_time``
    (as the old check read every run) takes nothing away and fails on the same times."""
    rows = _with_connections(range(0, 200, 20))
    result = GENERATOR_SATURATION(_input(rows))
    assert result.status == PASS, result.detail
    assert result.statistics["p99_ms"] == pytest.approx(0.5, abs=1e-6)
    assert result.statistics["connections_opened"] == 10
    assert result.statistics["connect_p50_ms"] == pytest.approx(30.0)
    assert result.statistics["connect_p99_ms"] == pytest.approx(30.0)
    assert "10 requests opened a connection first (set-up p99 30.000 ms" in result.detail
    # the same times without the column (a run recorded before it existed): all counted as lag
    old = _input(rows)
    old_table = old.requests.drop_columns(["connect_time"])
    without = GENERATOR_SATURATION(
        HealthInput(old_table, measured_rows(old_table), old.sessions, old.scenario, {})
    )
    assert without.status == FAIL
    assert without.statistics["p99_ms"] == pytest.approx(30.5, abs=1e-6)
    assert without.statistics["connections_opened"] == 0
    assert without.statistics["connect_p99_ms"] is None
    assert "opened a connection" not in without.detail
    # none opened: nothing said
    plain = GENERATOR_SATURATION(_input(_lagged(np.full(200, 0.0005))))
    assert plain.statistics["connections_opened"] == 0
    assert "opened a connection" not in plain.detail


def test_generator_saturation_judges_the_lag_left_after_connection_set_up() -> None:
    """Only the set-up itself is taken away: a worker 20 ms late on the same requests is still
    the generator's lag, and its part after the hand-over is reported without the set-up."""
    rows = _with_connections(range(0, 200, 20))
    for row in rows[::20]:
        row["sent_at"] += 0.02  # late beyond the set-up
        row["generator_delay"] += 0.02
    result = GENERATOR_SATURATION(_input(rows))
    assert result.status == FAIL
    assert result.statistics["p99_ms"] == pytest.approx(20.5, abs=1e-6)
    assert result.statistics["worker_part_p99_ms"] == pytest.approx(20.5, abs=1e-6)
    assert "generator, not the server, limited the load" in result.detail
    assert "10 requests opened a connection first (set-up p99 30.000 ms" in result.detail


def test_lifecycle_delays_show_the_connection_set_up_of_the_requests_that_opened_one() -> None:
    rows = _with_connections([0, 1, 2], 0.02)
    rows[2]["connect_time"] = 0.04
    rows[2]["sent_at"] += 0.02
    result = LIFECYCLE_DELAYS(_input(rows))
    assert result.status == PASS
    connect = result.statistics["connect"]
    assert (connect["count"], connect["unit"]) == (3, "ms")
    assert connect["p50"] == pytest.approx(20.0)
    assert connect["max"] == pytest.approx(40.0)
    assert "connection set-up p99 39.600 ms (3 requests opened one)" in result.detail
    # none opened (or a run recorded without the column): a count of 0, nothing in the detail
    table = requests_table(_lagged(np.full(5, 0.001))).drop_columns(["connect_time"])
    old_input = HealthInput(table, measured_rows(table), sessions_table([]), scenario(), {})
    old = LIFECYCLE_DELAYS(old_input)
    assert old.statistics["connect"]["count"] == 0
    assert "connection" not in old.detail


def test_lifecycle_delays_are_informative() -> None:
    rows = [request(0, ready=0.0, dispatched=0.001, sent=0.003, chunks=(0.1,))]
    result = LIFECYCLE_DELAYS(_input(rows))
    assert result.status == PASS
    assert result.statistics["ready_to_dispatch"]["max"] == pytest.approx(1.0)
    assert result.statistics["dispatch_to_sent"]["max"] == pytest.approx(2.0)
    assert result.statistics["dispatch_to_sent"]["unit"] == "ms"


@pytest.mark.parametrize(
    ("column", "value", "pair"),
    [
        ("dispatched_at", -0.002, "ready_at<=dispatched_at"),
        ("received_at", 0.0005, "dispatched_at<=received_at"),
        ("sent_at", 0.0009, "received_at<=sent_at"),
        ("first_chunk_at", 0.0005, "sent_at<=first_chunk_at"),
        ("completed_at", 0.05, "first_chunk_at<=completed_at"),
        ("processed_at", 0.2, "completed_at<=processed_at"),
    ],
)
def test_lifecycle_delays_fail_on_every_timestamp_out_of_order(
    column: str, value: float, pair: str
) -> None:
    good = request(0, ready=0.0, dispatched=0.001, sent=0.003, chunks=(0.1, 0.3))
    good["received_at"] = 0.002
    bad = dict(good, session_id=1, request_id=1, phase="warmup")  # every phase is audited
    bad[column] = value
    result = LIFECYCLE_DELAYS(_input([good, bad]))
    assert result.status == FAIL, result.detail
    violations = result.statistics["order_violations"]
    assert violations[pair] == 1
    assert sum(violations.values()) == 1  # each case breaks exactly one inequality
    assert pair.replace("<=", " after ") in result.detail


def test_the_timestamp_audit_ignores_what_was_not_recorded() -> None:
    sent_only = request(0, ready=0.0, sent=0.001, chunks=(), status="error")
    sent_only["first_chunk_at"] = None
    cancelled = request(1, unsent=True, status="cancelled")
    result = LIFECYCLE_DELAYS(_input([sent_only, cancelled]))
    assert result.status == PASS, result.detail
    assert set(result.statistics["order_violations"].values()) == {0}
    assert "timestamps in order" in result.detail


def test_clamped_chunk_stamps_warn_and_are_named_without_failing() -> None:
    """A read time the worker clamped (a wall-clock step) is a substituted time: WARN, with the
    count, every phase included; the rows stay ordered, so the run does not fail for it."""
    clean = request(0, ready=0.0, dispatched=0.001, sent=0.003, chunks=(0.1, 0.3))
    clean["chunk_stamps_clamped"] = 0
    clamped = request(1, ready=0.0, dispatched=0.001, sent=0.003, chunks=(0.003, 0.003))
    clamped["chunk_stamps_clamped"] = 2
    warmup = dict(clamped, session_id=2, request_id=2, phase="warmup", chunk_stamps_clamped=1)
    result = LIFECYCLE_DELAYS(_input([clean, clamped, warmup]))
    assert result.status == WARN, result.detail
    assert result.statistics["chunk_stamps_clamped"] == 3
    assert "3 chunk read times from the kernel clamped" in result.detail
    assert "timestamps in order" in result.detail
    report = run_health_checks(_input([clean, clamped]))
    assert report.verdict == PASS
    assert "WARN" in report.to_text()
    clean_only = LIFECYCLE_DELAYS(_input([clean]))
    assert clean_only.status == PASS
    assert clean_only.statistics["chunk_stamps_clamped"] == 0
    assert "clamped" not in clean_only.detail


def test_no_measured_rows_skips_every_check() -> None:
    report = run_health_checks(_input([]))
    assert {r.status for r in report.results} == {SKIP}
    assert report.verdict == PASS
    warmup = [request(0, phase="warmup")]
    assert run_health_checks(_input(warmup)).verdict == PASS


def test_verdict_and_files(tmp_path: Path) -> None:
    report = run_health_checks(_input(_chain(1.2)))
    assert [r.name for r in report.results] == [c.name for c in HEALTH_CHECKS]
    assert report.verdict == FAIL
    # dispatched before its parent's completion + think time, and so before its own ready_at
    assert report.failed == ["dependencies", "lifecycle_delays"]
    report.write(tmp_path)
    data = json.loads((tmp_path / "health.json").read_text())
    assert data["verdict"] == "FAIL"
    (dependencies,) = [check for check in data["checks"] if check["name"] == "dependencies"]
    assert dependencies["statistics"]["violations"] == 1
    text = (tmp_path / "health.txt").read_text()
    assert text.startswith("health verdict: FAIL")
    assert "[FAIL] dependencies" in text


def test_partial_rows_do_not_crash_the_checks() -> None:
    rows = [
        request(0, 0, ready=0.0, chunks=(0.1,)),
        request(0, 1, parents=[0], ready=None, unsent=True, status="cancelled"),
        request(1, 0, ready=0.2, chunks=(), completed=None, status="error"),
    ]
    table = requests_table(rows)
    table = table.set_column(
        table.schema.get_field_index("completed_at"),
        table.schema.field("completed_at"),
        pa.array([0.1, None, None], pa.float64()),
    )
    report = run_health_checks(HealthInput(table, table, sessions_table([]), scenario()))
    assert report.verdict in (PASS, FAIL)


def test_parent_rows_by_table_and_by_sort_agree() -> None:
    # dense keys take the lookup table, the same keys shifted far away the sort: each edge finds
    # the first row with its key (duplicates), or none (keys.size) when no row has it
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 50, size=40)
    edge_keys = rng.integers(0, 60, size=30)
    first = {int(k): i for i, k in reversed(list(enumerate(keys)))}
    expected = [first.get(int(k), keys.size) for k in edge_keys]
    assert first_rows(keys, edge_keys).tolist() == expected
    far = 10**12
    assert first_rows(keys + far, edge_keys + far).tolist() == expected


def _lateness_by_hand(rows: list[dict[str, Any]]) -> tuple[list[float], dict[str, int]]:
    """``dependency_lateness`` spelled out row by row (the reference for the vectorised one)."""
    by_key = {(r["session_id"], r["node_id"]): r for r in rows}
    counts = {"dispatched": 0, "violations": 0, "parent_not_completed": 0, "parents_missing": 0}
    lateness = []
    for r in rows:
        if np.isnan(r["dispatched_at"]):
            continue
        counts["dispatched"] += 1
        found = [by_key.get((r["session_id"], p)) for p in r["parents"]]
        if not r["parents"]:
            earliest = r["ready_at"]
        else:
            done = [f["completed_at"] for f in found if f is not None]
            done = [d for d in done if not np.isnan(d)]
            earliest = max(done) + r["wait_after_ready"] if done else np.nan
            if any(f is None for f in found):
                counts["parents_missing"] += 1
            elif len(done) < len(found):
                counts["parent_not_completed"] += 1
        if not np.isnan(earliest) and not np.isnan(r["not_before"]):
            earliest = max(earliest, r["not_before"])
        if r["dispatched_at"] < earliest - 1e-6:
            counts["violations"] += 1
        if not np.isnan(r["dispatched_at"] - earliest):
            lateness.append(r["dispatched_at"] - earliest)
    counts["violations"] += counts["parent_not_completed"]
    return lateness, counts


def test_dependency_lateness_matches_a_row_by_row_count_on_random_dags() -> None:
    rng = np.random.default_rng(7)
    rows: list[dict[str, Any]] = []
    for session_id in range(300):
        size = int(rng.integers(1, 7))
        for node in range(size):
            picks = rng.integers(0, node, int(rng.integers(0, 3))) if node else []
            parents = sorted({int(p) for p in picks})
            if node and not parents and rng.random() < 0.7:
                parents = [node - 1]
            parents += [size + 5] if rng.random() < 0.03 else []  # a parent with no row
            rows.append(
                {
                    "session_id": session_id,
                    "node_id": node,
                    "parents": parents,
                    "ready_at": float(rng.random() * 10),
                    "wait_after_ready": float(rng.choice([0.0, 0.25])),
                    "not_before": np.nan if rng.random() < 0.5 else float(rng.random() * 10),
                    "dispatched_at": np.nan if rng.random() < 0.1 else float(rng.random() * 12),
                    "completed_at": np.nan if rng.random() < 0.1 else float(rng.random() * 12),
                }
            )
    rng.shuffle(rows)  # type: ignore[arg-type]
    rows = [r for r in rows if rng.random() > 0.03]  # some rows lost (a killed run)
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    lateness, counts = dependency_lateness(table)
    expected_lateness, expected_counts = _lateness_by_hand(rows)
    assert counts == expected_counts
    assert counts["parents_missing"] > 0
    assert counts["parent_not_completed"] > 0
    assert sorted(lateness.tolist()) == pytest.approx(sorted(expected_lateness))


def test_prompt_length_compares_first_attempts_and_a_reprompted_parents_final_answer() -> None:
    """A root (20 tokens) answered 4 invalid tokens, was re-prompted (its prompt: the 20, the
    failed answer and a 14-token note, 38) and answered 24 valid tokens; its child (10 new
    tokens) carries the root's first prompt and final answer, 20 + 24 + 10 = 54, and was
    re-prompted too (54 + its 5-token failed answer + the note: 73). Four more sessions of a
    root and a child, never re-prompted. The server counts all exactly: nothing is off. The old
    check compared the re-prompts as if their prompt were their target plus their history (off
    by 18 and 19) and took the parent's first answer for the child's history (off by 20)."""
    rows = []
    for i in range(1, 5):
        rows.append(request(i, 0, chunks=(0.1, 0.2), prompt_total=20) | {"attempt": 0})
        plain = request(i, 1, parents=[0], ready=0.3, chunks=(0.4, 0.5), prompt_new=10)
        rows.append(plain | {"attempt": 0, "target_prompt_tokens": 10, "prompt_tokens_total": 32})
    root = request(0, 0, chunks=(0.1, 0.2, 0.3, 0.4), prompt_total=20) | {"attempt": 0}
    again = request(0, 0, ready=0.4, chunks=tuple(0.5 + i / 100 for i in range(24)))
    again |= {"attempt": 1, "prompt_tokens_total": 20 + 4 + 14, "request_id": 1}
    child = request(0, 1, parents=[0], ready=0.8, chunks=tuple(0.9 + i / 100 for i in range(5)))
    child |= {"attempt": 0, "prompt_tokens_new": 10, "target_prompt_tokens": 10}
    child |= {"prompt_tokens_total": 20 + 24 + 10, "request_id": 2}
    retry = request(0, 1, parents=[0], ready=1.0, chunks=(1.1, 1.2))
    retry |= {"attempt": 1, "prompt_tokens_new": 10, "target_prompt_tokens": 10}
    retry |= {"prompt_tokens_total": 54 + 5 + 14, "request_id": 3}
    result = PROMPT_LENGTH(_input([*rows, root, again, child, retry]))
    assert result.status == PASS, result.detail
    assert (result.statistics["server"]["roots"], result.statistics["server"]["turns"]) == (5, 5)
    assert result.statistics["server"]["max_abs_deviation"] == 0


def test_prompt_length_fails_a_server_that_counts_every_prompt_short() -> None:
    """Fixed-length prompts that the server counts 122 tokens short (another tokenizer, or cut
    prompts): the median is not a template's overhead (a template only adds tokens), so every
    request is off by 122."""
    rows = [request(i, prompt_new=200, target_prompt=200, prompt_total=78) for i in range(5)]
    result = PROMPT_LENGTH(_input(rows))
    assert result.status == FAIL
    assert result.statistics["server"]["template_offset"] == pytest.approx(-122)
    assert result.detail.startswith(
        "server usage vs expected: 5 of 5 off by more than 15 tokens (max 122)"
    )
    # a turn whose usage is 40 short of its parent's total + answer + new part: the same
    root = request(9, 0, prompt_new=100, target_prompt=100, prompt_total=100)
    root["output_tokens"] = 10
    child = request(9, 1, parents=[0], prompt_new=50, target_prompt=50)
    child["prompt_tokens_total"] = 100 + 10 + 50 - 40
    result = PROMPT_LENGTH(_input([root, child]))
    assert result.status == FAIL
    assert result.statistics["server"]["turn_offset"] == pytest.approx(-40)
