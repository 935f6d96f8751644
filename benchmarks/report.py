"""Medians and min–max of repeated samples, compared with the issue's targets, as Markdown."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks.figures import Sample
from benchmarks.harness import ROOT, Machine

__all__ = ["TARGETS", "Target", "append", "render"]


@dataclass(frozen=True)
class Target:
    """A headline value of a figure and its target (``upper``: the value must not exceed it)."""

    figure: str
    key: str
    label: str
    unit: str
    limit: float
    upper: bool

    def met(self, value: float) -> bool:
        return value <= self.limit if self.upper else value >= self.limit


TARGETS = (
    Target("cpu", "cpu_s_per_1000", "client CPU per 1,000 requests (tree)", "CPU-s", 0.3, True),
    Target("rate", "sustained_rate", "sustained open-loop rate", "req/s", 1500, False),
    Target("closed", "requests_per_s", "closed-loop throughput, 64 sessions", "req/s", 2000, False),
    Target("precision", "sent_minus_ready_p50_us", "dispatch precision p50", "µs", 100, True),
    Target("precision", "sent_minus_ready_p99_us", "dispatch precision p99", "µs", 1000, True),
    Target("ttfc", "bias_mean_ms", "TTFC bias, mean", "ms", 0.3, True),
    Target("ttfc", "bias_p99_ms", "TTFC bias, p99", "ms", 1.0, True),
    Target("streams", "first_delay_mean_ms@128c0", "TTFC bias, mean, 128 streams", "ms", 0.3, True),
    Target("streams", "first_delay_p99_ms@128c0", "TTFC bias, p99, 128 streams", "ms", 1.0, True),
    Target("streams", "tbc_p99_bias_ms@128c0", "TBC p99 bias, 128 streams", "ms", 0.5, True),
    Target("startup", "cpu_s", "start-up CPU (2 s at 10 req/s)", "CPU-s", 1.5, True),
    Target("startup", "peak_rss_mb", "start-up peak memory (tree)", "MB", 300, True),
    Target(
        "startup",
        "builtin_cpu_s",
        "start-up CPU, built-in simulator in the tree",
        "CPU-s",
        1.0,
        True,
    ),
    Target("startup", "builtin_wall_s", "start-up wall, built-in simulator", "s", 2.5, True),
    Target(
        "startup_plots",
        "builtin_cpu_s",
        "start-up CPU with plots (plain veeksha run), built-in sim",
        "CPU-s",
        1.0,
        True,
    ),
    Target(
        "startup_plots",
        "builtin_wall_s",
        "start-up wall with plots (plain veeksha run), built-in sim",
        "s",
        2.5,
        True,
    ),
    Target("scale", "sessions_per_s", "scale: linear sessions/s (dry run)", "sess/s", 50000, False),
    Target("scale", "peak_main_rss_mb", "scale: main-process peak RSS", "MB", 300, True),
    Target("memory", "rss_mb_per_1000", "RSS per 1,000 in-flight requests", "MB", 10, True),
    Target("trace", "cold_first_send_s", "trace: first request sent, 10M, cold", "s", 5, True),
    Target("trace", "warm_first_send_s", "trace: first request sent, 10M, cached", "s", 5, True),
    Target("trace", "cold_peak_main_rss_mb", "trace: main-process peak RSS", "MB", 300, True),
)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _stats(samples: list[Sample], key: str) -> tuple[float, float, float] | None:
    values = [s.values[key] for s in samples if key in s.values]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def render(
    results: dict[str, list[Sample]],
    machine: Machine,
    command: str,
    quick: bool,
    baseline: tuple[str, dict[str, list[Sample]]] | None = None,
) -> str:
    """The Markdown section: headline figures vs targets, then every measured value; with a
    ``baseline`` (its revision and samples, measured in the same invocation) both side by side."""
    title = "Load-generator figures" + (" (quick sizes)" if quick else "")
    lines = [
        f"## {title} — {machine.date}",
        "",
        machine.line() + f" Command: `{command}`.",
        "Each figure: median of the repetitions, with min–max. CPU is of veeksha's whole process",
        "tree measured from outside (start-up and evaluation included); the simulator (fast",
        "preset, its own process) shares the 2 cores and its CPU is shown beside.",
        "",
    ]
    if baseline is None:
        lines += [
            "| figure | median | min–max | target | met | runs |",
            "|---|---:|---:|---:|:---:|---:|",
        ]
    else:
        rev = baseline[0]
        lines[3:3] = [
            f"Side by side with {rev}: both measured in this invocation, alternating, each",
            "repetition running the two in turn (which goes first alternates).",
        ]
        lines += [
            f"| figure | {rev} median (min–max) | this median (min–max) | target | met | runs |",
            "|---|---:|---:|---:|:---:|---:|",
        ]
    for t in TARGETS:
        samples = results.get(t.figure)
        if not samples:
            continue
        st = _stats(samples, t.key)
        if st is None:
            continue
        med, lo, hi = st
        bound = "≤" if t.upper else "≥"
        verdict = f"{bound} {_fmt(t.limit)} | {'yes' if t.met(med) else '**no**'}"
        if baseline is None:
            lines.append(
                f"| {t.label} | {_fmt(med)} {t.unit} | {_fmt(lo)}–{_fmt(hi)} | {verdict}"
                f" | {len(samples)} |"
            )
            continue
        old = _stats(baseline[1].get(t.figure, []), t.key)
        was = "—" if old is None else f"{_fmt(old[0])} ({_fmt(old[1])}–{_fmt(old[2])})"
        lines.append(
            f"| {t.label} ({t.unit}) | {was} | {_fmt(med)} ({_fmt(lo)}–{_fmt(hi)}) | {verdict}"
            f" | {len(samples)} |"
        )
    lines += ["", "All measured values (median, min–max):", ""]
    lines += _values(results, "")
    if baseline is not None:
        lines += _values(baseline[1], f" ({baseline[0]})")
    return "\n".join(lines) + "\n"


def _values(results: dict[str, list[Sample]], label: str) -> list[str]:
    lines = []
    for figure, samples in results.items():
        keys = sorted({k for s in samples for k in s.values})
        parts = []
        for key in keys:
            st = _stats(samples, key)
            if st is not None:
                parts.append(f"{key} {_fmt(st[0])} ({_fmt(st[1])}–{_fmt(st[2])})")
        notes = sorted({n for s in samples for n in s.notes})
        tail = f" — {'; '.join(notes)}" if notes else ""
        lines.append(f"- **{figure}**{label}: " + "; ".join(parts) + tail)
    return lines


def append(text: str, path: Path = ROOT / "BENCHMARKS.md") -> None:
    """Append a section to BENCHMARKS.md (newest last)."""
    with path.open("a") as f:
        f.write("\n" + text)


def publish(text: str, append_it: bool = True) -> int:
    """A figure script's end: print its section and, unless told not to (``--no-append``),
    append it to BENCHMARKS.md; the script's exit status (0)."""
    print(text)
    if append_it:
        append(text)
    return 0
