"""Waiting for a server that is starting (``client.ready_timeout``, a microbenchmark's
``--ready_timeout``): a run launched before its server is there waits while nothing listens and
while the server answers 503 as llama.cpp does while it loads (the simulator's ``loading_s``:
its models' list answers meanwhile, its requests do not), then runs as any other. Without the
wait a gateway's 503 is exit 2 naming the setting, and a loading llama.cpp's requests fail as
rows; when the wait runs out it is exit 2 before anything is sent."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.robustness.helpers import cli_env, run_cli, veeksha_cmd, write_scenario
from veeksha.net import fetch
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess

pytestmark = pytest.mark.timeout(120)

SCENARIO = """
seed: 3
traffic_scheduler: {{type: rate, interval_generator: {{type: fixed, interval: 0.02}}}}
session_generator:
  session_graph: {{type: linear, num_request_generator: {{type: fixed, value: 1}}}}
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 16}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 4}}}}}}
client: {{api_base: "http://127.0.0.1:{port}/v1", model: veeksha-sim{more}}}
runtime: {{max_sessions: 6, benchmark_timeout: 30, num_workers: 1}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.02)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def loading_simulator() -> Iterator[list[SimulatorProcess]]:
    """Simulators spawned by the test itself (a fixed port, not waited for), stopped after."""
    started: list[SimulatorProcess] = []
    yield started
    for sim in started:
        sim.stop()


def _spawn(started: list[SimulatorProcess], port: int, loading_s: float) -> SimulatorProcess:
    sim = SimulatorProcess(SimulatorConfig(loading_s=loading_s), port=port, fork=True)
    started.append(sim)
    sim.spawn()
    return sim


