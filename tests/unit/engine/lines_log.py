"""A run log for unit tests: what the engine said, one line each, warnings marked."""

from __future__ import annotations


class Log:
    """Keeps each message of ``info`` and ``warning`` (the latter as ``warning: ...``)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str) -> None:
        self.lines.append(message)

    def warning(self, message: str) -> None:
        self.lines.append("warning: " + message)
