"""Health checks of the session arrival process (rate traffic only; SKIP for concurrent).

``dispatch_rate``: the observed session rate against the configured one. The rate is measured on
two timelines: the sessions' start times (``sessions.started_at``, the planned arrivals) and the
moments their first request was actually sent (``sent_at`` of the roots), so a generator that
starts sessions late fails too. Observed rate = (n − 1) / (last start − first start). FAIL when
|observed − configured| / configured exceeds ``dispatch_rate_tolerance`` and also exceeds what
sampling noise explains for n − 1 gaps: z · cv / √(n − 1), with z the two-sided normal quantile
at ``arrival_ks_alpha`` and cv the gaps' coefficient of variation (1 for poisson, 1/√k for gamma,
0 for fixed). So 20 poisson sessions are not failed for a 20% deviation that chance explains.
Nor is a short run failed for the lateness the run accepts: a first or last session sent late by
``max_dispatch_lag_p99_ms`` moves the span by that much, a relative error of lag × rate / (n − 1)
(6 sessions at 50/s with a 100-ms lag budget: 100 %; 1,000 sessions at 10/s with 5 ms: 0.005 %).

With a ``ramp`` (``veeksha.schedule.ramp``) the configured rate of a timeline is the mean
offered rate over its own span, (Λ(last) − Λ(first)) / (last − first): the observed count is
compared with Λ over the same window (the lag share taken at the highest rate λ in it).

With ``traffic_scheduler: {type: trace}`` both compare with the trace's own timestamps instead
(``veeksha.evaluate.trace_arrivals``).

``arrival_distribution``: a Kolmogorov–Smirnov test of the inter-arrival gaps against the
configured distribution (poisson → exponential, gamma → gamma; ``veeksha.evaluate.ks``, numpy
only: scipy.stats would cost 1.2–2 CPU-s to import); FAIL when p < arrival_ks_alpha.
For fixed intervals, FAIL when a gap deviates from the interval by more than
``max_dispatch_lag_p99_ms``. Both need at least ``MIN_GAPS`` gaps, else SKIP.
With a ``ramp`` the gaps tested are the rescaled ones, Λ(tᵢ) − Λ(tᵢ₋₁), against the law at rate
1 (the time-rescaling theorem: a correct ramp makes them the interval generator's gaps at unit
rate); for fixed intervals a start's deviation is from Λ⁻¹(Λ(tᵢ₋₁) + 1), where it was due.
"""

from __future__ import annotations

import math
import statistics as _stdlib_stats
from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.ks import exponential_cdf, gamma_cdf, ks_test
from veeksha.evaluate.stats import Floats, column, integers, percentile
from veeksha.evaluate.trace_arrivals import trace_arrival_timeline, trace_dispatch_rate
from veeksha.generate.distributions import mean_interval
from veeksha.plural import counted
from veeksha.record import kernels as ak
from veeksha.scenario.models import GammaInterval, PoissonInterval, RateScheduler, TraceScheduler
from veeksha.schedule.ramp import RateRamp, ramp_of

__all__ = ["ARRIVAL_DISTRIBUTION", "DISPATCH_RATE", "MIN_GAPS", "root_times"]

MIN_GAPS = 5


def root_times(requests: pa.Table, name: str) -> Floats:
    """Per session, the earliest ``name`` (e.g. ready_at, sent_at) of its root requests, sorted."""
    if requests.num_rows == 0:
        return np.empty(0)
    roots = integers(ak.list_value_length(requests["parents"])) == 0  # a null list counts 0
    # per session, the minimum ignoring NaN (a pyarrow group_by would import pandas via acero)
    ids, inverse = np.unique(integers(requests["session_id"])[roots], return_inverse=True)
    values = np.full(len(ids), np.nan)
    np.fmin.at(values, inverse, column(requests, name)[roots])
    return np.sort(values[~np.isnan(values)])


def _session_starts(data: HealthInput) -> Floats:
    if data.sessions.num_rows:
        starts = column(data.sessions, "started_at")
        return np.sort(starts[~np.isnan(starts)])
    return root_times(data.measured, "ready_at")


def _rate(times: Floats) -> float | None:
    span = float(times[-1] - times[0]) if times.size >= 2 else 0.0
    return (times.size - 1) / span if span > 0 else None


def _cv(data: HealthInput) -> float:
    cfg = data.scenario.traffic_scheduler
    assert isinstance(cfg, RateScheduler)
    gen = cfg.interval_generator
    if isinstance(gen, PoissonInterval):
        return 1.0
    if isinstance(gen, GammaInterval):
        return 1.0 / math.sqrt(gen.effective_shape)
    return 0.0


