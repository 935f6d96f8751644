"""Distributed runs on a real two-node Ray cluster (conftest.py) against the built-in simulator.

The most expensive module of the suite: one cluster for the module, a run on it per test.
``--ray local`` (a cluster of the run's own) is test_ray_local.py: a module of its own, so that
another worker of the suite can run it meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
from click.testing import CliRunner

from tests.integration.conftest import StartSimulator
from tests.integration.distributed.conftest import RayCluster, ray_env
from tests.integration.robustness.helpers import assert_healthy
from veeksha.cli import main
from veeksha.distributed.driver import NAMESPACE, SHARDS_FILE
from veeksha.distributed.merge import SHARD_LOST
from veeksha.distributed.shard import sweep_stale_folders
from veeksha.engine.run import run_scenario
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

VEEKSHA = Path(sys.executable).parent / "veeksha"

SCENARIO = """
seed: 11
traffic_scheduler:
  type: rate
  interval_generator: {{type: poisson, arrival_rate: {rate}}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    num_request_generator: {{type: uniform, min: 2, max: {turns}}}
    request_wait_generator: {{type: fixed, interval: 0.05}}
  channels:
    - type: text
      body_length_generator: {{type: uniform, min: 5, max: 30}}
  output_spec:
    text:
      output_length_generator: {{type: uniform, min: {out_min}, max: {out_max}}}
client: {{api_base: "{api_base}", model: veeksha-sim}}
runtime: {{max_sessions: {sessions}, benchmark_timeout: 60, num_workers: 1, cpu_affinity: "off"}}
trace_recorder: {{enabled: true}}
# Two shards, a Ray cluster and the simulator share 2 cores (with other work): a request
# released 5 ms late is the machine, not the distribution. 100 ms still catches a shard that
# missed the agreed t0 (its first arrivals late by the miss). Likewise a Ray round trip on a
# loaded machine may take a few ms: the offsets' uncertainty (RTT / 2) is held to 10 ms, not
# to 1 ms against the fast simulator's sub-ms TTFC (clock_sync).
health_checks: {{max_dispatch_lag_p99_ms: 100, clock_sync_floor_ms: 10}}
"""


def _scenario(sim: SimulatorProcess, **values: object) -> str:
    fields: dict[str, object] = {"rate": 10, "out_min": 3, "out_max": 8, "sessions": 12, "turns": 3}
    return SCENARIO.format(api_base=sim.base_url, **(fields | values))


def _veeksha_run(scenario: Path, out: Path, address: str, **env: str) -> subprocess.Popen[str]:
    """``veeksha run --ray ADDRESS``; no plots (no test here reads one: ~2 CPU-s a run)."""
    command = [str(VEEKSHA), "run", str(scenario), "--ray", address, "--output-dir", str(out)]
    return subprocess.Popen(
        [*command, "--no-plots"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ray_env() | env,
    )


def test_two_shards_make_one_run_with_the_single_host_timeline(
    ray_cluster: RayCluster, fast_simulator: SimulatorProcess, tmp_path: Path
) -> None:
    # (the server's prefix cache emptied once, by the driver: not by each shard)
    text = _scenario(fast_simulator) + "prefix_cache_reset: {enabled: true}\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    # 4 KiB pieces: the final pull sends the shards' files in pieces through the actors
    proc = _veeksha_run(path, tmp_path / "out", ray_cluster.address, VEEKSHA_RAY_CHUNK_BYTES="4096")
    _, stderr = proc.communicate(timeout=150)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    (run_dir,) = (tmp_path / "out").iterdir()

    shards = json.loads((run_dir / SHARDS_FILE).read_text())["shards"]
    assert len({shard["node_id"] for shard in shards}) == 2  # placement spread: two nodes
    assert all(shard["lost"] is None for shard in shards)
    assert all(shard["chunks"] >= 2 for shard in shards)  # (the files below arrived whole)
    assert not (run_dir / "shards").exists()  # the copies are gone once merged

    requests = pd.read_parquet(run_dir / "requests.parquet")
    sessions = pd.read_parquet(run_dir / "sessions.parquet")
    assert sorted(sessions.session_id) == list(range(12))  # every session exactly once
    assert len(requests) == sessions.num_nodes.sum()
    assert not requests.duplicated(["session_id", "node_id"]).any()
    assert (requests.status == "ok").all()
    assert set(requests["shard"]) == {0, 1}
    done = requests.set_index(["session_id", "node_id"])
    for row in requests.itertuples():
        assert row.ready_at <= row.dispatched_at <= row.sent_at <= row.completed_at
        for parent in row.parents:  # dependency order and think time, on the driver's clock
            ready = done.loc[(row.session_id, parent)].completed_at + row.wait_after_ready
            assert row.ready_at == pytest.approx(ready, abs=1e-6)
    health = json.loads((run_dir / "health.json").read_text())
    assert_healthy({c["name"]: c["status"] for c in health["checks"]}, health["checks"])
    assert len((run_dir / "trace.jsonl").read_text().splitlines()) == len(requests)

    # The planned starts are the single-host run's (same seed, same timeline; a dry run plans
    # as a run does). Each shard's times moved onto the driver's clock by one shift, its clock
    # offset's change over the run (within the estimate's uncertainty): exactly that apart.
    single = tmp_path / "single"
    run_scenario(load_scenario_text(text, "s.yaml"), single, quiet=True, plots=False, dry_run=True)
    alone = _starts(pd.read_parquet(single / "requests.parquet"))
    merged = _starts(requests)
    assert list(merged.index) == list(alone.index) == list(range(12))
    summary = json.loads((run_dir / "summary.json").read_text())
    (emptied,) = summary["run"]["prefix_cache_reset"]["servers"]
    assert emptied["server"] == fast_simulator.root_url
    assert emptied["calls"] == ["POST /reset_prefix_cache"]
    # run.log: the driver's own lines first, then the shards'; the cache emptied by the driver
    log = (run_dir / "run.log").read_text().splitlines()
    assert log[0].startswith("[driver] ")
    assert " INFO ray: 2 shard(s) on node(s) " in log[0]
    (emptied_line,) = [line for line in log if "prefix cache emptied" in line]
    assert emptied_line.startswith("[driver] ")
    assert emptied_line.endswith(f"prefix cache emptied: {fast_simulator.root_url}")
    assert any(line.startswith("[shard 1] ") for line in log)
    wake_ups = summary["run"]["release_wake_ups"]  # every shard's workers' accounts, summed
    assert wake_ups["workers"] == summary["run"]["num_workers"]
    assert sum(wake_ups["histogram"].values()) == wake_ups["count"] > 0
    for info in summary["run"]["distributed"]["per_shard"]:
        owned = [i for i in range(12) if i % 2 == info["index"]]
        difference = merged.loc[owned].to_numpy() - alone.loc[owned].to_numpy()
        np.testing.assert_allclose(difference, info["shift_s"], atol=1e-6)
        bound = max(info["offset_before"]["uncertainty_ns"], info["offset_after"]["uncertainty_ns"])
        assert abs(info["shift_s"]) <= bound / 1e9

    # `veeksha report` reads the merged folder (in this process: an interpreter of its own
    # would add only its start-up and imports, as in audit_run)
    collecting = gc.isenabled()  # (the command line turns the collector off for its set-up)
    try:
        report = CliRunner().invoke(main, ["report", str(run_dir), "--no-plots", "-q"])
    finally:
        if collecting:
            gc.enable()
    assert report.exception is None or isinstance(report.exception, SystemExit), report.output
    assert report.exit_code == 0, report.output


def _starts(requests: pd.DataFrame) -> pd.Series:
    """Each session's planned start: its roots' ready_at."""
    roots = requests[requests.parents.map(len) == 0]
    return roots.groupby("session_id").ready_at.min().sort_index()


_KILL = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR", namespace=sys.argv[3])
# the run's shard-1 actor: veeksha-<run folder>-<the run's token>-shard-1 (actor_name)
names = ray.util.list_named_actors()
(name,) = [n for n in names if n.startswith(sys.argv[2]) and n.endswith(sys.argv[4])]
ray.kill(ray.get_actor(name, namespace=sys.argv[3]))
"""


def _highest_session(trace: Path) -> int:
    """The highest session id among a shard's flushed trace lines (-1 when none is whole)."""
    if not trace.exists():
        return -1
    lines = trace.read_bytes().split(b"\n")[:-1]  # (the last piece: a line still being written)
    return max((json.loads(line)["session_id"] for line in lines), default=-1)


def test_a_killed_shard_is_lost_and_ctrl_c_stops_the_other_and_keeps_everything(
    ray_cluster: RayCluster, start_simulator: StartSimulator, tmp_path: Path
) -> None:
    sim = start_simulator(preset="fast", ttft_ms=20, itl_ms=50)  # ~2 s per answer: in flight
    path = tmp_path / "s.yaml"
    path.write_text(
        _scenario(sim, rate=4, out_min=30, out_max=40, sessions=80)
    )  # 20 s: Ctrl-C ends it
    out = tmp_path / "out"
    proc = _veeksha_run(path, out, ray_cluster.address)
    deadline = time.monotonic() + 90
    copy: Path | None = None
    # until shard 1 has sent a few seconds of its trace: killed at its first line, its last
    # progress snapshot (up to ~1.5 s old) could predate its first request, leaving no request
    # in flight to account as shard_lost
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(out.glob("*/shards/shard-1/trace.jsonl"))
        if found and found[0].read_bytes().count(b"\n") >= 8:
            copy = found[0].parent
            break
        time.sleep(0.2)
    assert copy is not None, proc.communicate(timeout=5)
    run_dir = copy.parent.parent
    subprocess.run(  # shard 1's actor killed: the shard is lost
        [
            *(sys.executable, "-c", _KILL, ray_cluster.address),
            *(f"veeksha-{run_dir.name}-", NAMESPACE, "-shard-1"),
        ],
        env=ray_env(),
        timeout=60,
        check=True,
        stdin=subprocess.DEVNULL,
        capture_output=True,
    )
    # sessions_not_run counts shard 1's sessions below the run's highest started one: Ctrl-C
    # only once shard 0 (2 sessions/s) has started sessions well past shard 1's last (its trace
    # is flushed each tick, so a margin of 5 of its sessions covers lines it never flushed)
    killed_at = _highest_session(copy / "trace.jsonl")
    while time.monotonic() < deadline and proc.poll() is None:
        if _highest_session(run_dir / "shards" / "shard-0" / "trace.jsonl") > killed_at + 10:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # then Ctrl-C: shard 0 stops as `veeksha run` would
    _, stderr = proc.communicate(timeout=150)
    assert proc.returncode == 3, stderr
    assert "shard 1 lost" in stderr
    assert "Traceback" not in stderr

    shards = json.loads((run_dir / SHARDS_FILE).read_text())["shards"]
    assert shards[0]["lost"] is None
    assert shards[0]["outcome"]["stop_reason"] == "interrupted"
    assert shards[1]["lost"]
    assert shards[1]["last_snapshot"]  # its in-flight requests: from the engine's own probe
    assert (run_dir / "shards" / "shard-1").is_dir()  # a lost shard's copy is kept
    assert "[shard 0]" in (run_dir / "run.log").read_text()
    requests = pd.read_parquet(run_dir / "requests.parquet")
    sessions = pd.read_parquet(run_dir / "sessions.parquet")
    assert not requests.duplicated(["session_id", "node_id"]).any()
    # shard 0, interrupted: each session it started has a row for every node (cancelled or not)
    own = sessions[sessions["shard"] == 0]
    assert 0 < len(own) < 40  # (it owns the 40 even indexes; Ctrl-C came before the last)
    assert set(own.session_id) <= set(range(0, 80, 2))
    rows = requests[requests["shard"] == 0].groupby("session_id").size()
    assert rows.loc[own.session_id].tolist() == own.num_nodes.tolist()
    # shard 1: what was pulled before the kill, its requests in flight as shard_lost rows
    lost = requests[requests["shard"] == 1]
    assert (lost.error_kind == SHARD_LOST).any()
    assert set(lost.session_id) <= set(range(1, 80, 2))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["distributed"]["lost_shards"].keys() == {"1"}
    assert summary["run"]["distributed"]["sessions_not_run"] > 0
    # the lost shard's folder on its node (its actor and engine killed by Ray) is deleted by
    # the next shard actor made there; shard 0's by its actor at the end
    leftovers = list(Path(tempfile.gettempdir()).glob(f"veeksha-shard-*/{run_dir.name}"))
    assert len(leftovers) <= 1
    if leftovers:
        sweep_stale_folders()  # (what a new ShardActor does first)
        assert not leftovers[0].exists()


def _engine_pid(run_name: str, index: int) -> int | None:
    """The pid of shard ``index``'s engine process of the run ``run_name`` (its stderr is the
    engine.log beside the shard's run folder; its trace names the shard), if running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if b"veeksha.distributed.shard_process" not in (entry / "cmdline").read_bytes():
                continue
            base = Path(os.readlink(entry / "fd" / "2")).parent
            with (base / run_name / "trace.jsonl").open("rb") as trace:
                first = trace.readline()
        except OSError:
            continue
        if first and json.loads(first).get("shard") == index:
            return int(entry.name)
    return None


def _shard_1_engine_in_flight(proc: subprocess.Popen[str], out: Path) -> int:
    """Shard 1's engine pid once it has sent a few seconds of its trace (see the test above)."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        found = list(out.glob("*/shards/shard-1/trace.jsonl"))
        if found and found[0].read_bytes().count(b"\n") >= 8:
            pid = _engine_pid(found[0].parents[2].name, 1)
            if pid is not None:
                return pid
        time.sleep(0.2)
    raise AssertionError(proc.communicate(timeout=5))


def test_a_shard_whose_engine_is_killed_is_lost_and_the_report_says_what_it_took(
    ray_cluster: RayCluster, start_simulator: StartSimulator, tmp_path: Path
) -> None:
    """Shard 1's engine process killed mid-run (SIGKILL, as the OOM killer would) while its
    actor lives: the shard is lost as when its actor dies (it was taken as finished: exit 0,
    no row for what it had in flight, nothing said), and the run ends by itself."""
    sim = start_simulator(preset="fast", ttft_ms=20, itl_ms=50)  # ~2 s per answer: in flight
    path = tmp_path / "s.yaml"
    # 2 turns a session (not 2 or 3): after the loss shard 0 runs its sessions to their end,
    # ~2 s sooner; the loss lands in flight as before (it waits for shard 1's 8th dispatch)
    text = _scenario(sim, rate=10, out_min=30, out_max=40, sessions=40, turns=2)
    path.write_text(text)
    out = tmp_path / "out"
    proc = _veeksha_run(path, out, ray_cluster.address)
    pid = _shard_1_engine_in_flight(proc, out)
    os.kill(pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=150)
    assert proc.returncode == 3, stderr
    assert "shard 1 lost (its engine process was killed (signal 9)" in stderr
    assert "Traceback" not in stderr
    (run_dir,) = out.iterdir()
    shards = json.loads((run_dir / SHARDS_FILE).read_text())["shards"]
    assert shards[0]["lost"] is None
    assert shards[0]["outcome"]["stop_reason"] == "completed"
    assert shards[1]["lost"].startswith("its engine process was killed (signal 9)")
    requests = pd.read_parquet(run_dir / "requests.parquet")
    lost = requests[(requests["shard"] == 1) & (requests.error_kind == SHARD_LOST)]
    assert len(lost) > 0  # its requests in flight, from its last snapshot and trace lines
    summary = json.loads((run_dir / "summary.json").read_text())
    distributed = summary["run"]["distributed"]
    assert distributed["lost_shards"].keys() == {"1"}
    assert distributed["requests_lost_in_flight"] == len(lost)
    assert distributed["sessions_not_run"] > 0
    # its rows end when they were last known in flight, before the loss was seen
    (info,) = [i for i in distributed["per_shard"] if i["index"] == 1]
    assert (lost.completed_at <= info["lost_at_s"]).all()
    assert info["last_report_s"] < info["lost_at_s"]
    notes = json.loads((run_dir / "health.json").read_text())["notes"]
    assert notes[0].startswith("shard 1 lost (its engine process was killed (signal 9)")
    assert f"{len(lost)} request" in notes[0]
    # its actor lived on: it deleted the shard's folder on its node at the end
    assert not list(Path(tempfile.gettempdir()).glob(f"veeksha-shard-*/{run_dir.name}"))


def test_a_shard_whose_engine_is_frozen_is_lost_and_ended(
    ray_cluster: RayCluster, start_simulator: StartSimulator, tmp_path: Path
) -> None:
    """Shard 1's engine process stopped mid-run (SIGSTOP) while its actor answers every pull:
    the run waited for it for ever. Now its silence is seen (the limit shortened to 3 s here;
    30 s by default), the shard is lost as a killed one is, its engine is ended, and the run
    ends by itself with the other shard's results and the lost one's in-flight rows."""
    sim = start_simulator(preset="fast", ttft_ms=20, itl_ms=50)  # ~2 s per answer: in flight
    path = tmp_path / "s.yaml"
    # (2 turns a session: as in the test above)
    path.write_text(_scenario(sim, rate=10, out_min=30, out_max=40, sessions=40, turns=2))
    out = tmp_path / "out"
    proc = _veeksha_run(path, out, ray_cluster.address, VEEKSHA_RAY_ENGINE_SILENCE_S="3")
    pid = _shard_1_engine_in_flight(proc, out)
    engine = psutil.Process(pid)
    os.kill(pid, signal.SIGSTOP)
    try:
        _, stderr = proc.communicate(timeout=150)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            engine.kill()
    assert proc.returncode == 3, stderr
    assert "shard 1 lost (its engine process showed no sign of life for " in stderr
    assert "Traceback" not in stderr
    (run_dir,) = out.iterdir()
    shards = json.loads((run_dir / SHARDS_FILE).read_text())["shards"]
    assert shards[0]["lost"] is None
    assert shards[0]["outcome"]["stop_reason"] == "completed"
    assert shards[1]["lost"].startswith("its engine process showed no sign of life")
    requests = pd.read_parquet(run_dir / "requests.parquet")
    lost = requests[(requests["shard"] == 1) & (requests.error_kind == SHARD_LOST)]
    assert len(lost) > 0  # its requests in flight, from its last snapshot and trace lines
    # its actor ended the stopped engine (SIGKILL ends a stopped process) and its folder
    assert not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE
    assert not list(Path(tempfile.gettempdir()).glob(f"veeksha-shard-*/{run_dir.name}"))
