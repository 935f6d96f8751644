"""The shard actor: one per node (or per placement-group bundle) of a distributed run.

A plain class; the driver makes it a Ray actor (``ray.remote(ShardActor)``), so this module
imports no Ray at all. The actor answers the driver's clock probes (``clock_ns``), starts the
shard's engine in a process of its own (``shard_process``) into a local temporary folder, hands
out what that folder gained since the last pull (``collect.ShardFiles``), stops the engine as
Ctrl-C does, and deletes the folder at the end. Nothing here is on the requests' path: the
engine process sends the traffic; the actor only reads files it already wrote.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from veeksha.distributed.collect import CHUNK_BYTES, Pull, ShardFiles
from veeksha.distributed.shard_process import HEARTBEAT_FILE, SNAPSHOT_FILE, ShardJob

__all__ = ["ShardActor", "engine_died", "silent_s", "sweep_stale_folders"]

_OUTCOME_FILE = "outcome.json"
_JOB_FILE = "job.pickle"
_OWNER_FILE = "owner.pid"
_PREFIX = "veeksha-shard-"


def sweep_stale_folders() -> None:
    """Delete the folders of shards whose actor died (a lost shard: Ray kills the actor and its
    engine process, so no one else deletes them): those whose owner pid is gone."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            pid = int((folder / _OWNER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:  # (another user's live process)
            continue


def engine_died(outcome: dict[str, Any] | None) -> str | None:
    """Why a shard's engine process ended without its run's outcome (killed, crashed: its run
    never wrote its end, and what it had in flight has no rows), from ``ShardActor.finish``'s
    outcome; None when its run ended (completed, interrupted, or aborted with its reason)."""
    if outcome is None or "exit_code" in outcome:
        return None
    code = outcome.get("returncode")
    if isinstance(code, int) and code < 0:  # (what its children wrote as it died is noise)
        return f"its engine process was killed (signal {-code}) before its run ended"
    reason = f"its engine process ended (exit code {code}) before its run did"
    last = str(outcome.get("log_tail") or "").strip().splitlines()
    return f"{reason}; its log's last line: {last[-1].strip()}" if last else reason


def silent_s(heartbeat: Path, now_s: float) -> float | None:
    """Seconds since the engine process last touched ``heartbeat`` (its modification time, on
    this host's wall clock ``now_s``); None before its first beat."""
    try:
        return max(0.0, now_s - heartbeat.stat().st_mtime)
    except FileNotFoundError:
        return None


class ShardActor:
    """One shard: its engine process, its run folder, what was pulled of it."""

    def __init__(self, run_name: str, chunk_bytes: int = CHUNK_BYTES) -> None:
        sweep_stale_folders()
        self.base = Path(tempfile.mkdtemp(prefix=_PREFIX))
        (self.base / _OWNER_FILE).write_text(str(os.getpid()), encoding="utf-8")
        self.run_dir = self.base / run_name
        self.files = ShardFiles(self.run_dir, chunk_bytes=chunk_bytes)
        self.stops = 0
        self.started = False
        # started now: its imports run while the driver sets up the other shards
        self.process: subprocess.Popen[bytes] = subprocess.Popen(
            [sys.executable, "-m", "veeksha.distributed.shard_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(self.base / "engine.log").open("wb"),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def ready(self) -> bool:
        """Wait until the engine process has imported the engine (True), or died (False)."""
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip() == b"ready"

    def node_id(self) -> str:
        """The Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def clock_ns(self) -> int:
        """This host's wall clock (one probe of the driver's offset estimate)."""
        return time.time_ns()

    def start(self, scenario: Any, spec: Any) -> int:
        """Hand the engine process its run; it sets up, then waits for t0 (``release``)."""
        job = ShardJob(scenario, spec, None, self.run_dir, self.base / _OUTCOME_FILE)
        path = self.base / _JOB_FILE
        path.write_bytes(pickle.dumps(job))
        self._send(str(path))
        self.started = True
        return self.process.pid

    def set_up(self) -> bool:
        """Wait until the engine's set-up is done (True), or it ended (False: ``finish``
        holds why)."""
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip() == b"set-up"

    def release(self, start_at_wall_ns: int) -> None:
        """t0 on this host's wall clock (the driver's t0 with this shard's offset applied)."""
        self._send(str(start_at_wall_ns))

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write(f"{line}\n".encode())
            self.process.stdin.flush()

    def running(self) -> bool:
        return self.started and self.process.poll() is None

    def pull(self) -> Pull:
        """What the folder gained since the last pull, and whether the engine still runs."""
        running = self.running()  # (read first: a run that ended before the listing is whole)
        pull = self.files.next_pull()
        pull.running = running
        if running:
            pull.silent_s = silent_s(self.base / HEARTBEAT_FILE, time.time())
        with contextlib.suppress(OSError, ValueError):
            pull.snapshot = json.loads((self.base / SNAPSHOT_FILE).read_text(encoding="utf-8"))
        return pull

    def stop(self) -> int:
        """Stop the engine as Ctrl-C would (a second call: as a second Ctrl-C); returns how
        many stops were sent."""
        if self.running():
            self.stops += 1
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGINT)
        return self.stops

    def finish(self, timeout_s: float) -> Pull:
        """Wait (up to ``timeout_s``) for the engine to end, then everything not yet sent (the
        large files only named: the driver reads them with ``read_chunk``)."""
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _kill_tree(self.process)
        pull = self.files.next_pull(final=True)
        pull.running = False
        outcome_path = self.base / _OUTCOME_FILE
        if outcome_path.exists():
            pull.outcome = json.loads(outcome_path.read_text(encoding="utf-8"))
        else:
            returncode = self.process.returncode
            log = self.base / "engine.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            pull.outcome = {  # (no exit_code: ``engine_died``)
                "error": f"engine process ended ({returncode}): {tail.strip()}",
                "returncode": returncode,
                "log_tail": tail.strip(),
            }
        return pull

    def read_chunk(self, name: str, offset: int, length: int) -> bytes:
        """A piece of a file the final pull (``finish``) named in its ``chunked``."""
        return self.files.read_chunk(name, offset, length)

    def cleanup(self) -> None:
        """Delete the shard's local folder (after the driver has everything)."""
        if self.process.poll() is None:  # (a frozen engine: lost)
            _kill_tree(self.process)
        shutil.rmtree(self.base, ignore_errors=True)


def _kill_tree(process: subprocess.Popen[bytes]) -> None:
    """Kill the engine process and its descendants: its workers and helpers outlive it for a
    moment, and one (the server watch) writes its file into the folder as it ends."""
    import psutil

    try:
        members = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        members = []
    process.kill()  # (SIGKILL ends a stopped process too)
    process.wait()
    for member in members:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(members, timeout=5)