def _skip_reason(data: HealthInput) -> str | None:
    cfg = data.scenario.traffic_scheduler
    if not isinstance(cfg, RateScheduler):
        return "concurrent traffic has no configured arrival rate"
    if mean_interval(cfg.interval_generator) <= 0:
        return "a fixed interval of 0 releases every session at once"
    return None


def _one_shard(data: HealthInput) -> str | None:
    """Why a shard's own folder is not judged on the arrivals (None: it is not a shard)."""
    shard = data.run_info.get("shard")
    if isinstance(shard, dict) and int(shard.get("count", 1)) > 1:
        return (
            f"one shard of {shard['count']} starts every {shard['count']}th arrival: the"
            " arrivals are judged on the merged run"
        )
    return None


def _dispatch_rate(data: HealthInput) -> Outcome:
    if reason := _one_shard(data):
        return Outcome(SKIP, reason, {})
    if isinstance(data.scenario.traffic_scheduler, TraceScheduler):
        return trace_dispatch_rate(data)
    reason = _skip_reason(data)
    if reason:
        return Outcome(SKIP, reason, {})
    cfg = data.scenario.traffic_scheduler
    assert isinstance(cfg, RateScheduler)
    starts = _session_starts(data)
    if starts.size < MIN_GAPS + 1:
        return Outcome(SKIP, f"{counted(starts.size, 'measured session')}, need {MIN_GAPS + 1}", {})
    ramp = ramp_of(cfg)
    if ramp is not None:
        return _ramped_dispatch_rate(data, ramp, starts)
    configured = 1.0 / mean_interval(cfg.interval_generator)
    allowed, statistics = _rate_allowance(data, configured, starts)
    statistics = {"configured_rate": configured, **statistics}
    worst = 0.0
    timelines = (("started", starts), ("sent", root_times(data.measured, "sent_at")))
    for label, times in timelines:
        observed = _rate(times)
        error = None if observed is None else abs(observed - configured) / configured
        statistics[f"{label}_rate"] = observed
        statistics[f"{label}_relative_error"] = error
        worst = max(worst, error or 0.0)
    observed = statistics["sent_rate"] or statistics["started_rate"]
    if observed is None:
        return _one_instant(configured, statistics)
    detail = f"observed {observed:.4g}/s vs configured {configured:.4g}/s ({worst:.1%} off"
    detail += f", allowed {allowed:.1%})"
    return Outcome(FAIL if worst > allowed else PASS, detail, statistics)


def _rate_allowance(data: HealthInput, rate: float, starts: Floats) -> tuple[float, dict[str, Any]]:
    """The relative rate error ``dispatch_rate`` allows for ``starts`` at (up to) ``rate``, and
    the statistics that say why: the tolerance, the sampling noise, the accepted lag's share."""
    tol = data.thresholds.dispatch_rate_tolerance
    z = _stdlib_stats.NormalDist().inv_cdf(1 - data.thresholds.arrival_ks_alpha / 2)
    # (a first or last session sent late by the lag the run accepts moves the span by that
    # much: with few sessions over a short span, that alone is a large rate error)
    lag_share = data.thresholds.max_dispatch_lag_p99_ms / 1000 * rate / (starts.size - 1)
    allowed = max(tol, z * _cv(data) / math.sqrt(starts.size - 1), lag_share)
    statistics = {"sessions": int(starts.size), "tolerance": tol, "lag_share": lag_share}
    return allowed, {**statistics, "allowed_relative_error": allowed}


def _offered(ramp: RateRamp, times: Floats) -> float | None:
    """The mean offered rate over the span of ``times``: Λ's change over it, per second."""
    span = float(times[-1] - times[0]) if times.size >= 2 else 0.0
    if span <= 0:
        return None
    lam = ramp.cumulative(np.array([times[0], times[-1]]))
    return float(lam[1] - lam[0]) / span


def _one_instant(rate: float, statistics: dict[str, Any]) -> Outcome:
    """The outcome when every measured session started at the same instant (a rate so high
    that its gaps round to nothing): no observed rate to compare."""
    return Outcome(
        SKIP,
        "every measured session started at the same instant: no rate to measure"
        f" (configured {rate:.4g}/s)",
        statistics,
    )


