"""``LogPump``: a managed server's output, line by line, into server.log with the API key
masked (and the secrets of its environment), keeping the last lines for error messages."""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import IO

from veeksha.redact import Redactor, Redactors
from veeksha.server.supervise import PID_LINE

__all__ = ["LogPump"]

_TAIL_LINES = 30


class LogPump:
    """A thread copying ``stream`` (the supervisor's stdout, the server's output merged) into
    ``path``, masked by ``redact``; it ends when the stream closes (every writer exited)."""

    def __init__(self, stream: IO[bytes], path: Path, redact: Redactor | Redactors) -> None:
        self._stream = stream
        self._redact = redact
        self._out = path.open("a", encoding="utf-8", errors="replace")
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        self._lock = threading.Lock()
        self.server_pid: int | None = None
        self.pid_known = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="server-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def note(self, line: str) -> None:
        """A line of veeksha's own into the log (the command line, why it stopped)."""
        with self._lock:
            if not self._out.closed:
                self._out.write(f"[veeksha] {self._redact(line)}\n")
                self._out.flush()

    def tail(self, lines: int = 20) -> str:
        """The server's last ``lines`` lines of output."""
        return "\n".join(list(self._tail)[-lines:])

    def finish(self, timeout_s: float = 5.0) -> None:
        """Wait for the stream's end (every writer exited), up to ``timeout_s``."""
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def close(self, last_note: str | None = None) -> None:
        """Write ``last_note``, then close the file (lines still coming are dropped)."""
        self.finish()
        if last_note is not None:
            self.note(last_note)
        with self._lock:
            self._out.close()

    def _pump(self) -> None:
        for raw in self._stream:
            line = self._redact(raw.decode(errors="replace").rstrip("\r\n"))
            if self.server_pid is None and line.startswith(PID_LINE):
                self.server_pid = int(line.removeprefix(PID_LINE))
                self.pid_known.set()
            self._tail.append(line)
            with self._lock:
                if self._out.closed:
                    break
                self._out.write(line + "\n")
                self._out.flush()
        self.pid_known.set()  # (never known: it could not start)
        self._stream.close()
