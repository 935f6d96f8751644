"""A real two-node Ray cluster on 127.0.0.1, one per test module (``ray_cluster``).

The head (``veeksha_node_a``) and a second node (``veeksha_node_b``) are ``ray start`` processes,
one CPU each, in temporary folders of their own; each ``ray start`` runs in a session of its own,
and at teardown every process of those sessions (the GCS, the raylets, their workers and actors)
is sent SIGTERM, then SIGKILL: nothing is left running, and no other Ray cluster on the machine
(``ray stop`` would stop them all) is touched. Skips with the reason when Ray is not installed
or cannot start here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

RAY = Path(sys.executable).parent / "ray"
_START_TIMEOUT_S = 90


@dataclass(frozen=True)
class RayCluster:
    """A started test cluster: its address (``127.0.0.1:PORT``) and what to clean up."""

    address: str
    sessions: tuple[int, ...]
    temp_dir: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ray_env() -> dict[str, str]:
    """The environment of the cluster's processes and of the drivers the tests start: no
    usage stats, and no token authentication (a ``ray.init`` of a local cluster elsewhere on
    the machine may have left ~/.ray/auth_token, which a head would then require of the
    second node and of the drivers; this cluster listens on 127.0.0.1 only)."""
    return {
        **os.environ,
        "CI": "true",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
        "RAY_AUTH_MODE": "disabled",
    }


def _ray_start(args: list[str], log: Path) -> int:
    """Run ``ray start ARGS`` in a session of its own; returns that session's id."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [str(RAY), "start", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=ray_env(),
            start_new_session=True,
        )
        try:
            code = proc.wait(_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = -1
    if code != 0:
        _kill_sessions([proc.pid])
        pytest.skip(f"ray start failed here ({code}): {log.read_text(errors='replace')[-800:]}")
    return proc.pid


def _session_pids(sessions: list[int]) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) in sessions and fields[0] != "Z":  # (fields[3]: the session id)
            pids.append(int(entry.name))
    return pids


def _kill_sessions(sessions: list[int]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        pids = _session_pids(sessions)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while _session_pids(sessions) and time.monotonic() < deadline:
            time.sleep(0.1)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A head and a second node on 127.0.0.1 (one CPU, resources veeksha_node_a / _b)."""
    if not RAY.exists():
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    temp_dir = Path(tempfile.mkdtemp(prefix="vray"))  # (short: Ray's socket paths are limited)
    port = _free_port()
    common = [
        "--node-ip-address=127.0.0.1",
        "--num-cpus=1",
        "--object-store-memory=100000000",
        "--disable-usage-stats",
    ]
    log = temp_dir / "ray-start.log"
    sessions: list[int] = []
    try:
        sessions.append(
            _ray_start(
                [
                    "--head",
                    f"--port={port}",
                    *common,
                    '--resources={"veeksha_node_a": 1}',
                    "--include-dashboard=false",
                    f"--temp-dir={temp_dir}",
                ],
                log,
            )
        )
        sessions.append(
            _ray_start(
                [f"--address=127.0.0.1:{port}", *common, '--resources={"veeksha_node_b": 1}'],
                log,
            )
        )
        yield RayCluster(f"127.0.0.1:{port}", tuple(sessions), temp_dir)
    finally:
        _kill_sessions(sessions)
        shutil.rmtree(temp_dir, ignore_errors=True)
