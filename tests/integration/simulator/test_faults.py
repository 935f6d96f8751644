"""Each fault kind, at rate 1, over a real connection; and the fault time window."""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import time

import aiohttp
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.simulator.helpers import chat, request, timed_stream
from veeksha.simulator.process import SimulatorProcess


@pytest.mark.parametrize(
    ("kind", "status"), [("http_500", 500), ("http_503", 503), ("http_429", 429)]
)
def test_http_error_faults(start_simulator: StartSimulator, kind: str, status: int) -> None:
    sim = start_simulator(faults={f"{kind}_rate": 1.0, "retry_after_s": 3})
    reply = request(f"{sim.base_url}/chat/completions", chat())
    assert reply.status == status
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if status != 500:
        assert reply.headers["retry-after"] == "3"
    assert request(f"{sim.root_url}/health", method="GET").status == 200


def test_disconnect_mid_stream(start_simulator: StartSimulator) -> None:
    sim = start_simulator(faults={"disconnect_rate": 1.0, "after_tokens": 2})
    conn = http.client.HTTPConnection("127.0.0.1", int(sim.root_url.rsplit(":", 1)[1]), timeout=5)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat(max_tokens=10, ignore_eos=True)))
    resp = conn.getresponse()
    assert resp.status == 200
    with pytest.raises(http.client.IncompleteRead) as caught:
        resp.read()
    conn.close()
    partial = caught.value.partial.decode()
    assert partial.count('"content"') == 2
    assert "[DONE]" not in partial


def test_stall_sends_no_bytes_for_stall_s(start_simulator: StartSimulator) -> None:
    sim = start_simulator(faults={"stall_rate": 1.0, "stall_s": 0.3, "after_tokens": 1})
    url = f"{sim.base_url}/chat/completions"
    _, status, pieces = asyncio.run(timed_stream(url, chat(max_tokens=4, ignore_eos=True)))
    assert status == 200
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(pieces)]
    # (read times: the piece before the stall read late shortens the gap the client sees, by
    # 12 ms once on a loaded CI machine; the server's write times below hold the 0.3 s)
    assert max(gaps) >= 0.2e9
    body = b"".join(p for _, p in pieces).decode()
    assert body.endswith("data: [DONE]\n\n")
    timings = json.loads(body.split("data: ")[-2])["timings"]
    assert timings["fault"] == "stall"
    assert timings["last_token_ns"] - timings["first_token_ns"] >= 0.29e9  # write times: true


def test_malformed_sse_line_then_a_normal_end(start_simulator: StartSimulator) -> None:
    sim = start_simulator(faults={"malformed_sse_rate": 1.0, "after_tokens": 1})
    reply = request(f"{sim.base_url}/chat/completions", chat(max_tokens=3, ignore_eos=True))
    events = reply.events()
    assert events[-1] == "[DONE]"
    bad = []
    for event in events[:-1]:
        try:
            json.loads(event)
        except json.JSONDecodeError:
            bad.append(event)
    assert len(bad) == 1
    assert events.index(bad[0]) == 1  # after one content chunk


def test_slow_headers(start_simulator: StartSimulator) -> None:
    sim = start_simulator(faults={"slow_headers_rate": 1.0, "slow_headers_s": 0.3})
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", int(sim.root_url.rsplit(":", 1)[1]), timeout=5)
    conn.request("POST", "/v1/chat/completions", json.dumps(chat(max_tokens=2)))
    resp = conn.getresponse()
    assert time.monotonic() - start >= 0.29
    assert resp.status == 200
    assert resp.read().endswith(b"data: [DONE]\n\n")
    conn.close()


def test_never_ending_response(start_simulator: StartSimulator) -> None:
    sim = start_simulator(faults={"never_ending_rate": 1.0, "never_ending_interval_s": 0.02})

    async def run() -> list[bytes]:
        pieces: list[bytes] = []
        async with aiohttp.ClientSession() as session:
            body = chat(max_tokens=2, ignore_eos=True)
            async with session.post(f"{sim.base_url}/chat/completions", json=body) as resp:

                async def read() -> None:
                    async for data in resp.content.iter_any():
                        pieces.append(data)

                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(read(), 0.5)
        return pieces

    body = b"".join(asyncio.run(run())).decode()
    assert body.count('"content"') > 5  # far beyond max_tokens=2
    assert "[DONE]" not in body
    time.sleep(0.05)
    metrics = request(f"{sim.root_url}/metrics", method="GET").body.decode()
    assert 'veeksha_sim_requests_cancelled_total{model_name="veeksha-sim",process="0"} 1' in metrics


def test_faults_only_inside_their_window(start_simulator: StartSimulator) -> None:
    sim = start_simulator(faults={"http_500_rate": 1.0, "window_start_s": 1.0, "window_end_s": 1.6})
    url = f"{sim.base_url}/chat/completions"
    assert request(url, chat(stream=False)).status == 200  # before the window
    time.sleep(max(1.05 - _age(sim), 0))
    assert request(url, chat(stream=False)).status == 500
    time.sleep(max(1.65 - _age(sim), 0))
    assert request(url, chat(stream=False)).status == 200


def _age(sim: SimulatorProcess) -> float:
    """Seconds since the server's start, from its /metrics."""
    text = request(f"{sim.root_url}/metrics", method="GET").body.decode()
    line = next(x for x in text.splitlines() if x.startswith("veeksha_sim_uptime_seconds{"))
    return float(line.rsplit(" ", 1)[1])
