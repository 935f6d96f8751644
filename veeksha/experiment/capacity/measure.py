"""Measuring one knob value: runs until the value has a verdict, or the budget is spent.

A run at a value either was healthy (its health verdict is not FAIL: the load generator kept up
and behaved) or not. An unhealthy run is no server result: it is retried once (one retry per
value); if the retry is unhealthy too, the value's verdict is ``unhealthy`` (or, when an
earlier healthy run at the value was undecided, stays ``undecided``). Healthy runs are
pooled and judged (``judge``); while the judgement is ``undecided`` and extensions remain, one
more run is made at the value (``extension`` 1, 2, ...: the runner makes it twice, four times...
the base size, with another seed) and the pool judged again. ``max_extensions`` bounds the extra
runs; a value still undecided after them is reported ``undecided``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from veeksha.experiment.capacity.judge import Judgement
from veeksha.experiment.capacity.search import UNDECIDED, UNHEALTHY, Verdict

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["ProbeRun", "RunRequest", "ValueResult", "measure_value"]


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What the measurement asks of the runner: a run at ``value``; ``extension`` k > 0 is the
    k-th extra run for an undecided value, ``retry`` marks the rerun of an unhealthy one."""

    value: float
    extension: int = 0
    retry: bool = False


@dataclass(frozen=True, slots=True)
class ProbeRun:
    """What one run left: its folder, its health, and per SLO the metric's measured values."""

    request: RunRequest
    run_dir: Path | None
    healthy: bool
    health_detail: str = ""
    samples: tuple[NDArray[np.float64], ...] = ()
    requests: int = 0  # measured LLM requests, every status
    failed: int = 0  # of them, failed (error, timeout): the samples' +inf values


@dataclass
class ValueResult:
    """A value's verdict, the judgement behind it (None when no healthy run) and every run."""

    value: float
    verdict: Verdict
    judgement: Judgement | None
    runs: list[ProbeRun] = field(default_factory=list)

    @property
    def healthy_runs(self) -> list[ProbeRun]:
        return [run for run in self.runs if run.healthy]

    @property
    def requests(self) -> int:
        """Measured requests of the healthy runs (the judged pool), every status."""
        return sum(run.requests for run in self.healthy_runs)

    @property
    def failed(self) -> int:
        """Of them, the failed ones (error, timeout), each judged infinitely slow."""
        return sum(run.failed for run in self.healthy_runs)


def measure_value(
    value: float,
    run: Callable[[RunRequest], ProbeRun],
    judge: Callable[[Sequence[ProbeRun]], Judgement],
    max_extensions: int,
) -> ValueResult:
    """Run at ``value`` until it has a verdict (see the module docstring)."""
    result = ValueResult(value, UNDECIDED, None)
    extension = 0
    retried = False
    while True:
        rerun = retried and not (result.runs and result.runs[-1].healthy)
        probe = run(RunRequest(value, extension, rerun))
        result.runs.append(probe)
        if not probe.healthy:
            if retried:  # what the healthy runs said, if any: undecided
                result.verdict = UNHEALTHY if result.judgement is None else result.verdict
                return result
            retried = True
            continue
        result.judgement = judge(result.healthy_runs)
        result.verdict = result.judgement.verdict
        if result.verdict != UNDECIDED or extension >= max_extensions:
            return result
        extension += 1
