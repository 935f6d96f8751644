"""simulator.required_headers: a gateway's check (401, OpenAI-style, the value never quoted)
on every path but /health; count_header counts the generation requests by a header's value."""

from __future__ import annotations

import http.client
import json
import urllib.parse

from tests.integration.conftest import StartSimulator
from tests.integration.simulator.helpers import chat


def _call(url: str, headers: dict[str, str], body: object = None) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        data = None if body is None else json.dumps(body).encode()
        method = "GET" if body is None else "POST"
        conn.request(method, parts.path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_request_without_the_headers_gets_401_and_health_does_not(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(
        required_headers={"X-Api-Key": "k-123456789", "X-Tenant": "acme"},
        count_header="X-Session-Id",
    )
    good = {"x-api-key": "k-123456789", "X-TENANT": "acme"}  # (names: any case)
    status, body = _call(f"{sim.base_url}/chat/completions", {"X-Tenant": "acme"}, chat())
    assert status == 401
    assert json.loads(body) == {
        "error": {
            "message": "header x-api-key missing (simulator.required_headers)",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
    status, body = _call(f"{sim.base_url}/models", {**good, "X-Api-Key": "k-other-value"})
    assert status == 401
    assert b"header x-api-key has the wrong value" in body
    assert b"k-other" not in body
    assert b"k-123" not in body
    assert _call(f"{sim.root_url}/health", {})[0] == 200
    assert _call(f"{sim.root_url}/metrics", {})[0] == 401
    assert _call(f"{sim.base_url}/models", good)[0] == 200
    for session in ("7", "7", "9"):
        status, _ = _call(
            f"{sim.base_url}/chat/completions", {**good, "X-Session-Id": session}, chat()
        )
        assert status == 200
    status, metrics = _call(f"{sim.root_url}/metrics", good)
    assert status == 200
    counted = [
        line
        for line in metrics.decode().splitlines()
        if line.startswith("veeksha_sim_header_requests_total{")
    ]
    assert sorted(line.split(",header=")[1] for line in counted) == [  # (401s: not counted)
        '"X-Session-Id",value="7"} 2',
        '"X-Session-Id",value="9"} 1',
    ]
