"""The supervisor of a managed server: ``python -I -m veeksha.server.supervise SIGNAL TIMEOUT --
ARGV...``.

veeksha starts this small process (in a session of its own) instead of the server itself; it
starts the server in a process group of its own and then waits for one of two things:

- its standard input closes: veeksha asked it to stop (it closed the pipe) or veeksha died (the
  kernel closed it: SIGKILL, a crash). It sends SIGNAL to the server's process group, waits up to
  TIMEOUT seconds for the server to exit, then SIGKILLs the whole group, so the server's own
  children (engine workers, tokenizer pools) die too.
- the server exits on its own: what is left of its group is SIGKILLed.

It exits with the server's exit code (128 + N for a server killed by signal N; 127 when the
program cannot be started). Its first line of output, into the same pipe as the server's, is
``veeksha-supervisor: server pid PID`` (the server's pid is also its process group id). The
server also gets ``PR_SET_PDEATHSIG`` = SIGKILL, so even a SIGKILLed supervisor leaves no server.

Only the standard library is imported: it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time

__all__ = ["PID_LINE", "main"]

PID_LINE = "veeksha-supervisor: server pid "
_PR_SET_PDEATHSIG = 1


class _Stop(Exception):
    """SIGTERM to the supervisor itself: stop the server as if asked."""


def _die_with_supervisor() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def supervise(argv: list[str], stop_signal: int, stop_timeout: float) -> int:
    """Run ``argv`` until it exits or standard input closes; its exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner stops it, not the terminal
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_supervisor,  # noqa: PLW1509  (only prctl: fork-safe)
        )
    except OSError as exc:
        _say(f"veeksha-supervisor: cannot start {argv[0]!r}: {exc.strerror or exc}")
        return 127
    _say(f"{PID_LINE}{server.pid}")
    pidfd = os.pidfd_open(server.pid)
    try:
        while True:
            readable, _, _ = select.select([sys.stdin.fileno(), pidfd], [], [])
            if pidfd in readable:  # it exited on its own
                break
            if not os.read(sys.stdin.fileno(), 4096):  # closed: stop it
                raise _Stop
    except _Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _kill_group(server.pid, stop_signal)
        deadline = time.monotonic() + stop_timeout
        while server.poll() is None and time.monotonic() < deadline:
            select.select([pidfd], [], [], max(deadline - time.monotonic(), 0))
    _kill_group(server.pid, signal.SIGKILL)  # stragglers of the group, or the server itself
    return _exit_code(server.wait())


def main() -> None:
    """``SIGNAL TIMEOUT -- ARGV...`` from the command line."""
    args = sys.argv[1:]
    if len(args) < 4 or args[2] != "--":
        sys.stderr.write("usage: python -m veeksha.server.supervise SIGNAL TIMEOUT -- ARGV...\n")
        sys.exit(2)
    sys.exit(supervise(args[3:], signal.Signals[args[0]].value, float(args[1])))


if __name__ == "__main__":
    main()
