"""The engine: runs a scenario end to end (see ``veeksha.engine.run``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veeksha.engine.run import RunOutcome, run_benchmark, run_scenario

__all__ = ["RunOutcome", "run_benchmark", "run_scenario"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from veeksha.engine import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
