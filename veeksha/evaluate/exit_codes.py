"""Exit codes of ``veeksha run`` (and of the other commands where they apply), in one place.

    0  OK              the run completed; health and SLOs as required
    1  INTERNAL_ERROR  an unexpected error (a bug: please report it)
    2  CONFIG_ERROR    invalid scenario, override or input (bad file, not a run folder,
                       unreachable target): ScenarioError, ConfigurationError, TargetError
    3  RUN_ABORTED     the run was interrupted or aborted (signal, fatal worker or write error,
                       a distributed run's lost shard, its failures over runtime.max_errors or
                       max_error_rate); results collected so far are kept and evaluated
    4  HEALTH_FAILED   a health check failed and ``health_checks.strict`` is true
    5  SLO_UNMET       at least one SLO of ``evaluators[].slos`` was not met

When several apply, the first in the order 2, 3, 4, 5 wins (a broken run says so before its SLOs).
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode", "run_exit_code"]


class ExitCode(IntEnum):
    """Process exit codes of veeksha."""

    OK = 0
    INTERNAL_ERROR = 1
    CONFIG_ERROR = 2
    RUN_ABORTED = 3
    HEALTH_FAILED = 4
    SLO_UNMET = 5


def run_exit_code(
    *, interrupted: bool, health_failed: bool, strict: bool, all_slos_met: bool | None
) -> ExitCode:
    """The exit code of a run that produced results (config errors are raised before)."""
    if interrupted:
        return ExitCode.RUN_ABORTED
    if health_failed and strict:
        return ExitCode.HEALTH_FAILED
    if all_slos_met is False:
        return ExitCode.SLO_UNMET
    return ExitCode.OK
