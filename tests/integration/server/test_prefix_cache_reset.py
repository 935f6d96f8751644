"""Emptying the server's prefix cache before a run (``prefix_cache_reset``), against simulators
that answer the calls as vLLM (dev mode), SGLang and llama.cpp do: a run after another with
the same seed finds the first run's prompts cached unless the cache was emptied, and emptied it
reads exactly what the first run read; ``api: auto`` finds each server's call; a server with
none, or one that refuses it, is exit 2 before anything is sent; a dry run calls nothing."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import run_as_the_command, run_cli, write_scenario
from veeksha.errors import TargetError
from veeksha.net import fetch
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

SCENARIO = """
seed: 5
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  session_graph:
    type: linear
    num_request_generator: {type: fixed, value: 2}
    request_wait_generator: {type: fixed, interval: 0.01}
  channels: [{type: text, body_length_generator: {type: fixed, value: 80}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 8}}}
client: {api_base: API_BASE, model: veeksha-sim}
runtime: {max_sessions: 8, benchmark_timeout: 60, num_workers: 1}
prefix_cache_reset: {enabled: RESET, api: API}
"""


def _scenario(sim: SimulatorProcess, reset: bool = True, api: str = "auto") -> Any:
    text = SCENARIO.replace("API_BASE", str(sim.base_url)).replace("API", api)
    return load_scenario_text(text.replace("RESET", str(reset).lower()), "s.yaml")


def _cached(run_dir: Path) -> int:
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert len(rows) == 16
    assert (rows.status == "ok").all()
    return int(rows.cached_tokens.sum())


def _resets(sim: SimulatorProcess) -> int:
    text = fetch("GET", f"{sim.root_url}/metrics").body.decode()
    line = next(x for x in text.splitlines() if x.startswith("veeksha_sim_prefix_cache_resets"))
    return int(float(line.split()[-1]))


@pytest.mark.parametrize("api", ["vllm", "sglang", "llama_cpp"])
def test_a_run_after_another_reads_a_cold_cache_only_when_it_was_emptied(
    start_simulator: StartSimulator, tmp_path: Path, api: str
) -> None:
    sim = start_simulator(cache_reset_api=api, max_num_seqs=3, prefix_cache_tokens=100_000)
    first, warm, cold = tmp_path / "first", tmp_path / "warm", tmp_path / "cold"
    run_as_the_command(_scenario(sim), first, quiet=True, plots=False)
    run_as_the_command(_scenario(sim, reset=False), warm, quiet=True, plots=False)
    run_as_the_command(_scenario(sim), cold, quiet=True, plots=False)
    # the second turns find their first turns cached in every run; the same prompts again
    # find the run before's too, unless the cache was emptied
    assert _cached(first) > 0
    assert _cached(warm) > _cached(first)
    assert _cached(cold) == _cached(first)
    assert _resets(sim) == 2
    account = json.loads((cold / "summary.json").read_text())["run"]["prefix_cache_reset"]
    (server,) = account["servers"]
    assert server["server"] == sim.root_url
    assert server["api"] == api
    expected = {
        "vllm": ["POST /reset_prefix_cache"],
        "sglang": ["POST /flush_cache"],
        "llama_cpp": ["GET /slots", *(f"POST /slots/{i}?action=erase" for i in range(3))],
    }
    assert server["calls"] == expected[api]
    log = (cold / "run.log").read_text()
    assert f"prefix cache emptied: {sim.root_url} ({api}: " in log
    assert "prefix_cache_reset" not in json.loads((warm / "summary.json").read_text())["run"]


def test_the_named_api_is_the_only_one_tried(
    start_simulator: StartSimulator, tmp_path: Path
) -> None:
    sim = start_simulator(cache_reset_api="llama_cpp")
    with pytest.raises(TargetError, match=r"\(POST /flush_cache: HTTP 404\)"):
        run_as_the_command(_scenario(sim, api="sglang"), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / "requests.parquet").exists()
    assert _resets(sim) == 0


def test_a_server_without_the_call_is_exit_2_before_anything_is_sent(
    start_simulator: StartSimulator, tmp_path: Path
) -> None:
    sim = start_simulator(cache_reset_api="none")
    with pytest.raises(TargetError) as raised:
        run_as_the_command(_scenario(sim), tmp_path / "run", quiet=True)
    message = str(raised.value)
    said = f"prefix_cache_reset: {sim.root_url} has no call that empties its prefix cache"
    assert said in message
    for call in ("POST /reset_prefix_cache: HTTP 404", "POST /flush_cache: HTTP 404"):
        assert call in message
    assert "GET /slots: HTTP 404" in message
    assert "VLLM_SERVER_DEV_MODE=1" in message
    assert "prefix_cache_reset.enabled: false" in message
    assert TargetError.exit_code == 2
    assert not (tmp_path / "run" / "requests.parquet").exists()
    assert _requests_total(sim) == 0


def _requests_total(sim: SimulatorProcess) -> float:
    text = fetch("GET", f"{sim.root_url}/metrics").body.decode()
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("veeksha_sim_requests_total")
    )


@contextmanager
def _request_in_flight(sim: SimulatorProcess) -> Iterator[None]:
    """A streamed completion held open on the server (its slot runs) while inside."""
    body = json.dumps(
        {"model": "veeksha-sim", "prompt": "hold", "max_tokens": 2000, "stream": True}
    ).encode()
    port = int(str(sim.root_url).rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        conn.sendall(head.encode() + body)
        assert conn.recv(65536).startswith(b"HTTP/1.1 200")
        yield


def test_a_server_that_refuses_the_call_is_exit_2(
    start_simulator: StartSimulator, tmp_path: Path
) -> None:
    """SGLang does not flush while a request runs: its 400 is an error, not a call it lacks."""
    sim = start_simulator(cache_reset_api="sglang", itl_ms=50)
    refused = r"POST http://127\.0\.0\.1:\d+/flush_cache: HTTP 400 Cache not flushed: requests"
    with _request_in_flight(sim), pytest.raises(TargetError, match=refused) as raised:
        run_as_the_command(_scenario(sim), tmp_path / "run", quiet=True)
    assert "The server has the call and refused it" in str(raised.value)
    assert not (tmp_path / "run" / "requests.parquet").exists()
    assert _resets(sim) == 0


def test_a_dry_run_empties_nothing(start_simulator: StartSimulator, tmp_path: Path) -> None:
    sim = start_simulator()
    run_dir = tmp_path / "run"
    run_as_the_command(_scenario(sim), run_dir, quiet=True, plots=False, dry_run=True)
    log = (run_dir / "run.log").read_text()
    assert "prefix cache reset: not done (a dry run sends nothing)" in log
    assert "prefix_cache_reset" not in json.loads((run_dir / "summary.json").read_text())["run"]
    assert _resets(sim) == 0


def test_llama_cpp_slots_erased_in_part_leave_the_cache(
    start_simulator: StartSimulator,
) -> None:
    sim = start_simulator(cache_reset_api="llama_cpp", max_num_seqs=2)
    slots = fetch("GET", f"{sim.root_url}/slots").json()
    assert [slot["id"] for slot in slots] == [0, 1]
    erase = fetch("POST", f"{sim.root_url}/slots/0?action=erase", json_body={})
    assert erase.ok
    assert _resets(sim) == 0
    assert fetch("POST", f"{sim.root_url}/slots/2?action=erase", json_body={}).status == 400
    assert fetch("POST", f"{sim.root_url}/slots/1?action=save", json_body={}).status == 400
    assert fetch("POST", f"{sim.root_url}/slots/1?action=erase", json_body={}).ok
    assert _resets(sim) == 1


def test_repeats_from_the_command_line_each_start_cold(
    start_simulator: StartSimulator, tmp_path: Path
) -> None:
    """``veeksha run --repeats 2 --set prefix_cache_reset.enabled=true``: the documented way."""
    sim = start_simulator()
    path = write_scenario(tmp_path, SCENARIO.replace("API_BASE", str(sim.base_url)))
    args = ["run", str(path), "--repeats", "2", "--no-plots", "-q"]
    for reset in ("false", "true"):
        result = run_cli(
            *args,
            *("--output-dir", str(tmp_path / reset)),
            *("--set", "prefix_cache_reset.api=auto"),
            *("--set", f"prefix_cache_reset.enabled={reset}"),
        )
        assert result.code == 0, result.output
    (warm,) = (tmp_path / "false").iterdir()  # (each a sweep folder)
    (cold,) = (tmp_path / "true").iterdir()
    warm_cached = [_cached(run) for run in sorted(p for p in warm.iterdir() if p.is_dir())]
    cold_cached = [_cached(run) for run in sorted(p for p in cold.iterdir() if p.is_dir())]
    assert warm_cached[1] > warm_cached[0]  # (the first run of all met an empty cache)
    assert cold_cached == [warm_cached[0]] * 2
