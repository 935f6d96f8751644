"""The wire protocol against a hostile server process: every misread byte is the server's fault
(``malformed_response``, a readable message), fails at once instead of at the timeout, and never
costs the answers around it; the answers kept as history are the server's, byte for byte.

Each run: 3-turn chats with history (``hostile_scenario``), one worker, the audit of
``hostile_run`` (exit code, no traceback, no orphan, one row per node, ``veeksha report``).
"""

from __future__ import annotations

import asyncio
import socket
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
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.settings import WorkerSettings
from veeksha.dispatch.worker import Worker, _sent_slot

WIRE = "tests.integration.hostile.behaviours_wire:"
ANSWER = "t0 t1 t2 t3 t4 t5 "  # what the server's correct answer to every turn says


def run(
    tmp_path: Path,
    behaviour: str,
    *,
    sessions: int = 2,
    think: float = 0.01,
    timeout: float = 60,
    **options: Any,
) -> HostileRun:
    with HostileServer(WIRE + behaviour, tmp_path, **options) as server:
        scenario = hostile_scenario(server.base_url, sessions=sessions)
        scenario = scenario.replace("interval: 0.01}", f"interval: {think}}}")
        return hostile_run(tmp_path, scenario, timeout=timeout, in_process=True)


def the_failed_row(result: HostileRun) -> dict[str, Any]:
    """The one error row (the first POST's); its session's other turns are cancelled and the
    other session's turns are ok."""
    assert result.audit is not None
    assert result.audit.kinds() == {("ok", ""): 3, ("cancelled", "cancelled"): 2} | {
        (r["status"], r["error_kind"]): 1 for r in result.rows if r["status"] == "error"
    }, result.audit.kinds()
    (row,) = (r for r in result.rows if r["status"] == "error")
    assert (row["session_id"], row["node_id"]) == (0, 0)
    return row


# --------------------------------------------------------------- the server's fault, at once


@pytest.mark.parametrize(
    ("behaviour", "options", "message", "http_status"),
    [
        ("invalid_utf8", {}, "invalid UTF-8 in the response (b'\\xff': invalid start byte)", 200),
        ("status_2xx", {}, "invalid status code b'2xx' in b'HTTP/1.1 2xx OK'", None),
        ("header_without_colon", {}, "invalid header line b'this is no header'", None),
        ("bad_chunk_size", {"size": "zz"}, "invalid chunk size b'zz' in the chunked body", 200),
        # a negative size sent the worker's chunk loop round forever (the whole worker hung)
        ("bad_chunk_size", {"size": "-6"}, "invalid chunk size b'-6' in the chunked body", 200),
        ("bad_chunk_size", {"size": "1" * 20}, "invalid chunk size b'11111", 200),
        ("huge_head", {}, "response head larger than 64 KiB", None),
        ("no_content", {}, "HTTP 204: a response without content", 204),
        ("bad_content_length", {"length": "-5"}, "invalid Content-Length b'-5'", None),
        ("bad_content_length", {"length": "12abc"}, "invalid Content-Length b'12abc'", None),
    ],
)
def test_protocol_errors_are_malformed_responses_at_once(
    tmp_path: Path,
    behaviour: str,
    options: dict[str, str],
    message: str,
    http_status: int | None,
) -> None:
    result = run(tmp_path, behaviour, **options)
    row = the_failed_row(result)
    assert row["error_kind"] == "malformed_response"  # not a timeout, not client_error
    assert row["error_message"].startswith(message), row["error_message"]
    assert "Error:" not in row["error_message"]  # no Python exception text
    assert row["http_status"] == http_status
    assert result.history_answers() == [ANSWER] * 3  # the other session: untouched


def test_an_sse_line_over_16_mib_fails_its_request(tmp_path: Path) -> None:
    result = run(tmp_path, "long_line", mb=20)
    row = the_failed_row(result)
    assert row["error_kind"] == "malformed_response"
    assert row["error_message"] == (
        "an SSE line longer than 16,777,216 bytes (the limit of one event)"
    )


def test_a_long_sse_line_under_the_limit_is_kept_whole(tmp_path: Path) -> None:
    result = run(tmp_path, "long_line", sessions=1, mb=3)
    assert result.audit is not None
    assert result.audit.kinds() == {("ok", ""): 3}
    long = "x" * (3 << 20)
    assert result.history_answers() == [long, long, ANSWER]  # turn 2's history, turn 3's


# ------------------------------------------------------------------- answers read right


def test_interim_responses_are_skipped(tmp_path: Path) -> None:
    result = run(tmp_path, "interim_responses")
    assert result.audit is not None
    assert result.audit.kinds() == {("ok", ""): 6}
    assert {r["http_status"] for r in result.rows} == {200}
    assert result.history_answers() == [ANSWER] * 6


