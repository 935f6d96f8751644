"""Absurd numbers from a real server process (issue 21 items 1 and 5): no hang, no lost row.

Each run is 4 chats of 3 turns against ``behaviours_numbers``, which puts the bad number in the
second turn's answer only (``node_id == 1``). Every run must end on its own well before the
scenario's 60 s ``benchmark_timeout`` (the lost Result batch used to hold it until then), exit 0,
keep one ``ok`` row per node, hold the bad value as null (or veeksha's own count) with a note
naming it and its raw text in ``server_numbers_rejected``, leave the other rows exact, pass
``veeksha report`` (the audit), and count the bad rows in the ``server_numbers`` health check.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.hostile.harness import (
    HostileRun,
    HostileServer,
    hostile_run,
    hostile_scenario,
)

_BEHAVIOURS = "tests.integration.hostile.behaviours_numbers"
_NO_HANG_S = 40  # hostile_run fails if the run is still going then (the deadline is 60 s)
_SESSIONS = 4


def run_numbers(
    tmp_path: Path, behaviour: str = "numbers_streamed", tokens: int = 6, **options: Any
) -> HostileRun:
    client_extra = "  stream: false" if behaviour == "numbers_whole" else ""
    with HostileServer(f"{_BEHAVIOURS}:{behaviour}", tmp_path, **options) as server:
        started = time.monotonic()
        run = hostile_run(
            tmp_path,
            hostile_scenario(
                server.base_url,
                sessions=_SESSIONS,
                output_tokens=tokens,
                client_extra=client_extra,
            ),
            timeout=_NO_HANG_S,
            in_process=True,
        )
        assert time.monotonic() - started < _NO_HANG_S
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): 3 * _SESSIONS}  # the server answered every one
    return run


def split(run: HostileRun) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the second turns, which got the bad numbers; the other rows)."""
    rows = run.rows
    bad = [r for r in rows if r["node_id"] == 1]
    assert len(bad) == _SESSIONS
    return bad, [r for r in rows if r["node_id"] != 1]


def assert_exact(rows: list[dict[str, Any]], tokens: int, streamed: bool = True) -> None:
    """Exact counts; a streamed answer has a TPOT, a one-chunk (non-streamed) one has none."""
    for r in rows:
        assert (r["output_tokens"], r["server_output_tokens"], r["usage_reported"]) == (
            tokens,
            tokens,
            True,
        )
        assert r["prompt_tokens_total"] == 10
        assert r["server_numbers_rejected"] == ""
        assert (r["tpot"] is not None) is streamed


def server_numbers_check(run: HostileRun) -> dict[str, Any]:
    assert run.run_dir is not None
    checks = json.loads((run.run_dir / "health.json").read_text())["checks"]
    found: dict[str, Any] = next(c for c in checks if c["name"] == "server_numbers")
    return found


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("18446744073709551617", "out of range"),  # 2^64+1: the lost batch, the hang
        ("9223372036854775813", "out of range"),  # 2^63+5: the writer's overflow, exit 3
        ("99999999999", "out of range"),  # stored as 1,215,752,191 (int32 wrap-around)
        ("-5", "negative"),
        ("1e400", "out of range"),  # beyond a double: the chunk failed to decode
    ],
)
def test_an_absurd_completion_count_is_null_noted_and_replaced_by_veekshas_count(
    tmp_path: Path, raw: str, why: str
) -> None:
    run = run_numbers(tmp_path, completion=raw)
    bad, others = split(run)
    for r in bad:
        assert r["status"] == "ok"
        assert r["server_output_tokens"] is None
        assert r["server_numbers_rejected"] == f"completion_tokens={raw} ({why})"
        assert (r["output_tokens"], r["usage_reported"]) == (6, False)  # veeksha's count
        assert r["tpot"] is not None
        assert r["output_throughput"] > 0
    assert_exact(others, 6)
    assert run.history_answers() == ["t0 t1 t2 t3 t4 t5 "] * (
        3 * _SESSIONS
    )  # turns 2 and 3 re-send 1 and 2
    check = server_numbers_check(run)
    assert check["status"] == "FAIL"
    assert check["statistics"]["with_rejected_numbers"] == _SESSIONS
    assert check["statistics"]["by_field"] == {"completion_tokens": _SESSIONS}


