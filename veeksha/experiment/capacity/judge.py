"""The statistical verdict of a probe: each SLO's percentile with its confidence interval.

An SLO says "the ``percentile`` quantile of ``metric`` is at most ``value``". A probe's requests
are a sample; the SLO's percentile of the server at that load is unknown. For each SLO the judge
takes the sample the run's own SLO evaluation takes (the measured phase's values of the metric,
TBC over every gap; see ``veeksha.evaluate.slo``) and one infinite value per failed request
(``probe.read_slo_samples``), pooled over every healthy run at the value, and its
order-statistic confidence interval (``order_stats``):

- ``pass`` when the interval's upper end is at most the threshold (met, with confidence),
- ``fail`` when its lower end is above the threshold (broken, with confidence; requests that
  failed are infinitely slow, so a run whose requests all failed fails),
- ``undecided`` otherwise: the interval straddles the threshold, or the sample is too small to
  bound the percentile (a p99 needs 368 values before it can be proven met at 95 %), or empty
  (the run measured nothing: its warmup took it all).

The probe passes when every SLO passes, fails when any fails, and is undecided otherwise. Each SLO
is judged at the same confidence (no correction for several SLOs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from veeksha.experiment.capacity.order_stats import QuantileInterval, quantile_interval
from veeksha.experiment.capacity.search import FAIL, PASS, UNDECIDED, Verdict
from veeksha.scenario.models import SLO

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["Judgement", "SloJudgement", "judge", "slo_verdict"]


@dataclass(frozen=True, slots=True)
class SloJudgement:
    """One SLO at one value: its interval and verdict."""

    slo: SLO
    interval: QuantileInterval
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.slo.name,
            "metric": self.slo.metric,
            "threshold": self.slo.value,
            "verdict": self.verdict,
            **self.interval.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class Judgement:
    """Every SLO's judgement at one value and the value's verdict."""

    verdict: Verdict
    slos: tuple[SloJudgement, ...]


def slo_verdict(interval: QuantileInterval, threshold: float) -> Verdict:
    """``pass``, ``fail`` or ``undecided`` for an interval against a threshold."""
    if interval.high <= threshold:
        return PASS
    if interval.low > threshold:
        return FAIL
    return UNDECIDED


def judge(
    slos: Sequence[SLO], samples: Sequence[Sequence[NDArray[np.float64]]], confidence: float
) -> Judgement:
    """Judge ``slos`` on ``samples``: per run, per SLO (in ``slos`` order), the metric's values."""
    judged = []
    for index, slo in enumerate(slos):
        parts = [run[index] for run in samples]
        pooled = np.concatenate(parts) if parts else np.empty(0)
        interval = quantile_interval(pooled, slo.percentile, confidence)
        judged.append(SloJudgement(slo, interval, slo_verdict(interval, slo.value)))
    verdicts = {j.verdict for j in judged}
    verdict = FAIL if FAIL in verdicts else UNDECIDED if UNDECIDED in verdicts else PASS
    return Judgement(verdict, tuple(judged))
