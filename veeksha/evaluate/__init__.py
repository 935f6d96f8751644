"""Evaluation of a run: metrics, health checks, SLOs, output files, reports.

The entry point is ``evaluate_run`` (``veeksha.evaluate.run``), returning an ``Evaluation``;
``StreamingMetrics`` gives progress lines during a run; ``ExitCode`` lists the exit codes. Names
are imported on first use, so ``import veeksha.evaluate.exit_codes`` stays cheap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veeksha.evaluate.exit_codes import ExitCode
    from veeksha.evaluate.run import Evaluation, compute_evaluation, evaluate_run
    from veeksha.evaluate.streaming import StreamingMetrics

__all__ = ["Evaluation", "ExitCode", "StreamingMetrics", "compute_evaluation", "evaluate_run"]

_HOMES = {
    "Evaluation": "veeksha.evaluate.run",
    "compute_evaluation": "veeksha.evaluate.run",
    "evaluate_run": "veeksha.evaluate.run",
    "ExitCode": "veeksha.evaluate.exit_codes",
    "StreamingMetrics": "veeksha.evaluate.streaming",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
