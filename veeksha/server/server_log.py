"""``ServerLog``: veeksha's side of a managed server's log, server.log.

The server's own output is written there by its supervisor (``veeksha.server.supervise``), each
line with the API keys and the secrets of its environment masked; veeksha appends its own
lines (``[veeksha] ...``: the command line, readiness, why it stopped), masked the same way,
and reads the server's last lines back for an error message. No thread of veeksha's reads the
server's output, so its process stays single-threaded (a sweep forks each point's helpers).
"""

from __future__ import annotations

import os
from pathlib import Path

from veeksha.redact import Redactor, Redactors
from veeksha.server.supervise import PID_LINE

__all__ = ["NOTE_PREFIX", "ServerLog"]

NOTE_PREFIX = "[veeksha] "
_TAIL_BYTES = 64 * 1024  # the end of the file read for its last lines


class ServerLog:
    """server.log at ``path`` (appended to: a sweep's points share one server), with veeksha's
    lines masked by ``redact``."""

    def __init__(self, path: Path, redact: Redactor | Redactors) -> None:
        self.path = Path(path)
        self._redact = redact
        self._out = self.path.open("a", encoding="utf-8", errors="replace")

    def note(self, line: str) -> None:
        """A line of veeksha's own into the log (the command line, why it stopped)."""
        if not self._out.closed:
            self._out.write(f"{NOTE_PREFIX}{self._redact(line)}\n")
            self._out.flush()

    def tail(self, lines: int = 20) -> str:
        """The server's last ``lines`` lines of output (veeksha's and its supervisor's own lines
        left out)."""
        try:
            with self.path.open("rb") as file:
                start = max(0, file.seek(0, os.SEEK_END) - _TAIL_BYTES)
                file.seek(start)
                text = file.read().decode(errors="replace")
        except OSError:
            return ""
        read = text.splitlines()[1 if start else 0 :]  # (a line cut by the window: not it)
        own = [line for line in read if not line.startswith((NOTE_PREFIX, PID_LINE))]
        return "\n".join(own[-lines:])

    def close(self, last_note: str | None = None) -> None:
        """Write ``last_note``, then close the file."""
        if last_note is not None:
            self.note(last_note)
        self._out.close()