def _ramped_dispatch_rate(data: HealthInput, ramp: RateRamp, starts: Floats) -> Outcome:
    """dispatch_rate under a ramp: each timeline against Λ over its own span."""
    peak = float(ramp.rate(np.array([starts[0], starts[-1]])).max())
    allowed, statistics = _rate_allowance(data, peak, starts)
    statistics = {"ramp": True, **statistics}
    worst = 0.0
    timelines = (("started", starts), ("sent", root_times(data.measured, "sent_at")))
    for label, times in timelines:
        observed, offered = _rate(times), _offered(ramp, times)
        error = None
        if observed is not None and offered:
            error = abs(observed - offered) / offered
        statistics[f"{label}_rate"] = observed
        statistics[f"{label}_offered_rate"] = offered
        statistics[f"{label}_relative_error"] = error
        worst = max(worst, error or 0.0)
    label = "sent" if statistics["sent_rate"] else "started"
    observed, offered = statistics[f"{label}_rate"], statistics[f"{label}_offered_rate"]
    statistics["configured_rate"] = offered
    if observed is None or offered is None:
        return _one_instant(peak, statistics)
    detail = f"observed {observed:.4g}/s vs offered {offered:.4g}/s by the ramp over the same"
    detail += f" span ({worst:.1%} off, allowed {allowed:.1%})"
    return Outcome(FAIL if worst > allowed else PASS, detail, statistics)


def _fixed_deviation(
    data: HealthInput, interval: float, deviation: Floats, gaps: int, extra: dict[str, Any]
) -> Outcome:
    limit = data.thresholds.max_dispatch_lag_p99_ms / 1000
    statistics: dict[str, Any] = {"interval": interval, "gaps": gaps, "limit_s": limit, **extra}
    statistics |= {"max_deviation_s": float(deviation.max())}
    statistics |= {"p99_deviation_s": percentile(deviation, 99)}
    ok = deviation.max() <= limit
    detail = f"max gap deviation {deviation.max() * 1000:.3f} ms (limit {limit * 1000:g} ms)"
    return Outcome(PASS if ok else FAIL, detail, statistics)


def _arrival_distribution(data: HealthInput) -> Outcome:
    if reason := _one_shard(data):
        return Outcome(SKIP, reason, {})
    if isinstance(data.scenario.traffic_scheduler, TraceScheduler):
        return trace_arrival_timeline(data)
    reason = _skip_reason(data)
    if reason:
        return Outcome(SKIP, reason, {})
    cfg = data.scenario.traffic_scheduler
    assert isinstance(cfg, RateScheduler)
    starts = _session_starts(data)
    gaps = np.diff(starts)
    if gaps.size < MIN_GAPS:
        return Outcome(SKIP, f"{counted(gaps.size, 'inter-arrival gap')}, need {MIN_GAPS}", {})
    law = cfg.interval_generator
    ramp = ramp_of(cfg)
    if ramp is not None:  # the gaps in operational time, Λ(tᵢ) − Λ(tᵢ₋₁): the law at rate 1
        gaps = np.diff(ramp.cumulative(starts))
    if not isinstance(law, PoissonInterval | GammaInterval):
        if ramp is None:
            interval = mean_interval(law)
            return _fixed_deviation(data, interval, np.abs(gaps - interval), gaps.size, {})
        due = ramp.inverse(ramp.cumulative(starts[:-1]) + 1.0)
        deviation = np.abs(starts[1:] - due)
        return _fixed_deviation(data, mean_interval(law), deviation, gaps.size, {"ramp": True})
    rate = 1.0 if ramp is not None else law.arrival_rate
    if isinstance(law, PoissonInterval):
        cdf = exponential_cdf(1.0 / rate)
    else:
        k = law.effective_shape
        cdf = gamma_cdf(k, 1.0 / (rate * k))
    d, p_value = ks_test(gaps, cdf)
    alpha = data.thresholds.arrival_ks_alpha
    statistics: dict[str, Any] = {"distribution": cfg.interval_generator.type}
    if ramp is not None:
        statistics["ramp"] = True  # (the gaps are rescaled: mean 1)
    statistics["gaps"] = int(gaps.size)
    statistics |= {"ks_statistic": d, "p_value": p_value}
    statistics |= {"alpha": alpha, "mean_gap": float(gaps.mean())}
    statistics |= {"expected_mean_gap": 1.0 if ramp is not None else mean_interval(law)}
    detail = f"KS D={d:.4f}, p={p_value:.4g} (alpha {alpha:g})"
    return Outcome(PASS if p_value >= alpha else FAIL, detail, statistics)


DISPATCH_RATE = HealthCheck(
    "dispatch_rate",
    "observed session arrival rate vs the configured rate (rate traffic; trace: the trace's)",
    _dispatch_rate,
)
ARRIVAL_DISTRIBUTION = HealthCheck(
    "arrival_distribution",
    "inter-arrival times follow the configured distribution (KS test; fixed: deviation;"
    " trace: the trace's own timestamps)",
    _arrival_distribution,
)
