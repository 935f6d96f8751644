"""What a command does when it is stopped from outside or its terminal goes away.

- **Stop signals.** SIGTERM (``kill``, ``docker stop``, systemd) and SIGHUP (the terminal was
  closed) stop a command as Ctrl-C does: a run stops its traffic, keeps every row and writes
  its end (``engine.run``); elsewhere (set-up, a sweep between its points) they raise
  ``KeyboardInterrupt`` through the SIGINT handler in force, so each is handled where Ctrl-C is.
  A SIGHUP ignored when the process started (``nohup veeksha run ...``) stays ignored.
- **A console that is gone.** After the terminal closes, a write to it fails (EIO), as a write
  to a pipe whose reader left does (EPIPE, e.g. ``veeksha run ... 2>&1 | tee log`` when the
  terminal closes and takes ``tee`` with it). The standard streams of a command write through
  :class:`_ConsoleFile`: the first such failure sends that stream to ``/dev/null`` from then on,
  so the run goes on writing its results and ends with its own exit code, not with an error
  about its console. Other write errors (a full disk behind a redirect) are raised as before.

``commanding()`` installs both for the duration of a command (``veeksha.cli``) and puts back
what was there, so a command called in-process (tests) leaves its caller as it was.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any, TextIO

__all__ = ["STOP_SIGNALS", "commanding", "ending", "stop_signals"]

#: write errors that mean the console is gone, not that the write was wrong
_GONE = frozenset({errno.EIO, errno.EPIPE, errno.ENXIO})


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop a run as Ctrl-C does: SIGINT, SIGTERM, and SIGHUP unless it was
    ignored when the process started (``nohup``)."""
    ours = (signal.SIGINT, signal.SIGTERM)
    return ours if _hangup_ignored() else (*ours, signal.SIGHUP)


def _hangup_ignored() -> bool:
    return _state.hangup_ignored if _state.hangup_ignored is not None else _now_ignored()


def _now_ignored() -> bool:
    return signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


class _State:
    hangup_ignored: bool | None = None  # (as the outermost command found it)


_state = _State()


#: every signal that stops a command as Ctrl-C does: what the run's helper processes ignore
#: (the main process stops them), blocked from before they start (``dispatch.launch``)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_ALL = STOP_SIGNALS


def ending() -> None:
    """The command is ending because it was stopped: a further Ctrl-C, SIGTERM or SIGHUP is
    ignored (the command's own message and exit code stand, not click's ``Aborted!``);
    ``commanding()`` puts the handlers back on its way out."""
    import threading

    if threading.current_thread() is threading.main_thread():
        for sig in _ALL:
            signal.signal(sig, signal.SIG_IGN)


def _as_ctrl_c(signum: int, frame: FrameType | None) -> Any:
    """SIGTERM or SIGHUP where no run is listening: what Ctrl-C would do there (the SIGINT
    handler in force: asyncio's Runner cancels its task, Python's raises KeyboardInterrupt)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        return handler(signal.SIGINT, frame)
    raise KeyboardInterrupt  # (SIGINT ignored, e.g. started in the background: still a stop)


@contextlib.contextmanager
def commanding() -> Iterator[None]:
    """For the duration of a command: stop signals act as Ctrl-C, and a console that is gone
    costs nothing (see the module docstring). Only in the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    outermost = _state.hangup_ignored is None
    if outermost:
        _state.hangup_ignored = _now_ignored()
    previous: dict[signal.Signals, Any] = {sig: signal.getsignal(sig) for sig in _ALL}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if previous[sig] == signal.SIG_DFL:
            signal.signal(sig, _as_ctrl_c)
    streams = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = _guarded(sys.stdout, 1), _guarded(sys.stderr, 2)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        sys.stdout, sys.stderr = streams
        for sig, handler in previous.items():
            if handler is not None:  # (None: set from outside Python; left as it is)
                signal.signal(sig, handler)
        if outermost:
            _state.hangup_ignored = None


def _guarded(stream: TextIO, fd: int) -> TextIO:
    """``stream`` written through a :class:`_ConsoleFile` when it is the process' own ``fd``
    (not a test's capture, not already guarded)."""
    if isinstance(stream, _GuardedText):
        return stream
    try:
        if stream.fileno() != fd:
            return stream
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return stream
    with contextlib.suppress(OSError, ValueError):
        stream.flush()  # (what it holds goes out before the new writer takes the fd)
    return _GuardedText(
        io.BufferedWriter(_ConsoleFile(fd)),
        encoding=stream.encoding,
        errors=stream.errors,
        line_buffering=True,
    )


class _GuardedText(io.TextIOWrapper):
    """A standard stream written through :class:`_ConsoleFile`."""


class _ConsoleFile(io.RawIOBase):
    """File descriptor ``fd`` of the console; once a write finds it gone (EIO, EPIPE), it is
    pointed at ``/dev/null`` and every write succeeds unseen."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd
        self.gone = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return not self.gone and os.isatty(self._fd)

    def write(self, data: Any) -> int:
        view = memoryview(data)
        if self.gone:
            return len(view)
        try:
            return os.write(self._fd, view)
        except BlockingIOError:
            return None  # type: ignore[return-value]  # (as FileIO: a non-blocking fd is full)
        except OSError as exc:
            if exc.errno not in _GONE:
                raise
        self.gone = True
        with contextlib.suppress(OSError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._fd)
            os.close(null)
        return len(view)

    def close(self) -> None:  # (the descriptor is the process' own: never closed here)
        self.flush()
        super().close()