@pytest.mark.parametrize("split", [0, 1])
def test_a_byte_order_mark_is_not_content_and_the_first_chunk_is_kept(
    tmp_path: Path, split: int
) -> None:
    result = run(tmp_path, "bom_first", split=split)
    assert result.audit is not None
    assert result.audit.kinds() == {("ok", ""): 6}
    assert result.history_answers() == [ANSWER] * 6  # exactly the server's answers
    assert {len(r["chunk_times"]) for r in result.rows} == {6}


@pytest.mark.parametrize("where", ["same", "later"])
def test_the_stream_ends_at_done(tmp_path: Path, where: str) -> None:
    """Events and garbage after ``[DONE]`` are ignored; the connection is not reused (the
    server answers 500 to a request on a connection it sent them on)."""
    result = run(tmp_path, "data_after_done", where=where, think=0.3)
    assert result.audit is not None
    assert result.audit.kinds() == {("ok", ""): 6}
    assert result.history_answers() == [ANSWER] * 6  # no "AFTER"
    for row in result.rows:  # the answer ended at [DONE], not at the bytes 150 ms after it
        assert row["completed_at"] - row["chunk_times"][-1] < 0.1


@pytest.mark.parametrize(
    ("when", "framing"), [("end", "chunked"), ("end", "length"), ("idle", "chunked")]
)
def test_stray_bytes_close_the_connection(tmp_path: Path, when: str, framing: str) -> None:
    """Bytes past the end of a response, or on an idle connection: the response stands, the
    connection is closed, the next turn goes on a fresh one (a reused one would get a 500)."""
    result = run(tmp_path, "stray_after_response", when=when, framing=framing, think=0.3)
    assert result.audit is not None
    assert result.audit.kinds() == {("ok", ""): 6}
    assert result.history_answers() == [ANSWER] * 6  # never "stray"


# --------------------------------------------------------------- the https path (aiohttp)


async def aiohttp_results(base_url: str, count: int) -> list[Result]:
    """``count`` requests, one after the other, through the worker's aiohttp path (the https
    client, here over plain http on loopback), in this process."""
    from veeksha.dispatch import aiohttp_client

    a, b = socket.socketpair()
    settings = WorkerSettings(endpoint=f"{base_url}/chat/completions", request_timeout_s=20)
    worker = Worker(0, settings, a)
    worker._loop = asyncio.get_running_loop()
    worker._session = aiohttp_client.make_session(settings, _sent_slot)
    results = []
    try:
        for i in range(count):
            await worker._run_item(WorkItem(i, [("user", "hi")], 6, 0), time.monotonic_ns())
            results.append(worker._outbox.pop())
    finally:
        await worker._session.close()
        a.close()
        b.close()
    return results


@pytest.mark.parametrize(
    ("behaviour", "options", "message"),
    [
        ("invalid_utf8", {}, "invalid UTF-8 in the response (b'\\xff': invalid start byte)"),
        ("status_2xx", {}, "Bad status line: Invalid status code: b'HTTP/1.1 2xx OK'"),
        ("header_without_colon", {}, "Invalid header token: b'this is no header'"),
        ("bad_chunk_size", {"size": "-6", "joined": "1"}, "Invalid character in chunk size: b'-6'"),
        ("no_content", {}, "HTTP 204: a response without content"),
        ("bad_content_length", {"length": "-5"}, "Invalid character in Content-Length"),
        ("long_line", {"mb": 20}, "an SSE line longer than 16,777,216 bytes"),
        ("interim_responses", {}, ""),
        ("bom_first", {}, ""),
    ],
)
def test_the_aiohttp_path_reads_the_same(
    tmp_path: Path, behaviour: str, options: dict[str, str], message: str
) -> None:
    """What aiohttp's own parser catches is filed as the server's fault too; the SSE rules
    (UTF-8, the line limit, the byte order mark) are the same objects' on both paths. Not on
    this path: stray bytes on an idle connection (aiohttp keeps them for the next response),
    a chunk size ``zz`` and a head that never ends (aiohttp waits: a timeout), and a bad chunk
    size that arrives in a later read than the good chunks: aiohttp 3.14's C parser keeps it
    unparsed and the request ends as a timeout (our own http path files it as malformed, see
    above), so here the whole answer comes in one write."""
    with HostileServer(WIRE + behaviour, tmp_path, **options) as server:
        first, second = asyncio.run(aiohttp_results(server.base_url, 2))
    if message:
        assert (first.status, first.error_kind) == ("error", "malformed_response")
        assert first.error_message.startswith(message), first.error_message
    else:
        assert (first.status, first.output_text) == ("ok", ANSWER)
    assert (second.status, second.output_text) == ("ok", ANSWER)
