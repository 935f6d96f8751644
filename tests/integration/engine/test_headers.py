"""client.headers and client.session_header in whole runs against the real simulator: a
gateway's headers pass its check, their absence is a 401 row per request, an unset ``${NAME}``
is refused before t0, a session's requests all carry its id, and no secret reaches a file of
the run folder or the terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import leaked_secrets
from tests.integration.simulator.helpers import request
from veeksha.simulator.process import SimulatorProcess

pytestmark = pytest.mark.timeout(120)

# the secrets: one from the environment, literal ones of credential-like headers
ENV_SECRET = "gw-env-secret-4f9a21"
LITERAL_SECRET = "lit-secret-77c0de"
AUTH_SECRET = "auth-secret-3b8e55"

_TRAFFIC = """
traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {type: uniform, min: 1, max: 4}
    request_wait_generator: {type: fixed, interval: 0.0}
    inherit_history: true
  channels:
    - type: text
      body_length_generator: {type: uniform, min: 5, max: 10}
  output_spec:
    text:
      output_length_generator: {type: uniform, min: 2, max: 4}
runtime: {max_sessions: 8}
"""

_GATEWAY = f"""
simulator:
  required_headers:
    X-Api-Key: {ENV_SECRET}
    X-Session-Secret: {LITERAL_SECRET}
    Authorization: Token {AUTH_SECRET}
    X-Tenant: acme
"""

_HEADERS = f"""
client:
  headers:
    X-Api-Key: "${{S20C_GATEWAY_KEY}}"
    X-Session-Secret: {LITERAL_SECRET}
    Authorization: Token {AUTH_SECRET}
    X-Tenant: acme
"""


def _run(
    tmp_path: Path,
    text: str,
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
) -> tuple[subprocess.CompletedProcess[str], Path | None]:
    """``veeksha run`` of ``text`` (``env`` added to the environment, ``unset`` taken out of
    it, ``extra`` arguments after the file): its process and its run folder (None when none
    was made)."""
    tmp_path.mkdir(exist_ok=True)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "veeksha.cli",
            "run",
            str(scenario),
            "--no-plots",
            "--output-dir",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=100,
        env={k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset},
        stdin=subprocess.DEVNULL,
        check=False,
        cwd=tmp_path,
    )
    folders = sorted(out.iterdir()) if out.exists() else []
    return proc, folders[0] if folders else None


def _counted_by_header(sim: SimulatorProcess, header: str) -> Counter[str]:
    """The simulator's requests by the value of ``header`` (its ``count_header``)."""
    seen = Counter[str]()
    for line in request(f"{sim.root_url}/metrics", method="GET").body.decode().splitlines():
        if line.startswith("veeksha_sim_header_requests_total{"):
            labels, count = line.rsplit(" ", 1)
            assert f'header="{header}"' in labels
            seen[labels.split('value="', 1)[1].split('"', 1)[0]] += int(float(count))
    return seen


def _requests(run_dir: Path) -> list[dict[str, Any]]:
    return pq.read_table(run_dir / "requests.parquet").to_pylist()


