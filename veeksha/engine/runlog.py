"""run.log: the run's own account of itself, one line per event (never per request).

Set-up, target, workers, t0, periodic status lines, why the run stopped, counts, verdicts and
errors. Secrets never reach it: targets are logged through ``Target.public_description``, and
every line is masked for every client's API key (``veeksha.redact``) in case a message quotes a
server that echoed it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from veeksha.redact import Redactor

__all__ = ["RunLog"]


class RunLog:
    """A logger writing ``<run_dir>/run.log``; closed with the run."""

    def __init__(self, run_dir: Path, secrets: Iterable[str | None] = ()) -> None:
        # longest first: a key that contains another is masked whole
        keys = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._redactors = tuple(Redactor(key) for key in keys)
        self.logger = logging.getLogger(f"veeksha.run.{run_dir.name}")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self._handler = logging.FileHandler(run_dir / "run.log", encoding="utf-8")
        self._handler.setFormatter(
            logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s %(message)s", "%H:%M:%S")
        )
        self.logger.addHandler(self._handler)

    def _redact(self, message: str) -> str:
        for redact in self._redactors:
            message = redact(message)
        return message

    def info(self, message: str) -> None:
        self.logger.info(self._redact(message))

    def warning(self, message: str) -> None:
        self.logger.warning(self._redact(message))

    def close(self) -> None:
        self.logger.removeHandler(self._handler)
        self._handler.close()
