"""The calls veeksha makes before the traffic (the start-up probe ``GET /v1/models`` and the
server tokenizer's ``/tokenize``), answered by a hostile server process over loopback: each
failure is exit 2 with one line naming the URL, within the set-up deadline, before any request
is sent; a redirect to another origin is not followed (the key stays home); one to the same
origin is followed with the key."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.hostile.harness import (
    HostileRun,
    HostileServer,
    hostile_run,
    hostile_scenario,
)
from tests.integration.robustness.helpers import cli_env

FAULTS = "tests.integration.hostile.behaviours_probe:setup_fault"
KEY = f"sk-probe-{uuid.uuid4().hex}"  # random: no piece of it occurs by chance in Parquet
SERVER_TOKENIZER = "  tokenizer: {type: server}"


def _env(**extra: str) -> dict[str, str]:
    return cli_env(OPENAI_API_KEY=KEY, **extra)


def _run(tmp_path: Path, scenario_text: str, **options: Any) -> HostileRun:
    """``hostile_run`` with the command's code in this process: the probe and the tokenizer's
    calls are the main process' code, and the workers are real processes all the same (each
    run saves a veeksha process' start-up)."""
    return hostile_run(tmp_path, scenario_text, in_process=True, **options)


def _posts(received: list[dict[str, Any]]) -> list[str]:
    return [r["path"] for r in received if r["path"].endswith("completions")]


def _one_line_error(run: HostileRun, *needles: str) -> str:
    """The run's stderr: one ``error:`` line naming every needle, no key."""
    lines = run.result.stderr.strip().splitlines()
    assert len(lines) == 1, run.result.stderr
    assert lines[0].startswith("error: "), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert KEY not in run.result.output
    return lines[0]


@pytest.mark.parametrize(
    ("fault", "what"),
    [
        ("not_http", "the answer is not HTTP (it began 'SSH-2.0-OpenSSH_9.6 Bearer ***"),
        ("truncated", "the answer was cut short (20 of 1000 bytes of its body came)"),
        ("bad_length", "Content-Length is not a number"),
        ("reset", "closed the connection without answering"),
        ("not_json", "answered HTTP 200 with something that is not JSON (text/html)"),
        ("redirect_loop", "more than 5 redirects"),
        ("huge", "body is larger than 8,388,608 bytes"),
        ("unauthorized", "refused the credentials (HTTP 401)"),
    ],
)
def test_a_broken_probe_answer_is_exit_2_in_one_line(tmp_path: Path, fault: str, what: str) -> None:
    with HostileServer(FAULTS, tmp_path, fault=fault) as server:
        run = _run(
            tmp_path, hostile_scenario(server.base_url), env=_env(), expect_code=2, audit=False
        )
        received = server.received()
    _one_line_error(run, server.base_url, what)
    assert not _posts(received), "a request was sent after a failed probe"
    assert run.run_dir is not None
    log = (run.run_dir / "run.log").read_text()
    assert what in log
    assert KEY not in log


@pytest.mark.parametrize("fault", ["slow_status", "slow_body"])
def test_a_byte_a_second_probe_answer_ends_at_the_deadline(tmp_path: Path, fault: str) -> None:
    """The deadline is for the whole answer: a server that sends a byte a second (each read
    well within any per-read timeout) is cut off at it."""
    with HostileServer(FAULTS, tmp_path, fault=fault, gap=0.5) as server:
        started = time.monotonic()
        run = _run(
            tmp_path,
            hostile_scenario(server.base_url),
            env=_env(VEEKSHA_SETUP_TIMEOUT_S="2"),
            expect_code=2,
            audit=False,
            timeout=30,
        )
        elapsed = time.monotonic() - started
        received = server.received()
    _one_line_error(run, f"{server.base_url}/models", "no complete answer within 2 s")
    # the deadline plus the start-up of a veeksha process on a loaded machine; without the
    # deadline the answer would take ~50 s (a byte every 0.5 s)
    assert elapsed < 2 + 20, elapsed
    assert not _posts(received)


def test_a_redirect_to_another_server_is_not_followed(tmp_path: Path) -> None:
    """A 307 to another origin (another port): refused, and the other server never hears of
    the request, so it never sees the key."""
    correct = "tests.integration.hostile.behaviours_basic:correct"
    with HostileServer(correct, tmp_path) as elsewhere:
        to = f"{elsewhere.base_url}/models"
        with HostileServer(FAULTS, tmp_path, fault="redirect", to=to) as server:
            run = _run(
                tmp_path, hostile_scenario(server.base_url), env=_env(), expect_code=2, audit=False
            )
            received = server.received()
        elsewhere_received = elsewhere.received()
    _one_line_error(run, f"{server.base_url}/models", f"redirected (HTTP 307) to {to}")
    assert elsewhere_received == []
    assert [r["headers"].get("authorization") for r in received] == [f"Bearer {KEY}"]