def test_a_run_started_before_its_server_waits_for_it_and_then_runs(
    tmp_path: Path, loading_simulator: list[SimulatorProcess]
) -> None:
    port = _free_port()
    scenario = write_scenario(tmp_path, SCENARIO.format(port=port, more=", ready_timeout: 60"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        veeksha_cmd("run", str(scenario), "--output-dir", str(out), "--no-plots"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=cli_env(),
    )
    try:
        # (the run's first probe finds nothing listening: it has not started yet)
        log = None
        deadline = time.monotonic() + 30
        while log is None and time.monotonic() < deadline:
            log = next(out.glob("*/run.log"), None) if out.exists() else None
            time.sleep(0.05)
        assert log is not None, "the run made no folder"
        while "waiting up to 60 s" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        _spawn(loading_simulator, port, loading_s=1.5)
        _listening(port)
        loading = fetch("GET", f"http://127.0.0.1:{port}/health")
        assert loading.status == 503, "the simulator was loaded before the run could see it"
        assert fetch("GET", f"http://127.0.0.1:{port}/v1/models").status == 200  # (as llama.cpp)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    text = output.decode()
    assert proc.returncode == 0, text[-3000:]
    said = log.read_text()
    base = f"http://127.0.0.1:{port}/v1"
    waits = [line for line in said.splitlines() if "(client.ready_timeout)" in line]
    # one line when the wait begins, one when what stops the server changes: nothing listens,
    # then its models are listed but a request of one token is refused while it loads
    assert len(waits) == 2, said
    assert f"waiting up to 60 s (client.ready_timeout) for {base}: GET {base}/models" in waits[0]
    assert "Connection refused" in waits[0]
    loading_line = f'POST {base}/chat/completions: HTTP 503: {{"error":{{"code":503,"message":"Lo'
    assert loading_line in waits[1]
    assert f"{base} is ready after " in said
    assert said.index("is ready after") < said.index("target: ")
    rows = pd.read_parquet(next(out.glob("*/requests.parquet")))
    assert len(rows) == 6
    assert (rows.status == "ok").all()  # (nothing of the run was sent while it loaded)
    assert rows.output_text.isna().all()  # (answers are kept with include_content only)


class _Gateway(BaseHTTPRequestHandler):
    """A gateway whose upstream is not up: 503 to everything."""

    def _unavailable(self) -> None:
        body = b'{"error": "upstream connect error"}'
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _unavailable

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def gateway() -> Iterator[int]:
    """The port of a real HTTP server answering 503 to every request (a gateway whose
    upstream is down), in a thread of this process."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_without_the_wait_a_503_is_exit_2_naming_ready_timeout(
    tmp_path: Path, gateway: int
) -> None:
    scenario = write_scenario(tmp_path, SCENARIO.format(port=gateway, more=""))
    result = run_cli(
        "run", str(scenario), "--output-dir", str(tmp_path / "out"), "-q", "--no-plots"
    )
    result.assert_clean_error(
        2,
        f"GET http://127.0.0.1:{gateway}/v1/models answered HTTP 503",
        "upstream connect error",
        "not serving yet (still loading its model?)",
        "to wait for a server that is starting, set client.ready_timeout (seconds)",
    )
    assert not list((tmp_path / "out").glob("*/requests.parquet"))


def test_without_the_wait_a_loading_llama_cpp_fails_every_request_as_a_row(
    tmp_path: Path, loading_simulator: list[SimulatorProcess]
) -> None:
    """It lists its models, so the start-up check passes: what the wait is for."""
    port = _free_port()
    _spawn(loading_simulator, port, loading_s=60)
    _listening(port)
    scenario = write_scenario(tmp_path, SCENARIO.format(port=port, more=""))
    result = run_cli(
        "run", str(scenario), "--output-dir", str(tmp_path / "out"), "-q", "--no-plots"
    )
    assert result.code == 0, result.output[-3000:]
    (run_dir,) = (tmp_path / "out").iterdir()
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert len(rows) == 6
    assert (rows.status == "error").all()
    assert (rows.http_status == 503).all()
    assert rows.error_message.str.contains("Loading model").all()
    health = json.loads((run_dir / "health.json").read_text())
    answered = next(c for c in health["checks"] if c["name"] == "answered")
    assert answered["status"] == "FAIL"
    assert "client.ready_timeout waits for one that is starting" in answered["detail"]


def test_the_wait_runs_out_with_exit_2_naming_what_the_server_said(tmp_path: Path) -> None:
    port = _free_port()  # (nothing ever listens there)
    text = SCENARIO.format(port=port, more=", ready_timeout: 0.5")
    scenario = write_scenario(tmp_path, text)
    start = time.monotonic()
    result = run_cli(
        "run", str(scenario), "--output-dir", str(tmp_path / "out"), "-q", "--no-plots"
    )
    took = time.monotonic() - start
    result.assert_clean_error(
        2,
        f"http://127.0.0.1:{port}/v1 was not ready within 0.5 s",
        "Connection refused",
        "start the server, or raise client.ready_timeout if it needs longer",
    )
    assert took < 25
    # without a wait, nothing listening is one attempt, its fix naming the wait too
    again = ["--output-dir", str(tmp_path / "out2"), "--set", "client.ready_timeout=0"]
    result = run_cli("run", str(scenario), *again, "-q", "--no-plots")
    result.assert_clean_error(
        2, "Connection refused", "set client.ready_timeout (seconds)", "Fix client.api_base"
    )


def _prefill(tmp_path: Path, port: int, *more: str) -> subprocess.CompletedProcess[str]:
    args = ["--api_base", f"http://127.0.0.1:{port}/v1", "--model", "veeksha-sim"]
    sizes = ["--input_lengths", "16", "--samples_per_length", "2", "--no_plots"]
    out = ["--output_dir", str(tmp_path / "out")]
    tmp_path.mkdir()
    return subprocess.run(
        [sys.executable, "-m", "veeksha.cli", "prefill", *args, *sizes, *more, *out],
        capture_output=True,
        text=True,
        timeout=100,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        check=False,
        cwd=tmp_path,
    )


def test_a_microbenchmark_waits_with_its_own_flag(
    tmp_path: Path, loading_simulator: list[SimulatorProcess], gateway: int
) -> None:
    proc = _prefill(tmp_path / "refused", gateway)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "set --ready_timeout (seconds)" in proc.stderr
    assert not (tmp_path / "refused" / "out").exists()

    port = _free_port()
    _spawn(loading_simulator, port, loading_s=5)  # (longer than the command's start-up)
    _listening(port)
    proc = _prefill(tmp_path / "waited", port, "--ready_timeout", "60")
    assert proc.returncode in (0, 4), proc.stdout + proc.stderr
    assert "(--ready_timeout)" in proc.stdout
    assert "HTTP 503" in proc.stdout
    assert "is ready after" in proc.stdout
    (folder,) = sorted((tmp_path / "waited" / "out").iterdir())
    assert (folder / "prefill_results.json").exists()


def test_a_distributed_run_waits_once_on_its_driver(
    loading_simulator: list[SimulatorProcess],
) -> None:
    """The driver's wait before its shards agree on t0 (no cluster needed: it is the driver's
    own step); a client without api_base (a simulator of each shard's own) is not waited for."""
    from veeksha.distributed.driver import _wait_for_servers
    from veeksha.scenario.loader import load_scenario_text

    port = _free_port()
    _spawn(loading_simulator, port, loading_s=1.0)
    _listening(port)
    base = f"http://127.0.0.1:{port}/v1"
    far = f"{{name: far, api_base: '{base}', model: veeksha-sim, ready_timeout: 30}}"
    text = SCENARIO.format(port=port, more="").replace("client: {", "# {")
    text += f"clients: [{far}, {{name: own, model: veeksha-sim}}]\n"
    scenario = load_scenario_text(text, "s.yaml")
    said: list[str] = []
    _wait_for_servers(scenario, said.append)
    assert len(said) == 2, said
    assert said[0].startswith(f"waiting up to 30 s (far.ready_timeout) for {base}")
    assert f"POST {base}/chat/completions: HTTP 503" in said[0]
    assert said[1].startswith(f"http://127.0.0.1:{port}/v1 is ready after ")
    assert fetch("GET", f"http://127.0.0.1:{port}/v1/models").status == 200
