"""A shard's engine in a process of its own: ``python -m veeksha.distributed.shard_process``.

The shard actor (``shard.py``) starts this process when it is made: it imports the engine
(seconds of CPU where no bytecode is written) and says ``ready`` on stdout. The actor then
writes the path of ``IN`` (a pickle of :class:`ShardJob`) on its stdin, and this process runs
the existing engine (``run_scenario(..., shard=..., start_at_wall_ns=barrier)``) into the job's
folder. The barrier: once the engine's set-up is done (workers up, sessions' source made) it
says ``set-up`` on stdout and reads t0 (ns on this host's wall clock) from stdin, which the
driver sends when every shard is set up. At the end it writes its outcome as JSON beside
``IN``. Its main thread owns the event loop, so SIGINT
stops the run exactly as Ctrl-C stops ``veeksha run`` (a second one cancels what is in
flight). If the actor dies, Ray normally kills this process with it; if it survives, orphaned,
it stops its run the same way and deletes its folder, which no one will pull (else the next
shard actor on the node deletes it: ``shard.sweep_stale_folders``).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HEARTBEAT_FILE", "SNAPSHOT_FILE", "ShardJob", "main"]

_ORPHAN_POLL_S = 0.5
_SNAPSHOT_EVERY_S = 0.5
#: beside the job file: the run's latest ``RunProbe`` snapshot (JSON), rewritten every 0.5 s
SNAPSHOT_FILE = "snapshot.json"
#: beside it: touched every 0.5 s while the process runs, by a thread of its own (the actor's
#: pulls read its age: an engine process stopped by SIGSTOP or stuck in the kernel stops it)
HEARTBEAT_FILE = "heartbeat"


@dataclass
class ShardJob:
    """What a shard's engine process runs: the scenario, its share, the common t0."""

    scenario: Any  # veeksha.scenario.models.Scenario (pickled by the actor)
    spec: Any  # veeksha.distributed.partition.ShardSpec
    start_at_wall_ns: int | None  # None: the barrier (t0 from the driver once set up)
    run_dir: Path
    outcome_path: Path


def _watch_parent(parent: int, orphaned: threading.Event) -> None:
    while os.getppid() == parent:
        time.sleep(_ORPHAN_POLL_S)
    orphaned.set()
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(_ORPHAN_POLL_S)
    os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C: cancel what is in flight


def _report_snapshots(probe: Any, path: Path, done: threading.Event) -> None:
    """Write the run's state for the actor's pulls (what a lost shard had in flight), and beat
    (the process lives, even while its run is not running yet or is finishing)."""
    beat = path.with_name(HEARTBEAT_FILE)
    beat.touch()
    while not done.wait(_SNAPSHOT_EVERY_S):
        beat.touch()
        try:
            snapshot = probe.snapshot(timeout=_SNAPSHOT_EVERY_S * 4)
        except Exception:  # noqa: BLE001 (not running yet, or ended: the next one, or none)
            continue
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(snapshot, default=str), encoding="utf-8")
        tmp.replace(path)


def main() -> int:
    # A Ray worker blocks (or ignores) SIGINT and SIGTERM, and its children inherit that: this
    # process must take Ctrl-C from the actor (``stop``) as ``veeksha run`` takes it.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    orphaned = threading.Event()
    threading.Thread(
        target=_watch_parent, args=(os.getppid(), orphaned), daemon=True, name="orphan-watch"
    ).start()
    from veeksha.engine.probe import RunProbe
    from veeksha.engine.run import exit_code_for, run_scenario
    from veeksha.errors import VeekshaError

    to_actor = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # (from here on, anything printed goes to the log, not to the actor's pipe)
    to_actor.write("ready\n")
    to_actor.flush()
    line = sys.stdin.readline().strip()
    if not line:  # the actor went away before the run
        return 0
    job: ShardJob = pickle.loads(Path(line).read_bytes())

    def barrier() -> int:
        """Called by the engine (in a thread) once its set-up is done: t0 from the driver."""
        to_actor.write("set-up\n")
        to_actor.flush()
        answer = sys.stdin.readline().strip()
        if not answer:
            raise RuntimeError("the shard actor went away before t0")
        return int(answer)

    probe = RunProbe()
    done = threading.Event()
    snapshots = threading.Thread(
        target=_report_snapshots,
        args=(probe, job.outcome_path.with_name(SNAPSHOT_FILE), done),
        daemon=True,
        name="snapshots",
    )
    snapshots.start()
    outcome: dict[str, Any]
    try:
        result = run_scenario(
            job.scenario,
            job.run_dir,
            quiet=True,
            shard=job.spec,
            evaluate=False,  # (the driver evaluates the merged run)
            start_at_wall_ns=barrier if job.start_at_wall_ns is None else job.start_at_wall_ns,
            probe=probe,
        )
    except VeekshaError as exc:
        outcome = {"error": str(exc), "exit_code": exc.exit_code, "interrupted": True}
    else:
        outcome = {
            "exit_code": int(exit_code_for(result, job.scenario)),
            "interrupted": result.interrupted,
            "stop_reason": result.stop_reason,
            "requests": result.requests,
            "failed": result.failed,
            "cancelled": result.cancelled,
            "sessions": result.sessions,
            "verdict": result.verdict,
            "error": result.extra.get("error"),
        }
    done.set()
    if orphaned.is_set():
        shutil.rmtree(job.run_dir.parent, ignore_errors=True)
        return 3
    tmp = job.outcome_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(outcome), encoding="utf-8")
    tmp.replace(job.outcome_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
