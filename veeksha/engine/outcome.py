"""What a run did (``RunOutcome``) and the exit code of ``veeksha run`` it gives."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from veeksha.evaluate.exit_codes import run_exit_code
from veeksha.scenario.models import Scenario

__all__ = ["RunOutcome", "exit_code_for"]


@dataclass
class RunOutcome:
    """What a run did: its folder, why it stopped, counts, and the evaluation's verdicts."""

    run_dir: Path
    stop_reason: str = ""
    interrupted: bool = False
    requests: int = 0
    failed: int = 0
    abandoned: int = 0  # by their user (the scenario's abandonment); not among failed
    cancelled: int = 0
    sessions: int = 0
    verdict: str | None = None
    all_slos_met: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def exit_code_for(outcome: RunOutcome, scenario: Scenario) -> int:
    """The exit code of ``veeksha run`` (see ``veeksha.evaluate.exit_codes``)."""
    return run_exit_code(
        interrupted=outcome.interrupted,
        health_failed=outcome.verdict == "FAIL",
        strict=scenario.health_checks.strict,
        all_slos_met=outcome.all_slos_met,
    )
