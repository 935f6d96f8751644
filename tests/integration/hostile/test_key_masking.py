"""A server that echoes the API key back (in an HTTP error body, JSON-escaped, URL-encoded, in
an in-stream ``error`` event, in an SSE event that is not JSON, in a status line that is not
HTTP), with the key placed across the cut of the recorded message at every offset: no piece of
the key's secret part, 8 characters or more, in any of its forms, reaches the run folder (raw
bytes and decoded Parquet), run.log, stdout or stderr. The set-up calls (the probe, the server
tokenizer) that quote an echoing server are masked the same way."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from pathlib import Path

import pytest

from tests.integration.hostile.behaviours_probe import echo_forms
from tests.integration.hostile.harness import HostileServer, hostile_run, hostile_scenario
from tests.integration.robustness.helpers import cli_env

ECHO = "tests.integration.hostile.behaviours_probe:echo_key"
FAULTS = "tests.integration.hostile.behaviours_probe:setup_fault"
_FRAGMENT = 8


def _key() -> str:
    """A fresh key with the characters that JSON and URLs escape (as base64 keys have)."""
    parts = [uuid.uuid4().hex[:12] for _ in range(3)]
    return f"sk-{parts[0]}/+{parts[1]}={parts[2]}"


def _fragments(key: str) -> set[bytes]:
    """Every 8-character piece of the key's secret part, as sent, JSON-escaped and
    URL-encoded."""
    secret = key[3:]
    forms = {
        secret,
        json.dumps(secret)[1:-1].replace("/", "\\/"),
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
    }
    return {
        form[i : i + _FRAGMENT].encode() for form in forms for i in range(len(form) - _FRAGMENT + 1)
    }


def _leaks(data: bytes, fragments: set[bytes]) -> list[bytes]:
    return sorted(f for f in fragments if f in data)


def test_an_echoed_key_never_reaches_the_results(tmp_path: Path) -> None:
    key = _key()
    lo, hi = 300 - len(key) - 10, 310  # the key from wholly before the 300th character to after
    requests = len(echo_forms) * (hi - lo + 1)
    with HostileServer(ECHO, tmp_path, lo=lo, hi=hi) as server:
        run = hostile_run(
            tmp_path,
            hostile_scenario(server.base_url, sessions=requests, turns=1, rate=250),
            env=cli_env(OPENAI_API_KEY=key),
            timeout=120,
        )
        received = server.received()
    # the key was really sent, and really echoed
    assert {r["headers"]["authorization"] for r in received} == {f"Bearer {key}"}
    assert run.audit is not None
    assert run.run_dir is not None
    kinds = run.audit.kinds()
    assert sum(kinds.values()) == requests
    assert set(kinds) == {
        ("error", "http_4xx"),  # raw (401), url and url_plus (403)
        ("error", "http_5xx"),  # json (500) and the in-stream error (code 500)
        ("error", "malformed_response"),  # the event not JSON, the status line not HTTP
    }, kinds

    fragments = _fragments(key)
    files = [p for p in run.run_dir.rglob("*") if p.is_file()]
    assert {"requests.parquet", "run.log", "trace.jsonl", "summary.json"} <= {p.name for p in files}
    leaked = {str(p): _leaks(p.read_bytes(), fragments) for p in files}
    assert not any(leaked.values()), {p: f for p, f in leaked.items() if f}
    for table in (run.audit.requests, run.audit.sessions):  # decoded, in case compression hid it
        decoded = json.dumps(table.to_pylist(), default=str).encode()
        assert not _leaks(decoded, fragments)
        assert not _leaks(decoded.decode("unicode_escape").encode(), fragments)
    assert not _leaks(run.result.output.encode(), fragments)
    masked = {r["error_kind"] for r in run.rows if "***" in r["error_message"]}
    assert masked == {kind for _, kind in kinds}  # every form was shown, masked, somewhere


@pytest.mark.parametrize(
    ("where", "fault"),
    [("models", "not_http"), ("tokenize", "not_http"), ("tokenize", "unauthorized")],
)
def test_a_set_up_call_that_echoes_the_key_is_quoted_masked(
    tmp_path: Path, where: str, fault: str
) -> None:
    key = _key()
    with HostileServer(FAULTS, tmp_path, where=where, fault=fault) as server:
        run = hostile_run(
            tmp_path,
            hostile_scenario(server.base_url, client_extra="  tokenizer: {type: server}"),
            env=cli_env(OPENAI_API_KEY=key),
            expect_code=2,
            audit=False,
        )
    assert "***" in run.result.stderr  # what the server sent is quoted, the key masked
    assert run.run_dir is not None
    fragments = _fragments(key)
    assert not _leaks(run.result.output.encode(), fragments), run.result.stderr
    for path in run.run_dir.rglob("*"):
        if path.is_file():
            assert not _leaks(path.read_bytes(), fragments), path


def test_every_clients_key_is_masked(tmp_path: Path) -> None:
    """Two clients with different keys (one written in the scenario, one from a variable),
    both echoed back by the server: neither key reaches any file of the run folder (run.log,
    config.yaml, summary.json, trace.jsonl, Parquet raw and decoded) nor the command's output."""
    key_a, key_b = _key(), _key()
    requests = 2 * len(echo_forms)
    with HostileServer(ECHO, tmp_path, lo=280, hi=280) as server:
        base = hostile_scenario(server.base_url, sessions=requests, turns=1, rate=250)
        head, _, rest = base.partition("client:\n")
        rest = rest.split("\n", 3)[3]  # (the single client's three lines)
        clients = (
            "clients:\n"
            f"  - {{name: a, api_base: {server.base_url}, model: m, api_key: '{key_a}'}}\n"
            f"  - {{name: b, api_base: {server.base_url}, model: m, api_key_env: KEY_B}}\n"
        )
        run = hostile_run(tmp_path, head + clients + rest, env=cli_env(KEY_B=key_b), timeout=120)
        received = server.received()
    sent = {r["headers"]["authorization"] for r in received if r["method"] == "POST"}
    assert sent == {f"Bearer {key_a}", f"Bearer {key_b}"}  # both keys were sent and echoed
    assert run.audit is not None
    assert run.run_dir is not None
    assert {r["client"] for r in run.rows} == {"a", "b"}
    files = [p for p in run.run_dir.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"requests.parquet", "run.log", "config.yaml", "summary.json", "trace.jsonl"} <= names
    for key in (key_a, key_b):
        fragments = _fragments(key)
        leaked = {str(p): _leaks(p.read_bytes(), fragments) for p in files}
        assert not any(leaked.values()), {p: f for p, f in leaked.items() if f}
        for table in (run.audit.requests, run.audit.sessions):
            assert not _leaks(json.dumps(table.to_pylist(), default=str).encode(), fragments)
        assert not _leaks(run.result.output.encode(), fragments)
    assert any("***" in r["error_message"] for r in run.rows if r["client"] == "b")
