"""The start-up probe against a real server given its root instead of its ``/v1`` base: every
request would be a 404 (``POST /chat/completions``), so the run is refused before it starts,
naming the base to use. A server without ``/models`` is tried with one request of one token:
one whose completions work is accepted, a web server that is not an OpenAI API is exit 2."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.robustness.helpers import run_cli
from veeksha.engine.target import check_reachable, trial_request
from veeksha.errors import TargetError
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("slash", ["", "/"])
def test_a_root_without_v1_is_refused_naming_the_base(
    fast_simulator: SimulatorProcess, slash: str
) -> None:
    root = fast_simulator.root_url.rstrip("/")
    with pytest.raises(TargetError) as caught:
        check_reachable(root + slash, None, model="veeksha-sim")
    assert str(caught.value) == (
        f"GET {root}/models answered HTTP 404 and {root}/v1/models lists models: every request"
        f" would be a 404; set client.api_base to {root}/v1"
    )
    check_reachable(fast_simulator.base_url, None, model="veeksha-sim")  # (the base itself)


def test_a_404_with_nothing_under_v1_either_stays_reachable(
    fast_simulator: SimulatorProcess,
) -> None:
    # (some servers have no /models: a base that answers HTTP at all is accepted, as before)
    check_reachable(fast_simulator.base_url + "/nothing", None, model="veeksha-sim")


@contextmanager
def _server(argv: list[str], port: int) -> Iterator[list[str]]:
    """The server of ``argv`` listening on ``port``; the list gets its output lines at exit."""
    output: list[str] = []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # (listening once a connection is accepted)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.02)
        yield output
    finally:
        proc.kill()
        output += proc.communicate()[0].splitlines()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_without_models_is_tried_with_one_request_of_one_token(tmp_path: Path) -> None:
    port = _free_port()
    argv = [sys.executable, str(Path(__file__).with_name("no_models_server.py")), str(port)]
    base = f"http://127.0.0.1:{port}/v1"
    client = load_scenario_text(f"client: {{api_base: '{base}', model: m}}", "s.yaml").client
    with _server(argv, port) as output:
        check_reachable(base, None, model="m", trial=trial_request(client, "m"))  # (it answers)
        wrong = trial_request(client, "other")
        with pytest.raises(TargetError) as caught:
            check_reachable(base, None, model="other", trial=wrong)
    assert [json.loads(line) for line in output[1:]] == [
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hello"}],
            "max_completion_tokens": 1,
        },
        {
            "model": "other",
            "messages": [{"role": "user", "content": "Hello"}],
            "max_completion_tokens": 1,
        },
    ]
    assert str(caught.value) == (
        f"GET {base}/models answered HTTP 404, and a request of one token, POST "
        f'{base}/chat/completions, HTTP 400: {{"error": {{"message": "bad request"}}}}; every '
        "request of the run would fail: is client.api_base the address of an OpenAI-compatible "
        "API, and client.model 'other' a model it serves?"
    )


def test_a_web_server_that_is_not_an_openai_api_is_exit_2_before_the_run(tmp_path: Path) -> None:
    """A plain web server (404 to GET /v1/models, 501 to every POST) used to pass the probe: the
    run sent every request to it, all failed, and it ended with exit 0."""
    port = _free_port()
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    with _server(argv, port):
        result = run_cli(
            "run",
            str(REPO / "scenarios" / "quickstart.yaml"),
            *("--set", f"client.api_base=http://127.0.0.1:{port}/v1", "--set", "client.model=m"),
            *("--output-dir", str(tmp_path / "out"), "-q"),
        )
    assert result.code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.strip() == (
        f"error: GET http://127.0.0.1:{port}/v1/models answered HTTP 404, and a request of one "
        f"token, POST http://127.0.0.1:{port}/v1/chat/completions, HTTP 501: an HTML page "
        "(Error response); every request of the run would fail: is client.api_base the address "
        "of an OpenAI-compatible API, and client.model 'm' a model it serves?"
    )
    assert not list((tmp_path / "out").glob("*/requests.parquet"))
