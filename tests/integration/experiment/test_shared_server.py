"""A sweep's managed servers: points with the same resolved ``server:`` share one server
lifecycle (started once, logged into the sweep folder's server-N.log); points whose servers
differ get one each; a capacity search's probes share its managed server. Through the real
command line, against the simulator as a managed server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

# (--no-plots: no test here reads a plot; the sweeps' plots are test_sweep's)
_COMMAND = [sys.executable, "-m", "veeksha.cli", "run"]

SWEEP = """
seed: 5
server: {type: veeksha_sim}
server_metrics: {enabled: false}
simulator: {ttft_ms: 2, itl_ms: ITL}
traffic_scheduler:
  type: rate
  interval_generator: {type: fixed, interval: INTERVAL}
session_generator:
  type: synthetic
  session_graph: {type: single_request}
  output_spec: {text: {output_length_generator: {type: fixed, value: 3}}}
runtime: {max_sessions: 4, benchmark_timeout: 30, num_workers: 1}
trace_recorder: {enabled: false}
"""


def _sweep(folder: Path, itl: str, interval: str) -> Path:
    (folder / "sweep.yaml").write_text(
        SWEEP.replace("ITL", itl).replace("INTERVAL", interval), encoding="utf-8"
    )
    proc = subprocess.run(
        [*_COMMAND, "sweep.yaml", "--output-dir", "out", "--no-plots"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=180,  # "it did not hang"
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode in (0, 4), proc.stderr
    (sweep_dir,) = (folder / "out").glob("sweep-*")
    return sweep_dir


def _point_server_pids(sweep_dir: Path) -> list[int]:
    pids = []
    for summary in sorted(sweep_dir.glob("*/summary.json")):
        target = json.loads(json.loads(summary.read_text())["run"]["target"])
        assert target["kind"] == "managed"
        pids.append(int(target["server"]["pid"]))
    return pids


def _log_pids(sweep_dir: Path) -> list[int]:
    logs = sorted(sweep_dir.glob("server-*.log"))
    pids = []
    for log in logs:
        text = log.read_text()
        assert "[veeksha] stopped" in text
        found = re.search(r"server pid (\d+)", text)
        assert found, text
        pids.append(int(found.group(1)))
    return pids


@pytest.mark.parametrize(
    ("itl", "interval", "servers"),
    [
        ("1", "!expand [0.02, 0.01]", 1),  # the points differ in traffic only: one server
        ("!expand [1, 2]", "0.02", 2),  # they differ in the simulator's settings: two
    ],
)
def test_points_with_the_same_server_share_one_lifecycle(
    tmp_path: Path, itl: str, interval: str, servers: int
) -> None:
    sweep_dir = _sweep(tmp_path, itl, interval)
    point_pids = _point_server_pids(sweep_dir)
    assert len(point_pids) == 2
    assert len(set(point_pids)) == servers
    assert sorted(set(_log_pids(sweep_dir))) == sorted(set(point_pids))
    assert not list(sweep_dir.glob("*/server.log"))  # no point started a server of its own
    # each point's helpers forked from the sweep's process: no thread of it reads the server's
    # output (its supervisor writes the log), so the process stays single-threaded
    logs = sorted(sweep_dir.glob("*/run.log"))
    assert len(logs) == 2
    assert all("(forked from this process)" in log.read_text() for log in logs)


WINDOWS = """
seed: 3
server: {type: veeksha_sim}
server_metrics: {enabled: false}
traffic_scheduler: {type: concurrent, target_concurrent_sessions: 2, rampup_seconds: 0}
session_generator: {type: trace, trace_file: long.csv, wrap_mode: false, oversized: send}
client: {max_model_len: !expand [2048, 4096]}
runtime: {max_sessions: 2, benchmark_timeout: 30, num_workers: 1}
trace_recorder: {enabled: false}
"""


def test_points_whose_client_windows_differ_each_get_a_server_of_that_window(
    tmp_path: Path,
) -> None:
    # the managed simulator takes client.max_model_len as its window (simulator.max_model_len
    # left out), so the points cannot share one: before, both ran against one server of the
    # default 131072 window and the 3,000-token prompt was refused at neither
    import pandas as pd

    (tmp_path / "long.csv").write_text(
        "session_id,input_length,output_length\ns1,3000,20\ns2,100,20\n", encoding="utf-8"
    )
    (tmp_path / "sweep.yaml").write_text(WINDOWS, encoding="utf-8")
    proc = subprocess.run(
        [*_COMMAND, "sweep.yaml", "--output-dir", "out", "--no-plots"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,  # "it did not hang"
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode in (0, 4), proc.stderr
    (sweep_dir,) = (tmp_path / "out").glob("sweep-*")
    statuses = []
    for point in ("000-max_model_len=2048", "001-max_model_len=4096"):
        requests = pd.read_parquet(sweep_dir / point / "requests.parquet")
        statuses.append(dict(zip(requests.target_prompt_tokens, requests.http_status, strict=True)))
    assert statuses == [{3000: 400, 100: 200}, {3000: 200, 100: 200}]
    assert len(set(_point_server_pids(sweep_dir))) == 2
    target = json.loads(
        json.loads((sweep_dir / "000-max_model_len=2048" / "summary.json").read_text())["run"][
            "target"
        ]
    )
    assert target["context_limits"] == ["veeksha-sim: max_model_len 2048 from client.max_model_len"]


SEARCH = """\
output_dir: {out}
start_value: 1
max_value: 2
max_iterations: 2
precision: 0
warmup_seconds: 0
benchmark_config:
  seed: 7
  server: {{type: veeksha_sim}}
  server_metrics: {{enabled: false}}
  simulator: {{ttft_ms: 2, itl_ms: 1}}
  traffic_scheduler: {{type: concurrent, rampup_seconds: 0}}
  session_generator:
    type: synthetic
    session_graph: {{type: single_request}}
    output_spec: {{text: {{output_length_generator: {{type: fixed, value: 3}}}}}}
  runtime: {{max_sessions: 6, benchmark_timeout: 30, num_workers: 1}}
  trace_recorder: {{enabled: false}}
  # the subject is the shared server, not the generator's lag on a shared 2-core machine
  # (5 ms by default: a probe FAILed generator_saturation with the suite's 4 processes; 50 ms
  # is what test_capacity.py's probes exceeded, twice, on a saturated machine)
  health_checks: {{max_dispatch_lag_p99_ms: 200}}
  evaluators:
    - type: performance
      stream_metrics: false
      slos: [{{name: p90 TTFC, metric: ttfc, percentile: 0.9, value: 10}}]
