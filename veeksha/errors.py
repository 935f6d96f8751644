"""The exception tree of veeksha.

    VeekshaError                  base of every error veeksha raises on purpose
    ├── ScenarioError             a scenario file or override is invalid (exit code 2)
    │     carries ``issues``: every problem found, each with file, line, column, key path, message
    ├── ConfigurationError        valid scenario, impossible setup: a missing file, an unwritable
    │                             output dir, an unreachable target (exit code 2)
    ├── TargetError               the server under test cannot be used (health check failed)
    └── RunAbortedError           a run stopped before its end (signal, fatal worker failure,
                                  write error); results collected so far are kept

The CLI turns every ``VeekshaError`` into one-line messages and an exit code, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ConfigurationError",
    "RunAbortedError",
    "ScenarioError",
    "ScenarioIssue",
    "TargetError",
    "VeekshaError",
]


class VeekshaError(Exception):
    """Base class of every error veeksha raises on purpose."""

    exit_code: int = 1


@dataclass(frozen=True, slots=True)
class ScenarioIssue:
    """One problem in a scenario: where it is and what is wrong, in the user's words."""

    file: str
    line: int | None
    column: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        key = f" {self.path}:" if self.path else ""
        return f"{where}:{key} {self.message}"


class ScenarioError(VeekshaError):
    """A scenario file or command-line override is invalid; ``issues`` lists every problem."""

    exit_code = 2

    def __init__(self, issues: list[ScenarioIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(issue) for issue in issues))


class ConfigurationError(VeekshaError):
    """The scenario is valid but the setup is impossible (missing file, unwritable folder...)."""

    exit_code = 2


class TargetError(VeekshaError):
    """The server under test cannot be used (unreachable, unhealthy, wrong model)."""

    exit_code = 2


class RunAbortedError(VeekshaError):
    """A run stopped before its end; what was collected is kept on disk."""

    exit_code = 3
