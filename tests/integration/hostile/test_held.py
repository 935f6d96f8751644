"""Misbehaviours veeksha holds against, pinned: each one for real, against the hostile server.

Every case runs ``veeksha run`` (2 chats of 3 turns with history) against a server process that
misbehaves in one way (``behaviours_held``), and ends with ``hostile_run``'s audit: the exit
code, no traceback, no orphan process, one row per node, readable Parquet, ``veeksha report``.
Then the exact outcome of every row: status, error_kind, http_status, retries, the chunks and
tokens recorded, and, where the answer is ok, the answer re-sent as history by the next turns,
which must be what the server meant to say. docs/reliability.md §7 lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.hostile.harness import (
    HostileRun,
    HostileServer,
    hostile_run,
    hostile_scenario,
)

_MODULE = "tests.integration.hostile.behaviours_held"
_SESSIONS = 2
_TURNS = 3
_ANSWER = "t0 t1 t2 t3 t4 t5 "  # 6 tokens, the scenario's output length


def _run(
    tmp_path: Path, behaviour: str, options: dict[str, Any], **scenario: Any
) -> tuple[HostileRun, list[dict[str, Any]]]:
    """One audited run against ``behaviour``; the run and the POSTs the server received."""
    with HostileServer(f"{_MODULE}:{behaviour}", tmp_path, **options) as server:
        text = hostile_scenario(server.base_url, sessions=_SESSIONS, turns=_TURNS, **scenario)
        run = hostile_run(tmp_path, text, in_process=True)
        posts = [r for r in server.received() if r["method"] == "POST"]
    assert run.audit is not None
    return run, posts


# ------------------------------------------------------------------- answered, and whole


@dataclass(frozen=True)
class Answered:
    """A misbehaviour after which every request is ok with the answer the server meant."""

    behaviour: str
    options: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] = field(default_factory=dict)
    answer: str = _ANSWER
    chunks: int = 6  # content chunks the server sent (each one timed)
    tokens: int = 6  # output_tokens: the server's usage, else veeksha's count of the answer
    usage: bool = True  # the server reported usage


_TINY = "abcdefghij" * 100
_THREE = {"output_tokens": 3}  # (1 byte per write, 0.5 ms apart: short answers, short runs)

ANSWERED = {
    "one_byte_per_read_crlf": Answered(
        "bytewise", {"eol": "crlf"}, _THREE, "t0 t1 t2 ", chunks=3, tokens=3
    ),
    "one_byte_per_read_utf8": Answered(
        "bytewise", {"text": "utf8"}, _THREE, "é0😀日本 é1😀日本 é2😀日本 ", chunks=3, tokens=3
    ),
    "lone_cr_line_ends": Answered("line_ends", {"eol": "cr"}),
    "events_split_and_joined_across_chunks": Answered("rechunked", {"size": 150}),
    "chunk_extensions_and_trailers": Answered("chunk_extras"),
    "http10_body_framed_by_close": Answered("http10_close"),
    "sse_framed_by_content_length": Answered("content_length"),
    "gzip_stream_despite_identity": Answered("compressed_stream", {"encoding": "gzip"}),
    "gzip_json_despite_identity": Answered(
        "gzip_json", scenario={"client_extra": "  stream: false"}, chunks=1
    ),
    "comments_and_event_id_retry_fields": Answered("sse_fields"),
    "multi_line_data": Answered("multiline_data"),
    "no_done_no_final_blank_line": Answered("no_done"),
    "closed_after_each_response": Answered("close_after_each"),
    "connection_close_header": Answered("connection_close_header"),
    "nul_in_content": Answered("nul_and_surrogate", answer="t0 a\x00b ", chunks=2, tokens=2),
    "json_answer_to_a_stream": Answered("json_for_stream", chunks=1),
    "message_instead_of_delta": Answered("message_not_delta"),
    "empty_choices_and_role_chunks": Answered("empty_choices"),
    "no_usage": Answered("usage_variants", {"usage": "none"}, usage=False),
    "usage_in_the_last_content_chunk": Answered("usage_variants", {"usage": "in_last"}),
    "1000_one_char_chunks": Answered(
        "tiny_chunks", scenario={"output_tokens": 1000}, answer=_TINY, chunks=1000, tokens=1000
    ),
}


@pytest.mark.parametrize("case", ANSWERED.values(), ids=ANSWERED.keys())
def test_answered_whole(tmp_path: Path, case: Answered) -> None:
    run, posts = _run(tmp_path, case.behaviour, case.options, **case.scenario)
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): _SESSIONS * _TURNS}
    assert len(posts) == _SESSIONS * _TURNS  # nothing re-sent
    # veeksha never asks for compression (the gzip cases are servers that compress anyway)
    assert {p["headers"].get("accept-encoding") for p in posts} == {"identity"}
    for row in run.rows:
        assert row["http_status"] == 200
        assert row["retries"] == 0
        assert row["error_message"] == ""
        assert row["usage_reported"] is case.usage
        assert row["output_tokens"] == case.tokens
        assert len(row["chunk_times"]) == case.chunks
        assert sorted(row["chunk_times"]) == row["chunk_times"]
        assert row["first_chunk_at"] == row["chunk_times"][0]
        assert row["sent_at"] <= row["first_chunk_at"] <= row["completed_at"]
    # turns 2 and 3 re-send the answers before them: 1 + 2 per chat
    assert run.history_answers() == [case.answer] * (_SESSIONS * 3)


def test_slowloris_stream_is_ok_with_its_real_gaps(tmp_path: Path) -> None:
    """A token every 0.5 s, well within ``request_timeout``: ok, and the gap is measured."""
    run, _ = _run(tmp_path, "slowloris", {"gap": 0.5}, output_tokens=2)
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): _SESSIONS * _TURNS}
    for row in run.rows:
        assert len(row["tbc"]) == 1
        assert 0.25 < row["tbc_mean"] < 2.0  # (generous: the gap is 0.5 s, not ~0)
        assert row["ttfc"] > 0.25
    assert run.history_answers() == ["t0 t1 "] * (_SESSIONS * 3)


def test_idle_connection_reset_is_retried_once_fresh(tmp_path: Path) -> None:
    """The server resets a reused keep-alive connection as the request arrives: the request is
    sent again on a fresh connection (once), is ok, and counts it as a retry: every POST the
    server logged beyond the rows is a row's retry, nothing is sent unaccounted."""
    run, posts = _run(tmp_path, "reset_reused", {})
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): _SESSIONS * _TURNS}
    assert len(posts) > _SESSIONS * _TURNS  # (turns 2 and 3 reuse a connection: reset, resent)
    assert all(row["retries"] in (0, 1) for row in run.rows)
    assert sum(row["retries"] for row in run.rows) == len(posts) - _SESSIONS * _TURNS
    assert run.history_answers() == [_ANSWER] * (_SESSIONS * 3)