"""


def test_a_capacity_searchs_probes_share_its_managed_server(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from veeksha import cli

    path = tmp_path / "search.yaml"
    path.write_text(SEARCH.format(out=tmp_path / "out"), encoding="utf-8")
    result = CliRunner().invoke(
        cli.main, ["capacity-search", "--config", str(path), "--no-plots"], prog_name="veeksha"
    )
    assert result.exit_code in (0, 5), result.output
    (folder,) = (tmp_path / "out").iterdir()
    runs = sorted((folder / "runs").iterdir())
    assert len(runs) >= 2
    pids = {
        json.loads(json.loads((run / "summary.json").read_text())["run"]["target"])["server"]["pid"]
        for run in runs
    }
    assert len(pids) == 1
    log = (folder / "server.log").read_text()
    assert f"server pid {pids.pop()}" in log
    assert "[veeksha] stopped" in log
    assert not list((folder / "runs").glob("*/server.log"))
    document = json.loads((folder / "capacity.json").read_text())
    assert document["server"]["kind"] == "managed"


def test_a_group_whose_server_cannot_start_is_each_points_error_and_exit_2(
    tmp_path: Path,
) -> None:
    text = SWEEP.replace("ITL", "1").replace("INTERVAL", "!expand [0.02, 0.01]")
    text = text.replace(
        "server: {type: veeksha_sim}",
        "server: {type: command, command: [no-such-server-xyz, '{port}'], model: m}",
    )
    (tmp_path / "sweep.yaml").write_text(text, encoding="utf-8")
    proc = subprocess.run(
        [*_COMMAND, "sweep.yaml", "--output-dir", "out", "--no-plots"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,  # "it did not hang"
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "'no-such-server-xyz' was not found" in proc.stderr
    assert "Traceback" not in proc.stderr
    (sweep_dir,) = (tmp_path / "out").glob("sweep-*")
    assert not list(sweep_dir.glob("*/summary.json"))  # no point ran
    infos = [json.loads(p.read_text()) for p in sorted(sweep_dir.glob("*/point.json"))]
    assert len(infos) == 2
    assert all("no-such-server-xyz" in info["error"] for info in infos)
    assert all(info["exit_code"] == 2 for info in infos)
    assert proc.stderr.count("'no-such-server-xyz' was not found") == 2  # one line per point
