"""Helper processes forked from ``veeksha run``'s main process instead of started as fresh
interpreters.

A run's helper processes (the built-in simulator, the workers, the server watch) each used to be
a new interpreter: ~50 ms of interpreter and ``site``, then ~0.15 CPU-s of imports (asyncio,
uvloop, msgspec, veeksha's own modules), the same in each, a third of a short run's CPU.
``veeksha run`` now imports what they need once (:func:`prepare` with
``veeksha.engine.launch.HELPER_MODULES``), right after loading the scenario, and forks each
from that state (:class:`ForkedProcess`): a child's start-up is the fork (a few ms of page
tables; its pages are shared with the main process until either writes them).

Forking is only safe while the process has one thread: a lock another thread held at the fork
stays held for ever in the child. :func:`prepare` checks the kernel's count of this process'
threads (Python's and native ones alike) and says no when there is more than one, or when
``VEEKSHA_FORK=0``; the launchers then start fresh interpreters as before. The child becomes
what a fresh interpreter would be: its standard streams the pipes asked for, every other
descriptor closed except those passed on, default signal handling, no exit handlers of the
parent's, the collector on (the parent's objects frozen: never scanned), its name in
``/proc/PID/comm`` (``ps -o comm``, ``top``) saying what it is.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Collection, Iterable
from typing import IO

__all__ = ["ENV_SWITCH", "ForkedProcess", "prepare", "single_threaded"]

ENV_SWITCH = "VEEKSHA_FORK"


def single_threaded() -> bool:
    """Whether this process has exactly one thread (native threads counted)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # (no /proc: not Linux, where the helpers are never forked)
        return False


def prepare(modules: Iterable[str]) -> bool:
    """Import ``modules`` (what the helper processes need before they can start) and say
    whether the helpers can be forked from here (Linux, one thread, not turned off by
    ``VEEKSHA_FORK=0``)."""
    if os.environ.get(ENV_SWITCH, "1") == "0" or not hasattr(os, "pidfd_open"):
        return False
    if not single_threaded():
        return False
    import importlib

    for name in modules:
        importlib.import_module(name)
    return single_threaded()  # (an import may have started one)


class ForkedProcess:
    """A child process running ``target()`` in a fork of this process: the part of
    ``subprocess.Popen``'s interface the launchers use (``pid``, ``stdin``, ``stdout``,
    ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``). Its exit code
    is ``target``'s return value (an int, else 0), a ``SystemExit``'s code, or 1 after an
    uncaught exception (printed to its standard error)."""

    def __init__(
        self,
        target: Callable[[], object],
        name: str,
        *,
        stdin: int | None = None,
        stdout: int | None = None,
        stderr: IO[bytes] | None = None,
        pass_fds: Iterable[int] = (),
        start_new_session: bool = False,
        preexec_fn: Callable[[], None] | None = None,
        ignore_signals: Collection[int] = (),
    ) -> None:
        ends: dict[int, int] = {}  # the child's standard descriptor: the descriptor it gets
        theirs: list[int] = []  # the child's ends, closed in the parent after the fork
        self.stdin: IO[bytes] | None = None
        self.stdout: IO[bytes] | None = None
        try:
            if stdin == subprocess.PIPE:
                read, write = os.pipe()
                ends[0] = read
                theirs.append(read)
                self.stdin = open(write, "wb")  # noqa: SIM115  (the caller closes it)
            elif stdin == subprocess.DEVNULL:
                ends[0] = os.open(os.devnull, os.O_RDONLY)
                theirs.append(ends[0])
            if stdout == subprocess.PIPE:
                read, write = os.pipe()
                ends[1] = write
                theirs.append(write)
                self.stdout = open(read, "rb")  # noqa: SIM115  (the caller closes it)
            if stderr is not None:
                ends[2] = stderr.fileno()
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()  # (nothing buffered here is written twice)
            # ``ignore_signals`` are blocked from before the fork until the child ignores them:
            # one sent to the process group meanwhile (a terminal's Ctrl-C) is not run by the
            # child with its parent's handlers (and held here for this process, not lost)
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ignore_signals)
            try:
                self.pid = os.fork()
            except BaseException:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                raise
            if self.pid != 0:  # (the child unblocks them once it ignores them)
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        except BaseException:
            for fd in theirs:
                os.close(fd)
            for stream in (self.stdin, self.stdout):
                if stream is not None:
                    stream.close()
            raise
        if self.pid == 0:  # pragma: no cover - the child (its code is measured by its tests)
            ignored = set(ignore_signals)
            _child(target, name, ends, set(pass_fds), start_new_session, preexec_fn, ignored)
        for fd in theirs:
            os.close(fd)
        self.args = name
        self.returncode: int | None = None
        self._lock = threading.Lock()
        self._pidfd = os.pidfd_open(self.pid)

    def poll(self) -> int | None:
        """Its exit code once it exited (and reaped), else None."""
        with self._lock:  # (one reaper: the pool's and a reader thread's waits may race)
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # (reaped outside this object: its code is lost)
                    pid, status = self.pid, 0
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
                    os.close(self._pidfd)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for its exit (``subprocess.TimeoutExpired`` after ``timeout`` seconds)."""
        while self.poll() is None:
            # (its pidfd turns readable when it exits; POLLNVAL when another thread reaped it
            # and closed the pidfd meanwhile: the next poll() has its code)
            waiting = select.poll()
            waiting.register(self._pidfd, select.POLLIN)
            if not waiting.poll(None if timeout is None else max(0.0, timeout) * 1000):
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Signal it, unless it exited."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        if getattr(self, "returncode", 0) is None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)


def _child(
    target: Callable[[], object],
    name: str,
    ends: dict[int, int],
    keep: set[int],
    new_session: bool,
    preexec_fn: Callable[[], None] | None,
    ignored: set[int],
) -> None:  # pragma: no cover - runs in the child
    code = 1
    try:
        _become_fresh(name, ends, keep, new_session, ignored)
        if preexec_fn is not None:
            preexec_fn()
        result = target()
        code = result if isinstance(result, int) else 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            with contextlib.suppress(Exception):
                sys.stderr.write(f"{exc.code}\n")
    except BaseException:  # noqa: BLE001 - reported on its standard error, like an interpreter
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _become_fresh(
    name: str, ends: dict[int, int], keep: set[int], new_session: bool, ignored: set[int]
) -> None:
    """What a fresh interpreter would be (see the module docstring)."""
    atexit._clear()  # (the parent's exit handlers are the parent's)
    gc.freeze()  # (the parent's objects: never scanned, their pages never written for it)
    gc.enable()
    if new_session:
        os.setsid()
    for fd, source in ends.items():
        if fd != source:
            os.dup2(source, fd)
    keep = keep | {0, 1, 2}
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    for fd in keep - {0, 1, 2}:
        os.set_inheritable(fd, True)  # (as ``pass_fds`` leaves them)
    signal.set_wakeup_fd(-1)
    for number in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            if callable(signal.getsignal(number)):
                signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for ignore in ignored:
        signal.signal(ignore, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # (after the handlers: ``ignore_signals``)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), line_buffering=os.isatty(1)
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        errors="backslashreplace",
        line_buffering=True,
    )
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write(name[:15])
