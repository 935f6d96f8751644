"""Worker processes started before their settings are known, so that their interpreters start
up while the caller does other work.

A worker (``python -m veeksha.dispatch.worker``) imports its modules, then reads its
``WorkerSpawn`` from stdin and only then pins itself and connects. ``launch_worker`` starts one
up to that read: the process, its ends of the link and of the bulk link (``channel``) and its
stdin, still open. ``veeksha run`` launches a run's workers this way right
after the scenario is loaded, beside the built-in simulator, before it imports the engine; the
run's ``WorkerPool`` then adopts them (``WorkerLaunch.take``) and writes each its spawn message
once the target is resolved. Nothing is sent and no CPU is pinned before that: a launched worker
that is never adopted is killed by ``WorkerLaunch.close``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import veeksha
from veeksha.dispatch.channel import packet_pair, socket_pair
from veeksha.forked import ForkedProcess
from veeksha.terminal import STOP_SIGNALS

__all__ = ["Launched", "WorkerLaunch", "launch_worker"]


@dataclass
class Launched:
    """One worker process waiting for its ``WorkerSpawn`` on ``proc.stdin``."""

    proc: subprocess.Popen[bytes] | ForkedProcess
    link: socket.socket  # our end of its link
    channel_fd: int  # the number of its end in the worker
    bulk: socket.socket  # our end of its bulk link (deferrable Results: see ``channel``)
    bulk_fd: int  # the number of its end in the worker

    def kill(self) -> None:
        """Stop the process (before it read a spawn message: it has done nothing) and reap it."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self.link.close()
        self.bulk.close()


def launch_worker(fork: bool = False) -> Launched:
    """Start a worker up to the point where it reads its ``WorkerSpawn``: a fresh interpreter,
    or with ``fork`` a fork of this process, which must have one thread and should have
    imported the worker's modules (else each fork imports them: ``veeksha.forked.prepare``)."""
    ours, theirs = socket_pair()
    bulk, bulk_theirs = packet_pair()
    channel_fd = theirs.fileno()  # (the worker's copy keeps the number: pass_fds)
    bulk_fd = bulk_theirs.fileno()
    proc: subprocess.Popen[bytes] | ForkedProcess
    try:
        if fork:
            from veeksha.dispatch.worker import main

            proc = ForkedProcess(
                main,
                "veeksha-worker",
                stdin=subprocess.PIPE,
                pass_fds=(channel_fd, bulk_fd),
                ignore_signals=STOP_SIGNALS,
            )
        else:
            env = dict(os.environ)
            # (the checkout veeksha runs from, whatever the working folder: an editable
            # install's too)
            root = str(Path(veeksha.__file__).resolve().parent.parent)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            # The stop signals are blocked from before the fork (the child inherits the mask
            # through exec) until the worker ignores them (``worker.main``): one sent to the
            # process group while the interpreter starts (a terminal's Ctrl-C, which
            # ``veeksha run`` turns into a clean stop) killed it: "worker 0 was killed by SIGINT
            # before it was ready", exit 2. This process gets its own once unblocked.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "veeksha.dispatch.worker"],
                    stdin=subprocess.PIPE,
                    env=env,
                    close_fds=True,
                    pass_fds=(channel_fd, bulk_fd),
                )
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    except BaseException:
        ours.close()
        bulk.close()
        raise
    finally:
        theirs.close()  # the child has its copies
        bulk_theirs.close()
    return Launched(proc, ours, channel_fd, bulk, bulk_fd)


class WorkerLaunch:
    """Workers launched ahead of a run (see the module docstring): taken by the run's pool in
    order; ``close`` kills the ones not taken."""

    def __init__(self, count: int, fork: bool = False) -> None:
        self.forked = fork  # (forked from this process, not fresh interpreters)
        self._waiting: list[Launched] = []
        try:
            for _ in range(count):
                self._waiting.append(launch_worker(fork))
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self._waiting)

    def take(self) -> Launched | None:
        """The next launched worker, now the caller's; None when none is left."""
        return self._waiting.pop(0) if self._waiting else None

    def close(self) -> None:
        """Kill and reap every launched worker not taken."""
        while self._waiting:
            self._waiting.pop().kill()
