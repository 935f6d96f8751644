"""A microbenchmark's ``headers`` end to end, against a simulator playing a gateway
(``simulator.required_headers``: 401 without them): ``veeksha prefill``, ``decode`` and
``stress`` send them with every request of every point and with the model check, a run without
them is refused before any point, and no secret reaches a file of the result folder or the
command's output (``leaked_secrets``, the check of ``veeksha run``'s headers test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import leaked_secrets

pytestmark = pytest.mark.timeout(120)

ENV_SECRET = "mb-env-secret-5e1c07"
LITERAL_SECRET = "mb-lit-secret-a93d42"
_VARIABLE = "S21B_GATEWAY_KEY"

# each command, small: its keys beside --config
_SIZES = {
    "prefill": ["--input_lengths", "32", "64", "--samples_per_length", "2"],
    "decode": ["--input_lengths", "32", "--batch_sizes", "1", "2", "--output_length", "8"],
    "stress": [
        "--concurrencies",
        "1",
        "2",
        "--point_duration",
        "1",
        "--warmup_duration",
        "0.2",
        "--input_length",
        "32",
        "--output_length",
        "8",
        "--min_samples",
        "2",
    ],
}

_GATEWAY = f"""
simulator:
  required_headers: {{X-Api-Key: {ENV_SECRET}, X-Auth-Token: {LITERAL_SECRET}, X-Tenant: acme}}
"""

_HEADERS = f"""
headers:
  X-Api-Key: ${{{_VARIABLE}}}
  X-Auth-Token: {LITERAL_SECRET}
  X-Tenant: acme
"""


def _bench(
    tmp_path: Path, command: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``veeksha COMMAND ARGS`` in a fresh process, results below ``tmp_path/out``, without an
    ``OPENAI_API_BASE`` or the variable of the environment (``env`` added)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_BASE", _VARIABLE)}
    tmp_path.mkdir(exist_ok=True)
    out = ["--output_dir", str(tmp_path / "out")]
    return subprocess.run(
        [sys.executable, "-m", "veeksha.cli", command, *args, "--no_plots", *out],
        capture_output=True,
        text=True,
        timeout=100,
        env={**environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        check=False,
        cwd=tmp_path,
    )


def _folders(tmp_path: Path) -> list[Path]:
    out = tmp_path / "out"
    return sorted(out.iterdir()) if out.exists() else []


@pytest.mark.parametrize("command", ["prefill", "decode", "stress"])
def test_every_point_sends_the_headers_and_no_secret_is_written(
    tmp_path: Path, command: str
) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(_GATEWAY + _HEADERS)
    env = {_VARIABLE: ENV_SECRET}
    proc = _bench(tmp_path, command, "--config", str(config), *_SIZES[command], env=env)
    (folder,) = _folders(tmp_path)
    document = json.loads((folder / f"{command}_results.json").read_text())
    rows = [
        row
        for point in document["points"]
        for row in pq.read_table(folder / point["run_dir"] / "requests.parquet").to_pylist()
    ]
    assert rows, proc.stderr[-3000:]
    assert {row["status"] for row in rows} == {"ok"}, proc.stderr[-3000:]
    assert proc.returncode in (0, 4), proc.stderr[-3000:]  # (4: a busy machine's health)
    assert document["config"]["headers"] == {
        "X-Api-Key": f"${{{_VARIABLE}}}",  # (written as given: the name, not the value)
        "X-Auth-Token": "***",
        "X-Tenant": "acme",
    }
    assert document["config"]["simulator"]["required_headers"]["X-Auth-Token"] == "***"
    secrets = (ENV_SECRET, LITERAL_SECRET)
    assert not leaked_secrets(folder, [proc.stdout, proc.stderr], secrets)


def test_without_the_headers_the_built_in_gateway_refuses_before_any_point(
    tmp_path: Path,
) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(_GATEWAY)
    proc = _bench(tmp_path, "prefill", "--config", str(config), *_SIZES["prefill"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "refused the credentials (HTTP 401): set OPENAI_API_KEY to a valid key" in proc.stderr
    assert "client." not in proc.stderr  # (the command's words, not its points' scenario's)
    assert not _folders(tmp_path)


def test_an_endpoint_behind_a_gateway_takes_the_headers_flag(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    """``--headers '{X-Api-Key: ${NAME}}'``, the flag's form (unquoted ``${NAME}``, as the shell
    passes it in single quotes), against a server of its own: the model check and every request
    carry it; without it, or with another value, the model check refuses the run (exit 2,
    before any folder), the fix naming --headers when some were sent."""
    sim = start_simulator(required_headers={"X-Api-Key": ENV_SECRET})
    target = ["--api_base", sim.base_url, "--model", "veeksha-sim", *_SIZES["prefill"]]
    env = {_VARIABLE: ENV_SECRET}

    proc = _bench(tmp_path / "without", "prefill", *target, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{sim.base_url} refused the credentials (HTTP 401)" in proc.stderr
    assert not _folders(tmp_path / "without")

    wrong = ["--headers", "{X-Api-Key: not-the-key}"]
    proc = _bench(tmp_path / "wrong", "prefill", *target, *wrong, env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "(and check --headers)" in proc.stderr

    given = ["--headers", f"{{X-Api-Key: ${{{_VARIABLE}}}}}"]
    proc = _bench(tmp_path / "with", "prefill", *target, *given, env=env)
    (folder,) = _folders(tmp_path / "with")
    document = json.loads((folder / "prefill_results.json").read_text())
    assert proc.returncode in (0, 4), proc.stderr[-3000:]
    assert next(c for c in document["checks"] if c["name"] == "all_ok")["passed"]
    assert not leaked_secrets(folder, [proc.stdout, proc.stderr], [ENV_SECRET])


def test_an_unset_variable_is_refused_at_its_key_before_anything_runs(tmp_path: Path) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(_GATEWAY + _HEADERS)
    proc = _bench(tmp_path, "decode", "--config", str(config), *_SIZES["decode"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _GATEWAY.count("\n") + 3  # (the X-Api-Key line)
    assert (
        f"{config}:{line}:3: headers.X-Api-Key: ${{{_VARIABLE}}} is not set (or is empty) in "
        f"this environment: export {_VARIABLE}, or write the header's value in --headers (or "
        "the --config file)"
    ) in proc.stderr
    assert not _folders(tmp_path)
