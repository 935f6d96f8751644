"""The summary's ``gpus`` section: what the server's GPUs did during the throughput window, and
the energy each output token cost.

Its rows are server_metrics.parquet's ``gpu:*`` samples (``ServerView.gpu``), from the
dcgm-exporters of ``server_metrics.gpu_urls`` or, for a managed server on this host, nvidia-smi.
Each GPU is judged over the throughput window (``throughput.window_start`` to ``window_end``,
seconds since t0: the same window the token rates are of), clipped to the span its samples
cover (``covered_s``; the watch samples once just before t0 and once after the drain, so it is
normally the whole window):

- a gauge sample (utilisation, power, clock, memory, temperature) is read as the average over
  the interval since the sample before it, as dcgm-exporter and nvidia-smi report them: it
  holds over that interval;
- ``energy_j``: the increase of the exporter's energy counter (``DCGM_FI_DEV_TOTAL_ENERGY_
  CONSUMPTION``) between the window's ends, each read by linear interpolation between the two
  samples around it (``energy_from: counter``); without a counter (nvidia-smi), or when it went
  backwards (a reset), the power samples integrated over the window, each held over its
  interval (``energy_from: power``);
- ``power_mean_w``: the energy over the seconds it covers (the average power); without energy,
  the time-weighted mean of the power samples;
- ``utilization_mean``, ``sm_clock_mean_mhz``: the time-weighted mean over the window (the
  sample nearest to the window when none holds inside it); ``*_peak`` (and
  ``memory_used_peak_mib``, ``memory_total_mib``, ``temperature_peak_c``) the largest value
  held inside it.

Across GPUs: ``power_mean_w`` and ``energy_j`` are sums (the server's GPUs together; ``energy_j``
is null when a GPU has none), ``utilization_mean`` the mean. Per unit of work, over the same
window: ``joules_per_output_token`` (energy / output tokens), ``output_tokens_per_joule`` (its
inverse), ``joules_per_request`` (energy / completed requests) and ``output_tokens_per_s_per_gpu``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from veeksha.evaluate.server_view import ServerView

__all__ = ["gpu_section", "held_for", "integrate", "interpolated_increase"]

_Series = tuple[np.ndarray, np.ndarray]


def interpolated_increase(series: _Series, start: float, end: float) -> float | None:
    """How much a counter rose from ``start`` to ``end``, each end read by linear interpolation
    between the samples around it (the series must cover both: clip them first); None when it
    fell between two samples (a reset: its increase is not what was spent)."""
    times, values = series
    if np.any(np.diff(values) < 0):
        return None
    return float(np.interp(end, times, values) - np.interp(start, times, values))


def held_for(series: _Series, start: float, end: float) -> np.ndarray:
    """How long each sample held inside [start, end]: a sample is the average over the interval
    since the one before it (as dcgm-exporter's and nvidia-smi's utilisation and power are), so
    sample k holds over (t[k-1], t[k]]; the first, whose interval is unknown, over nothing."""
    times = series[0]
    lows = np.maximum(np.concatenate(([times[0]], times[:-1])), start)
    return np.clip(np.minimum(times, end) - lows, 0.0, None)


def integrate(series: _Series, start: float, end: float) -> float:
    """The integral of a series from ``start`` to ``end``, each sample held over the interval
    before it (:func:`held_for`)."""
    return float(np.dot(held_for(series, start, end), series[1]))


def _nearest(series: _Series, start: float, end: float) -> float:
    """The value of the sample nearest to the window's middle."""
    times, values = series
    return float(values[int(np.argmin(np.abs(times - (start + end) / 2)))])


def _mean(series: _Series, start: float, end: float) -> float:
    """The time-weighted mean over the window, each sample held over the interval before it;
    the sample nearest to the window when none holds inside it."""
    held = held_for(series, start, end)
    total = float(held.sum())
    return float(np.dot(held, series[1])) / total if total > 0 else _nearest(series, start, end)


def _peak(series: _Series, start: float, end: float) -> float:
    """The largest value held inside the window (the nearest sample's when none is)."""
    held = held_for(series, start, end) > 0
    return float(series[1][held].max()) if held.any() else _nearest(series, start, end)


