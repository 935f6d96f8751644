"""Service-level objectives (``evaluators[].slos``) and goodput.

An SLO says "the ``percentile`` quantile of ``metric`` is at most ``value`` seconds". It is judged
on the measured phase with the same quantile rule as the summary (numpy linear interpolation),
TBC over all gaps. An SLO with no data (nothing measured) is not met.

Goodput counts the work that met every SLO. A request meets an SLO when its own value is within
the threshold (``ttfc``, ``tpot``, ``e2e``, ``normalized_e2e``; a value that is undefined, such as
the TPOT of a one-token answer, breaks nothing), and for ``tbc`` when at least ``percentile`` of
its gaps are within the threshold (a request with no gaps meets it). Goodput is the number of ok
requests meeting all SLOs, and of ok sessions whose measured requests all meet them, per second of
the measured window. Without SLOs every ok request and session counts.

Worked example: SLO p90 TBC ≤ 20 ms; a request with gaps 10, 15, 30 ms has 2/3 of its gaps within
20 ms, below 90%, so it does not count toward goodput.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from veeksha.evaluate.metrics import Digest
from veeksha.evaluate.sessions import session_ids
from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column, distinct, floats, int_column, integers, status_is
from veeksha.record import kernels as ak
from veeksha.scenario.models import SLO, Scenario

__all__ = [
    "SloResult",
    "all_met",
    "goodput",
    "judge_slos",
    "request_meets",
    "scenario_slos",
]


@dataclass(frozen=True, slots=True)
class SloResult:
    """One judged SLO: the observed quantile (None without data) against the threshold."""

    name: str
    metric: str
    percentile: float
    threshold: float
    observed: float | None
    samples: int
    met: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"unit": "s"}


def scenario_slos(scenario: Scenario) -> list[SLO]:
    """Every SLO of every evaluator of ``scenario``."""
    return [slo for evaluator in scenario.evaluators for slo in evaluator.slos]


def judge_slos(slos: list[SLO], digests: Mapping[str, Digest]) -> list[SloResult]:
    """Judge each SLO on the digests of the measured phase's samples, which hold the SLOs'
    quantiles (``summary.metric_digests``)."""
    results = []
    for slo in slos:
        found = digests[slo.metric]
        observed = found.quantiles[slo.percentile] if found.count else None
        met = observed is not None and observed <= slo.value
        results.append(
            SloResult(slo.name, slo.metric, slo.percentile, slo.value, observed, found.count, met)
        )
    return results


def all_met(results: list[SloResult]) -> bool | None:
    """True when every SLO is met; None when there are none."""
    return all(r.met for r in results) if results else None


def _tbc_meets(requests: pa.Table | ColumnSource, slo: SLO) -> NDArray[np.bool_]:
    parts = [np.empty(0, dtype=bool)]
    for gaps in ColumnSource.of(requests).batches("tbc"):  # a batch of rows at a time
        flat = floats(ak.list_flatten(gaps))
        owner = integers(ak.list_parent_indices(gaps))
        n = len(gaps)
        total = np.bincount(owner, minlength=n)
        within = np.bincount(owner, weights=(flat <= slo.value).astype(float), minlength=n)
        share = np.divide(within, total, out=np.ones(n), where=total > 0)
        parts.append(np.asarray(share >= slo.percentile - 1e-12, dtype=bool))
    return np.concatenate(parts)


def request_meets(requests: pa.Table | ColumnSource, slos: list[SLO]) -> NDArray[np.bool_]:
    """Per row: an ok request meeting every SLO (see the module docstring)."""
    meets = status_is(requests, "ok")
    for slo in slos:
        if slo.metric == "tbc":
            meets &= _tbc_meets(requests, slo)
        else:
            values = column(requests, slo.metric)
            meets &= np.isnan(values) | (values <= slo.value)
    return meets


def goodput(
    requests: pa.Table | ColumnSource,
    sessions: pa.Table | ColumnSource,
    slos: list[SLO],
    window: tuple[float, float] | None,
) -> dict[str, Any]:
    """summary.json's ``goodput``: requests and sessions meeting every SLO, and their rates."""
    meets = request_meets(requests, slos)
    good_requests = int(meets.sum())
    ok_sessions = session_ids(sessions, "ok")
    if requests.num_rows:
        ids = int_column(requests, "session_id")
        bad = distinct(ids[~meets])
        good_sessions = int((~np.isin(ok_sessions, bad)).sum())
    else:
        good_sessions = int(ok_sessions.size)
    span = None if window is None else window[1] - window[0]
    return {
        "slo_count": len(slos),
        "requests": good_requests,
        "sessions": good_sessions,
        "requests_per_s": None if not span else good_requests / span,
        "sessions_per_s": None if not span else good_sessions / span,
        "request_fraction": good_requests / requests.num_rows if requests.num_rows else None,
    }