def test_a_redirect_within_the_server_is_followed_with_the_key(tmp_path: Path) -> None:
    with HostileServer(FAULTS, tmp_path, fault="redirect") as server:
        run = _run(tmp_path, hostile_scenario(server.base_url, sessions=2), env=_env())
        received = server.received()
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): 6}
    gets = [(r["path"], r["headers"].get("authorization")) for r in received[:2]]
    assert gets == [("/v1/models", f"Bearer {KEY}"), ("/moved/v1/models", f"Bearer {KEY}")]


# ----------------------------------------------------------------------------- server tokenizer


@pytest.mark.parametrize(
    ("fault", "what"),
    [
        ("not_http", "the answer is not HTTP (it began 'SSH-2.0-OpenSSH_9.6 Bearer ***"),
        ("truncated", "the answer was cut short (20 of 1000 bytes of its body came)"),
        ("reset", "closed the connection without answering"),
        ("not_json", "answered no JSON object ('<html>"),
        ("unauthorized", "answered HTTP 401"),
        ("slow_status", "no complete answer within 2 s"),
    ],
)
def test_a_broken_server_tokenizer_is_exit_2_before_any_request(
    tmp_path: Path, fault: str, what: str
) -> None:
    with HostileServer(FAULTS, tmp_path, where="tokenize", fault=fault, gap=0.5) as server:
        started = time.monotonic()
        run = _run(
            tmp_path,
            hostile_scenario(server.base_url, client_extra=SERVER_TOKENIZER),
            env=_env(VEEKSHA_SETUP_TIMEOUT_S="2"),
            expect_code=2,
            audit=False,
            timeout=30,
        )
        elapsed = time.monotonic() - started
        received = server.received()
    _one_line_error(run, f"{server.root_url}/tokenize", what)
    assert elapsed < 2 + 20, elapsed  # (as above)
    assert not _posts(received)


def test_the_server_tokenizer_gets_the_key_on_the_targets_origin_and_follows_it_there(
    tmp_path: Path,
) -> None:
    with HostileServer(FAULTS, tmp_path, where="tokenize", fault="redirect") as server:
        run = _run(
            tmp_path,
            hostile_scenario(server.base_url, sessions=2, client_extra=SERVER_TOKENIZER),
            env=_env(),
        )
        received = server.received()
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): 6}
    calls = [r for r in received if "tokenize" in r["path"]]
    assert {r["path"] for r in calls} == {"/tokenize", "/moved/tokenize", "/detokenize"}
    assert {r["headers"].get("authorization") for r in calls} == {f"Bearer {KEY}"}


def test_a_server_tokenizer_redirected_elsewhere_is_not_followed(tmp_path: Path) -> None:
    correct = "tests.integration.hostile.behaviours_probe:setup_fault"
    with HostileServer(correct, tmp_path, where="none") as elsewhere:
        to = f"{elsewhere.root_url}/tokenize"
        with HostileServer(FAULTS, tmp_path, where="tokenize", fault="redirect", to=to) as server:
            run = _run(
                tmp_path,
                hostile_scenario(server.base_url, client_extra=SERVER_TOKENIZER),
                env=_env(),
                expect_code=2,
                audit=False,
            )
        elsewhere_received = elsewhere.received()
    _one_line_error(run, f"{server.root_url}/tokenize", f"redirected (HTTP 307) to {to}")
    assert elsewhere_received == []


def test_a_server_tokenizer_that_breaks_after_set_up_never_touches_the_traffic(
    tmp_path: Path,
) -> None:
    """/tokenize answers the calibration at set-up (52 calls on this server's builtin
    tokenizer), then answers garbage: the traffic never calls it, so every request is sent and
    answered and the run ends normally (exit 0); the check after the run, whose sample meets
    the broken endpoint, says it could not be made instead of failing the run."""
    with HostileServer(FAULTS, tmp_path, where="tokenize", fault="not_http", after=60) as server:
        run = _run(
            tmp_path,
            hostile_scenario(
                server.base_url, sessions=300, turns=1, rate=400, client_extra=SERVER_TOKENIZER
            ),
            env=_env(),
            timeout=60,
        )
        received = server.received()
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): 300}
    assert run.audit.metadata["stop_reason"] == "completed"
    calls = [r for r in received if r["path"] == "/tokenize"]
    assert len(calls) == 61  # 60 answered, the 61st broken: the client asks no more
    assert run.run_dir is not None
    health = json.loads((run.run_dir / "health.json").read_text())
    (check,) = [c for c in health["checks"] if c["name"] == "prompt_length"]
    assert check["status"] == "PASS"
    assert "server /tokenize vs target: not checked" in check["detail"]
    assert "the answer is not HTTP" in check["statistics"]["server_tokenize_error"]
    assert KEY not in run.result.output