@pytest.mark.parametrize("status", [429, 503])
def test_retried_status_with_retry_after_ends_ok(tmp_path: Path, status: int) -> None:
    """Every request's first attempt gets ``status`` with ``Retry-After: 0.1``; with
    ``client.max_retries: 2`` each is retried once and ok; its latency counts the wait."""
    run, posts = _run(tmp_path, "retry_once", {"status": status}, client_extra="  max_retries: 2")
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): _SESSIONS * _TURNS}
    assert len(posts) == 2 * _SESSIONS * _TURNS
    for row in run.rows:
        assert row["retries"] == 1
        assert row["http_status"] == 200
        assert row["ttfc"] >= 0.1  # measured from the first attempt
    assert run.history_answers() == [_ANSWER] * (_SESSIONS * 3)


# ------------------------------------------------------------------- failed, and typed


@dataclass(frozen=True)
class Failed:
    """A misbehaviour that fails each chat's first request, the same way every time."""

    behaviour: str
    status: str
    error_kind: str
    http_status: int | None
    message: str  # in error_message
    options: dict[str, Any] = field(default_factory=dict)
    scenario: dict[str, Any] = field(default_factory=dict)
    chunks: int = 0  # content chunks received before the failure, kept


FAILED = {
    "reset_mid_stream": Failed(
        "reset_midstream", "error", "connection_reset", 200, "closed before", chunks=3
    ),
    "429_without_retries": Failed(
        "always_429", "error", "http_4xx", 429, 'HTTP 429: {"error": {"message": "rate limit'
    ),
    "500_html_page": Failed(
        "html_500", "error", "http_5xx", 500, "HTTP 500: <html>\r\n<head><title>500"
    ),
    "empty_200": Failed(
        "empty_200", "error", "malformed_response", 200, "stream ended without any event"
    ),
    "error_object_code_503_in_stream": Failed(
        "stream_error", "error", "http_5xx", 200, "engine overloaded", {"code": 503}, chunks=2
    ),
    "stream_never_ends": Failed(
        "never_ends",
        "timeout",
        "timeout",
        200,
        "no complete response within 2 s",
        scenario={"request_timeout": 2},
        chunks=2,
    ),
    "headers_never_sent": Failed(
        "no_headers",
        "timeout",
        "timeout",
        None,
        "no complete response within 2 s",
        scenario={"request_timeout": 2},
    ),
    "lone_surrogate_in_content": Failed(
        "nul_and_surrogate",
        "error",
        "malformed_response",
        200,
        "surrogate",
        {"surrogate": 1},
        chunks=2,
    ),
    "brotli_stream": Failed(
        "compressed_stream",
        "error",
        "malformed_response",
        200,
        "answer compressed with br",
        {"encoding": "br"},
    ),
}


@pytest.mark.parametrize("case", FAILED.values(), ids=FAILED.keys())
def test_failed_typed(tmp_path: Path, case: Failed) -> None:
    run, posts = _run(tmp_path, case.behaviour, case.options, **case.scenario)
    assert run.result.code == 0  # failures are measured, not a failed run
    assert len(posts) == _SESSIONS  # each chat's first request; the rest never sent
    assert run.audit is not None
    assert run.audit.kinds() == {
        (case.status, case.error_kind): _SESSIONS,
        ("cancelled", "cancelled"): _SESSIONS * (_TURNS - 1),
    }
    for row in run.rows:
        if row["status"] == "cancelled":
            assert row["node_id"] > 0
            assert row["sent_at"] is None
            continue
        assert row["node_id"] == 0
        assert row["http_status"] == case.http_status
        assert row["retries"] == 0
        assert case.message in row["error_message"], row["error_message"]
        assert len(row["chunk_times"] or []) == case.chunks
        assert row["output_tokens"] == case.chunks  # veeksha's count of the text received
        assert row["usage_reported"] is False
        assert row["ttfc"] is None
        assert row["e2e"] is None
    assert run.history_answers() == []