def _span(series: _Series, start: float, end: float) -> tuple[float, float] | None:
    """[start, end] clipped to the span the series' samples cover; None when nothing is left."""
    times = series[0]
    first, last = max(start, float(times[0])), min(end, float(times[-1]))
    return (first, last) if last > first else None


def _gpu(series: Mapping[str, _Series], start: float, end: float) -> tuple[dict[str, Any], float]:
    """One GPU's entry (its series by field: utilization, power, energy, ...) and the seconds
    of the window its samples cover."""
    out: dict[str, Any] = {}
    for field, mean, peak in (
        ("utilization", "utilization_mean", "utilization_peak"),
        ("power", "power_mean_w", "power_peak_w"),
        ("sm_clock", "sm_clock_mean_mhz", None),
        ("memory_used", None, "memory_used_peak_mib"),
        ("memory_total", None, "memory_total_mib"),
        ("temperature", None, "temperature_peak_c"),
    ):
        samples = series.get(field)
        if mean is not None:
            out[mean] = None if samples is None else _mean(samples, start, end)
        if peak is not None:
            out[peak] = None if samples is None else _peak(samples, start, end)
    energy: float | None = None
    first = last = start
    for field, method, name in (
        ("energy", interpolated_increase, "counter"),
        ("power", integrate, "power"),
    ):
        samples = series.get(field)
        span = None if samples is None else _span(samples, start, end)
        if samples is None or span is None:
            continue
        first, last = span
        energy = method(samples, first, last)
        if energy is not None:
            out["energy_from"] = name
            break
    out["energy_j"] = energy
    if energy is None:
        out["energy_from"] = None
        return out, 0.0
    out["power_mean_w"] = energy / (last - first)  # (the average power: what the energy says)
    return out, last - first


def gpu_section(view: ServerView, throughput: Mapping[str, Any]) -> dict[str, Any] | None:
    """The summary's ``gpus`` section (module docstring); None when no GPU was sampled."""
    by_gpu: dict[str, dict[str, _Series]] = {}
    for key, series in view.gpu.items():
        field, _, gpu = key.rpartition("_gpu")
        by_gpu.setdefault(gpu, {})[field] = series
    if not by_gpu:
        return None
    start, end = throughput.get("window_start"), throughput.get("window_end")
    if start is None or end is None or end <= start:  # (no ok request: the samples' own span)
        times = np.concatenate([s[0] for gpu in by_gpu.values() for s in gpu.values()])
        start, end = float(times.min()), float(times.max())
    per_gpu: list[dict[str, Any]] = []
    covered: list[float] = []
    for gpu in sorted(by_gpu, key=_gpu_order):
        entry, span = _gpu(by_gpu[gpu], start, end)
        per_gpu.append({"gpu": gpu, **view.gpu_info.get(gpu, {}), **entry})
        covered.append(span)
    energies = [g["energy_j"] for g in per_gpu]
    energy = None if any(e is None for e in energies) else float(sum(energies))
    utilization = [g["utilization_mean"] for g in per_gpu if g["utilization_mean"] is not None]
    power = [g["power_mean_w"] for g in per_gpu if g["power_mean_w"] is not None]
    output_tokens = throughput.get("output_tokens") or 0
    completed = throughput.get("completed_requests") or 0
    rate = throughput.get("output_tokens_per_s")
    return {
        "source": "dcgm-exporter" if any("source" in g for g in per_gpu) else "nvidia-smi",
        "count": len(per_gpu),
        "window_s": end - start,
        "covered_s": min(covered) if energy is not None else None,
        "utilization_mean": float(np.mean(utilization)) if utilization else None,
        "power_mean_w": float(sum(power)) if power else None,
        "energy_j": energy,
        "joules_per_output_token": energy / output_tokens if energy and output_tokens else None,
        "output_tokens_per_joule": output_tokens / energy if energy and output_tokens else None,
        "joules_per_request": energy / completed if energy and completed else None,
        "output_tokens_per_s_per_gpu": None if rate is None else rate / len(per_gpu),
        "per_gpu": per_gpu,
    }


def _gpu_order(gpu: str) -> tuple[int, ...]:
    """The order of GPU names: "3" before "10", "0.1" before "1.0" (an index, or K.I)."""
    return tuple(int(part) if part.isdigit() else 0 for part in gpu.split("."))