@pytest.mark.parametrize(
    "server", ["", "server: {type: veeksha_sim}\n"], ids=["built_in", "managed"]
)
def test_a_run_with_the_gateways_headers_passes_and_writes_no_secret(
    tmp_path: Path, server: str
) -> None:
    """A managed server's server.log holds its command line (the simulator's settings, with
    the values it requires) and whatever it prints: masked too."""
    proc, run_dir = _run(
        tmp_path, _TRAFFIC + _GATEWAY + _HEADERS + server, {"S20C_GATEWAY_KEY": ENV_SECRET}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir is not None
    rows = _requests(run_dir)
    assert rows
    assert all(r["status"] == "ok" for r in rows)
    # the server's /metrics was scraped with them too (a 401 there would be no scrape)
    assert pq.read_table(run_dir / "server_metrics.parquet").num_rows > 0
    config = (run_dir / "config.yaml").read_text()
    assert "X-Api-Key: ${S20C_GATEWAY_KEY}" in config  # (written as given)
    assert "X-Session-Secret: '***'" in config
    assert "Authorization: '***'" in config
    assert "X-Tenant: acme" in config
    secrets = (ENV_SECRET, LITERAL_SECRET, AUTH_SECRET)
    assert not leaked_secrets(run_dir, [proc.stdout, proc.stderr], secrets)


def test_without_the_headers_every_request_is_a_401_row(tmp_path: Path) -> None:
    proc, run_dir = _run(tmp_path, _TRAFFIC + _GATEWAY)
    assert run_dir is not None, proc.stderr[-3000:]
    # (a session's later turns are cancelled by its first one's failure: never sent)
    rows = [r for r in _requests(run_dir) if r["status"] != "cancelled"]
    assert len(rows) == 8  # (every session's first request)
    assert {(r["status"], r["http_status"], r["error_kind"]) for r in rows} == {
        ("error", 401, "http_4xx")
    }
    message = rows[0]["error_message"]
    assert message.startswith("HTTP 401: ")
    assert "header x-api-key missing (simulator.required_headers)" in message


@pytest.mark.parametrize("extra", [(), ("--dry-run",)], ids=["run", "dry_run"])
def test_an_unset_variable_is_refused_before_the_run_starts(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    """A dry run, which sends nothing, refuses it too: a scenario it passes does not then fail
    to start for a variable the run reads."""
    proc, _ = _run(
        tmp_path, _TRAFFIC + _GATEWAY + _HEADERS, unset=("S20C_GATEWAY_KEY",), extra=extra
    )
    scenario = tmp_path / "s.yaml"
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _TRAFFIC.count("\n") + _GATEWAY.count("\n") + 4  # (the X-Api-Key line of client:)
    assert (
        f"{scenario}:{line}:5: client.headers.X-Api-Key: ${{S20C_GATEWAY_KEY}} is not set (or "
        "is empty) in this environment: export S20C_GATEWAY_KEY, or write the header's value in "
        "the scenario"
    ) in proc.stderr
    assert not list((tmp_path / "out").rglob("requests.parquet"))  # (nothing was sent)


def test_every_request_of_a_session_carries_its_session_id(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    sim = start_simulator(count_header="X-Session-Id")
    client = (
        f"client:\n  api_base: {sim.base_url}\n  model: veeksha-sim\n"
        "  session_header: X-Session-Id\n"
    )
    proc, run_dir = _run(tmp_path, _TRAFFIC + client)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir is not None
    rows = _requests(run_dir)
    per_session = Counter(str(r["session_id"]) for r in rows)
    assert len(per_session) == 8
    assert max(per_session.values()) > 1
    seen = _counted_by_header(sim, "X-Session-Id")
    assert seen == per_session  # each session's id on each of its requests, none other


def test_every_request_carries_its_own_id_as_the_server_logs_it(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    """``request_id_header``: each request's header is the run's id, a hyphen and its row's
    request_id, so a line of the server's log (vLLM names a request by its X-Request-Id)
    finds its row; run.log says how the ids are written."""
    sim = start_simulator(count_header="X-Request-Id")
    client = (
        f"client:\n  api_base: {sim.base_url}\n  model: veeksha-sim\n"
        "  request_id_header: X-Request-Id\n  session_header: X-Session-Id\n"
    )
    proc, run_dir = _run(tmp_path, _TRAFFIC + client)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir is not None
    run_info = json.loads((run_dir / "summary.json").read_text())["run"]
    run_id = run_info["run_id"]
    assert run_id == run_dir.name
    assert run_info["request_id_prefix"] == f"{run_id}-"
    rows = _requests(run_dir)
    assert len(rows) > 8
    seen = _counted_by_header(sim, "X-Request-Id")
    assert seen == Counter(f"{run_id}-{row['request_id']}" for row in rows)
    log = (run_dir / "run.log").read_text()
    assert f"request ids sent as X-Request-Id: {run_id}-<request_id>" in log


def test_the_runs_of_repeats_send_ids_of_their_own(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    """``--repeats 2``: the same scenario twice, the points of one experiment: no id is sent
    twice (the points' folders are named alike in every sweep; the sweep's is not)."""
    sim = start_simulator(count_header="X-Request-Id")
    client = (
        f"client:\n  api_base: {sim.base_url}\n  model: veeksha-sim\n"
        "  request_id_header: X-Request-Id\n"
    )
    proc, sweep_dir = _run(tmp_path, _TRAFFIC + client, extra=("--repeats", "2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sweep_dir is not None
    sent = _counted_by_header(sim, "X-Request-Id")
    rows = sum(len(_requests(p.parent)) for p in sweep_dir.rglob("requests.parquet"))
    assert rows > 8
    assert sum(sent.values()) == rows
    assert max(sent.values()) == 1  # (every id once)
    assert all(value.startswith(f"{sweep_dir.name}/") for value in sent)


def test_the_model_check_server_tokenizer_and_scrapes_send_the_headers_too(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    """Against a server behind a gateway (a simulator requiring a key header on every path but
    /health): the start-up model check, the server tokenizer's calibration and the /metrics
    scrapes carry the client's headers; without them the model check refuses the run."""
    sim = start_simulator(required_headers={"X-Api-Key": ENV_SECRET})
    client = (
        f"client:\n  api_base: {sim.base_url}\n  model: veeksha-sim\n"
        "  tokenizer: {type: server, cache: false}\n"
    )
    headers = '  headers: {X-Api-Key: "${S20C_GATEWAY_KEY}"}\n'
    env = {"S20C_GATEWAY_KEY": ENV_SECRET}
    proc, run_dir = _run(tmp_path / "with", _TRAFFIC + client + headers, env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir is not None
    assert all(r["status"] == "ok" for r in _requests(run_dir))
    assert pq.read_table(run_dir / "server_metrics.parquet").num_rows > 0
    proc, _ = _run(tmp_path / "without", _TRAFFIC + client, env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{sim.base_url} refused the credentials (HTTP 401)" in proc.stderr