def test_one_token_for_fourteen_chunks_is_replaced_by_what_the_client_saw(tmp_path: Path) -> None:
    run = run_numbers(tmp_path, tokens=14, completion="1")
    bad, others = split(run)
    for r in bad:
        assert (r["output_tokens"], r["server_output_tokens"], r["usage_reported"]) == (
            14,
            1,
            False,
        )
        assert (
            r["server_numbers_rejected"] == "completion_tokens=1 (disagrees: 14 chunks, 14 counted)"
        )
        # the metrics are built on 14 tokens, not 1
        assert r["normalized_e2e"] == pytest.approx(r["e2e"] / 14)
        assert r["output_throughput"] == pytest.approx(14 / r["e2e"])
    assert_exact(others, 14)
    assert server_numbers_check(run)["statistics"]["with_rejected_numbers"] == _SESSIONS


def test_a_huge_number_in_a_timings_field_veeksha_ignores_costs_nothing(tmp_path: Path) -> None:
    run = run_numbers(tmp_path, timings='{"foo":18446744073709551617,"bar":[1e400]}')
    bad, others = split(run)
    assert_exact(bad + others, 6)
    assert server_numbers_check(run)["status"] == "PASS"


def test_absurd_timings_are_null_and_noted(tmp_path: Path) -> None:
    timings = (
        '{"decode_time":1e300,"prefill_time":-0.5,"ttft":"fast","queue_time":1e400,'
        '"foo":18446744073709551617}'
    )
    run = run_numbers(tmp_path, timings=timings)
    bad, others = split(run)
    for r in bad:
        for column in ("server_decode_time", "server_prefill_time", "server_ttft"):
            assert r[column] is None
        assert r["server_queue_time"] is None
        notes = r["server_numbers_rejected"].split("; ")
        assert notes[0].startswith("timings.decode_time=1e300 (1e+300 s, longer than")
        assert notes[1:] == [
            "timings.prefill_time=-0.5 (negative)",
            "timings.ttft=fast (not a number)",
            "timings.queue_time=1e400 (not a number)",
        ]
    for r in bad:  # the usage itself was right
        assert (r["output_tokens"], r["server_output_tokens"], r["usage_reported"]) == (6, 6, True)
    assert all(r["server_numbers_rejected"] == "" for r in others)
    check = server_numbers_check(run)
    assert check["statistics"]["by_field"] == {
        "timings.decode_time": _SESSIONS,
        "timings.prefill_time": _SESSIONS,
        "timings.ttft": _SESSIONS,
        "timings.queue_time": _SESSIONS,
    }


def test_plausible_timings_are_taken(tmp_path: Path) -> None:
    run = run_numbers(tmp_path, timings='{"queue_time":0,"decode_ms":0.5}')
    bad, _ = split(run)
    for r in bad:
        assert (r["server_queue_time"], r["server_decode_time"]) == (0.0, 0.0005)
        assert r["server_numbers_rejected"] == ""


def test_absurd_prompt_and_cached_counts(tmp_path: Path) -> None:
    run = run_numbers(tmp_path, prompt="-3", cached="99999999999")
    bad, others = split(run)
    for r in bad:
        assert r["server_numbers_rejected"] == (
            "prompt_tokens=-3 (negative); cached_tokens=99999999999 (out of range)"
        )
        assert r["cached_tokens"] is None
        assert r["prompt_tokens_total"] > 0  # veeksha's count of what it sent
        assert (r["output_tokens"], r["usage_reported"]) == (6, True)
    assert_exact(others, 6)


def test_a_non_streamed_answer_with_absurd_numbers(tmp_path: Path) -> None:
    run = run_numbers(
        tmp_path,
        behaviour="numbers_whole",
        completion="18446744073709551617",
        timings='{"decode":1e999}',
    )
    bad, others = split(run)
    for r in bad:
        assert r["server_numbers_rejected"] == (
            "completion_tokens=18446744073709551617 (out of range); "
            "timings.decode=1e999 (not a number)"
        )
        assert (r["output_tokens"], r["server_output_tokens"]) == (6, None)
    assert_exact(others, 6, streamed=False)
    assert run.history_answers() == ["t0 t1 t2 t3 t4 t5 "] * (
        3 * _SESSIONS
    )  # turns 2 and 3 re-send 1 and 2
