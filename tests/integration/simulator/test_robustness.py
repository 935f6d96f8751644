"""Bad requests get OpenAI-style 4xx errors and the server lives on; HTTP framing; processes."""

from __future__ import annotations

import json
import socket

import psutil
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.simulator.helpers import MODEL, chat, request
from veeksha.simulator.process import SimulatorProcess


def _port(sim: SimulatorProcess) -> int:
    return int(sim.root_url.rsplit(":", 1)[1])


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        ({"messages": [{"role": "user", "content": "ba"}]}, 400, "model"),
        ({"model": MODEL}, 400, "messages"),
        ({"model": MODEL, "messages": []}, 400, "messages"),
        ({"model": MODEL, "messages": [{"content": "ba"}]}, 400, "messages"),
        ({"model": "gpt-9", "messages": [{"role": "user", "content": "ba"}]}, 404, "model"),
        (chat(max_tokens=0), 400, "max_tokens"),
        (chat(max_tokens="ten"), 400, "max_tokens"),
        (chat(n=2), 400, "n"),
        (chat(max_tokens=4, min_tokens=5), 400, "min_tokens"),
        (chat(stream="yes"), 400, "stream"),
        (chat(max_tokens=200_000), 400, None),
    ],
)
def test_bad_requests_get_openai_errors(
    fast_simulator: SimulatorProcess, body: object, status: int, param: str | None
) -> None:
    reply = request(f"{fast_simulator.base_url}/chat/completions", body)
    assert reply.status == status
    error = reply.json()["error"]
    assert error["message"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_unknown_paths_and_methods(fast_simulator: SimulatorProcess) -> None:
    assert request(f"{fast_simulator.base_url}/nothing", {}).status == 404
    assert request(f"{fast_simulator.base_url}/chat/completions", method="GET").status == 405
    assert request(f"{fast_simulator.base_url}/completions", {"model": MODEL}).status == 400
    assert request(f"{fast_simulator.root_url}/detokenize", {"tokens": "x"}).status == 400


def test_keep_alive_pipelining_chunked_bodies_and_broken_framing(
    fast_simulator: SimulatorProcess,
) -> None:
    body = json.dumps(chat(max_tokens=2, stream=False)).encode()
    one = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (
        len(body),
        body,
    )
    chunked = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: close\r\n\r\n%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)
    )
    with socket.create_connection(("127.0.0.1", _port(fast_simulator)), timeout=5) as sock:
        sock.sendall(one + one + chunked)  # pipelined; the last closes the connection
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 3
    assert data.count(b'"usage"') == 3

    with socket.create_connection(("127.0.0.1", _port(fast_simulator)), timeout=5) as sock:
        sock.sendall(b"garbage\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 400 ")
    assert b'"error"' in data
    assert request(f"{fast_simulator.root_url}/health", method="GET").status == 200


def test_two_processes_share_the_port_and_leave_no_orphans(start_simulator: StartSimulator) -> None:
    sim = start_simulator(processes=2)
    assert sim.pid is not None
    parent = psutil.Process(sim.pid)
    tree = [parent, *parent.children(recursive=True)]
    assert len(tree) >= 2
    seen = set()
    for _ in range(60):
        answer = request(f"{sim.base_url}/chat/completions", chat(stream=False, max_tokens=1))
        seen.add(answer.json()["timings"]["process"])
        if seen == {0, 1}:
            break
    assert seen == {0, 1}
    sim.stop()
    # psutil.Process remembers each process' start time, so a recycled pid is not mistaken for
    # a survivor; children get a moment to notice their parent is gone.
    _, alive = psutil.wait_procs(tree, timeout=5)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_cli_command_is_registered_and_loads_yaml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from veeksha.cli import main
    from veeksha.simulator.cli import load_config

    result = CliRunner().invoke(main, ["sim-server", "--help"])
    assert result.exit_code == 0
    assert "--processes" in result.output
    path = tmp_path / "sim.yaml"
    path.write_text("simulator:\n  preset: realistic\n  decode_step_ms: 3\n")
    config = load_config(path, processes=2)
    assert (config.preset, config.decode_step_ms, config.processes) == ("realistic", 3.0, 2)
    assert config.max_num_seqs == 256
