"""``connect_time`` in a real run: a closed loop of 12 sessions on one worker against the real
simulator, through a TCP forwarder in the test that counts the connections it is asked for.

The worker pre-warms 8 connections before t0; the first 12 requests are in flight together (the
simulator takes 0.5 s to its first token), so 4 of them open a connection, and every later
request finds the connection of the one whose answer made room for it idle. The rows with a
``connect_time`` are exactly the connections the worker opened beyond its pre-warmed ones (the
main process' own ``GET /models`` are told apart by their first bytes), and each set-up lies
between the request's take-up by the worker and its write."""

from __future__ import annotations

import json
import select
import socket
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import StartSimulator
from veeksha.engine.run import run_scenario
from veeksha.scenario.loader import load_scenario_text

pytestmark = pytest.mark.timeout(120)

SCENARIO = """
seed: 5
traffic_scheduler: {{type: concurrent, target_concurrent_sessions: 12, rampup_seconds: 0}}
session_generator:
  type: synthetic
  session_graph: {{type: single_request}}
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 16}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 4}}}}}}
client: {{api_base: "{api_base}", model: veeksha-sim}}
runtime: {{max_sessions: 36, benchmark_timeout: 60, num_workers: 1}}
server_metrics: {{enabled: false}}
"""
PREWARMED = 8  # a worker's connections opened before t0 (dispatch.worker._prewarm)


class Forwarder:
    """Forwards every connection to ``upstream``; counts them by their first bytes (``GET``:
    the main process' model check; ``POST`` or nothing: a worker's)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = self.listener.getsockname()[1]
        self.firsts: list[bytes] = []  # each connection's first bytes (b"": none came)
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept)
        self._accepting.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # (closed)
            self.firsts.append(b"")
            thread = threading.Thread(target=self._pump, args=(client, len(self.firsts) - 1))
            self._threads.append(thread)
            thread.start()

    def _pump(self, client: socket.socket, slot: int) -> None:
        """Both directions of one connection until either side closes it."""
        with client, socket.create_connection(self.upstream) as server:
            peers = {client: server, server: client}
            while True:
                readable, _, _ = select.select(list(peers), [], [], 60)
                try:
                    for source in readable:
                        data = source.recv(65536)
                        if not data:
                            return
                        if source is client and not self.firsts[slot]:
                            self.firsts[slot] = data[:4]
                        peers[source].sendall(data)
                except OSError:
                    return

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self._accepting.join(10)
        for thread in self._threads:
            thread.join(10)  # (the run is over: its connections are closed)


def test_connect_time_marks_exactly_the_requests_whose_worker_opened_a_connection(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    sim = start_simulator(preset="fast", ttft_ms=500)
    assert sim.base_url is not None
    host, port = sim.base_url.split("//")[1].split("/")[0].split(":")
    forwarder = Forwarder((host, int(port)))
    try:
        text = SCENARIO.format(api_base=f"http://127.0.0.1:{forwarder.port}/v1")
        scenario = load_scenario_text(text, "s.yaml")
        run_dir = run_scenario(scenario, tmp_path / "run", quiet=True, plots=False).run_dir
    finally:
        forwarder.close()
    rows = pq.read_table(run_dir / "requests.parquet").to_pylist()
    assert len(rows) == 36
    assert all(r["status"] == "ok" for r in rows), {r["error_message"] for r in rows}
    opened = [r for r in rows if r["connect_time"] is not None]
    workers = [first for first in forwarder.firsts if not first.startswith(b"GET")]
    assert all(first in (b"POST", b"") for first in workers)
    assert len(workers) == PREWARMED + len(opened)  # exactly the connections opened per request
    assert len(opened) == 12 - PREWARMED  # the first wave's beyond the pre-warmed ones
    for r in opened:
        assert 0 < r["connect_time"] < 5
        assert r["received_at"] + r["connect_time"] <= r["sent_at"] + 1e-9
    health = json.loads((run_dir / "health.json").read_text())
    check = next(c for c in health["checks"] if c["name"] == "generator_saturation")
    assert check["statistics"]["connections_opened"] == len(opened)
    lifecycle = next(c for c in health["checks"] if c["name"] == "lifecycle_delays")
    assert lifecycle["statistics"]["connect"]["count"] == len(opened)
