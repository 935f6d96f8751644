"""The supervisor of a managed server: ``python -I -m veeksha.server.supervise SIGNAL TIMEOUT
LOG -- ARGV...``.

veeksha starts this small process (in a session of its own) instead of the server itself. Its
standard input's first line is a JSON list of the secrets to mask (the clients' API keys, the
secrets of the server's environment); it then starts the server in a process group of its own,
with the server's output (standard output and error together) on a pipe of its own, and until
the end:

- writes every line of that output to the file LOG (appended), each secret masked
  (``veeksha.redact``): the server's log, written here so that no thread of veeksha's reads it
  (veeksha's process stays single-threaded, and a sweep forks each point's helpers from it);
- stops when its standard input closes: veeksha asked it to stop (it closed the pipe) or
  veeksha died (the kernel closed it: SIGKILL, a crash). It sends SIGNAL to the server's
  process group, waits up to TIMEOUT seconds for the server to exit, then SIGKILLs the whole
  group, so the server's own children (engine workers, tokenizer pools) die too;
- or the server exits on its own: what is left of its group is SIGKILLed.

Then it writes the output's last lines (up to 5 s for a writer that escaped the group) and
exits with the server's exit code (128 + N for a server killed by signal N; 127 when the
program cannot be started, said in LOG). Its standard output carries one line, ``veeksha-supervisor:
server pid PID`` (the server's pid is also its process group id). The server also gets
``PR_SET_PDEATHSIG`` = SIGKILL, so even a SIGKILLed supervisor leaves no server.

Only the standard library and ``veeksha.redact`` are imported: it starts in a few tens of
milliseconds.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time

from veeksha.redact import Redactors

__all__ = ["PID_LINE", "main"]

PID_LINE = "veeksha-supervisor: server pid "
_PR_SET_PDEATHSIG = 1
_READ_SIZE = 65536
_DRAIN_S = 5.0  # the output's end after the group was killed (a writer that left the group)


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


class _LogWriter:
    """The server's output into the log file, line by line, each line masked."""

    def __init__(self, path: str, redact: Redactors) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._redact = redact
        self._partial = b""

    def feed(self, data: bytes) -> None:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        self._write(lines)

    def line(self, text: str) -> None:
        self._write([text.encode()])

    def close(self) -> None:
        if self._partial:
            self._write([self._partial])
            self._partial = b""
        os.close(self._fd)

    def _write(self, lines: list[bytes]) -> None:
        if lines:
            masked = [self._redact(raw.decode(errors="replace").rstrip("\r")) for raw in lines]
            text = "".join(f"{line}\n" for line in masked).encode(errors="replace")
            with contextlib.suppress(OSError):  # (a full disk: the server goes on)
                os.write(self._fd, text)


def _take(read_end: int, log: _LogWriter) -> bool:
    """What the server wrote, into the log; False at the output's end."""
    data = os.read(read_end, _READ_SIZE)
    if data:
        log.feed(data)
    return bool(data)


def _read_secrets(fd: int) -> list[str] | None:
    """The first line of standard input (the secrets); None when it closed before one."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    secrets = json.loads(data)
    return [str(secret) for secret in secrets]


def supervise(argv: list[str], stop_signal: int, stop_timeout: float, log_path: str) -> int:
    """Run ``argv`` until it exits or standard input closes, its output into ``log_path``;
    its exit code."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner stops it, not the terminal
    signal.signal(signal.SIGTERM, _raise_stop)
    stdin = sys.stdin.fileno()
    try:
        secrets = _read_secrets(stdin)
    except _Stop:
        return 0
    if secrets is None:  # (veeksha stopped before it sent them: nothing to start)
        return 0
    log = _LogWriter(log_path, Redactors(secrets))
    read_end, write_end = os.pipe()
    try:
        server = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_supervisor,  # noqa: PLW1509  (only prctl: fork-safe)
        )
    except OSError as exc:
        log.line(f"veeksha-supervisor: cannot start {argv[0]!r}: {exc.strerror or exc}")
        log.close()
        return 127
    finally:
        os.close(write_end)
    _say(f"{PID_LINE}{server.pid}")
    log.line(f"{PID_LINE}{server.pid}")
    pidfd = os.pidfd_open(server.pid)
    output_open = True
    try:
        while True:
            waited = [stdin, pidfd, read_end] if output_open else [stdin, pidfd]
            readable, _, _ = select.select(waited, [], [])
            if read_end in readable:  # (closed by every writer: the server may live on)
                output_open = _take(read_end, log)
            if pidfd in readable:  # it exited on its own
                break
            if stdin in readable and not os.read(stdin, 4096):  # closed: stop it
                raise _Stop
    except _Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _kill_group(server.pid, stop_signal)
        deadline = time.monotonic() + stop_timeout
        while server.poll() is None and time.monotonic() < deadline:
            waited = [pidfd, read_end] if output_open else [pidfd]
            readable, _, _ = select.select(waited, [], [], max(deadline - time.monotonic(), 0))
            if read_end in readable:
                output_open = _take(read_end, log)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (the end is written whatever comes)
    _kill_group(server.pid, signal.SIGKILL)  # stragglers of the group, or the server itself
    code = _exit_code(server.wait())
    deadline = time.monotonic() + _DRAIN_S
    while output_open and time.monotonic() < deadline:
        readable, _, _ = select.select([read_end], [], [], max(deadline - time.monotonic(), 0))
        if not readable:
            break
        output_open = _take(read_end, log)
    log.close()
    return code


def main() -> None:
    """``SIGNAL TIMEOUT LOG -- ARGV...`` from the command line."""
    args = sys.argv[1:]
    if len(args) < 5 or args[3] != "--":
        sys.stderr.write(
            "usage: python -m veeksha.server.supervise SIGNAL TIMEOUT LOG -- ARGV...\n"
        )
        sys.exit(2)
    sys.exit(supervise(args[4:], signal.Signals[args[0]].value, float(args[1]), args[2]))


if __name__ == "__main__":
    main()
