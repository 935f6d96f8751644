"""``veeksha stress``: the throughput–latency curve of a server as the load rises.

Vocabulary: one *point* per load level, a timed run of single-request sessions (prompt of
``input_length`` tokens, exactly ``output_length`` output tokens): ``warmup_duration`` seconds
whose sessions are left out (``runtime.warmup_seconds``; their rows are ``phase: warmup``), then
``point_duration`` measured seconds (``runtime.benchmark_timeout``, counted from the first
measured session), after which no session starts and the ones in flight complete.

The *steady window* of a point is ``[end of its warmup, + point_duration)``: the start of its
measured phase (summary.json's ``run.phases``), ``warmup_duration`` seconds after t0. The load is
at its level throughout (closed loop: a new request starts as each ends; open loop: the arrivals
go on until ``point_duration`` after the first measured one, which comes after the warmup's end),
whereas the drain after it is not. The window does not start at a request: one that began at the
first measured arrival would hold that arrival and a Poisson number of others, one request more
than the rate gives on average (``1 / point_duration`` req/s too many), whereas a window set by
the clock holds ``rate × point_duration`` arrivals on average. Without a warmup
(``warmup_duration: 0``) the window starts at t0, which is an arrival (the first session is
released at t0): at a rate level that request is left out of the throughputs, so the window opens
just after it and again holds ``rate × point_duration`` arrivals on average (a concurrency
level's requests at t0 are its load, not a sample of arrivals: they count). Throughputs count
what the server did inside the window, from every row (warmup requests still in flight at its
start included):

- output tokens/s: the content chunks that arrived in the window (× the request's tokens per
  chunk) / window;
- input tokens/s: the prompt tokens of the requests whose first chunk (end of prefill) arrived
  in the window / window;
- requests/s: ok requests completed in the window / window.

Latencies are over the measured ok requests: TTFC and E2E p50/p99, TPOT p50/p99, and the
interactivity ``1 / TPOT`` (tokens/s one user sees; ``interactivity_p99`` = 1 / TPOT p99, the
slow tail).

Checks: ``enough_samples`` (every point has ``min_samples`` measured ok requests),
``no_failures`` (no measured request failed), ``healthy_points`` (each point's health verdict
PASS), and the warning ``monotone_throughput`` (no level's output throughput is more than
``MONOTONE_SLACK`` below an earlier, lower level's: past saturation a drop hints at thrashing).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veeksha.experiment.microbench.points import PointSpec, load_rows, serving
from veeksha.experiment.microbench.results import Check, write_results
from veeksha.experiment.microbench.stress_config import StressConfig
from veeksha.experiment.microbench.stress_levels import auto_levels, log_spaced
from veeksha.experiment.point import PointResult
from veeksha.plural import counted

__all__ = ["MONOTONE_SLACK", "analyse_point", "measured_start", "run_stress", "stress_checks"]

NAME = "stress"
MONOTONE_SLACK = 0.10


def _spec(config: StressConfig, index: int, level: float) -> PointSpec:
    assert config.input_length
    assert config.output_length
    assert config.point_duration is not None
    assert config.warmup_duration is not None
    rate = level if config.traffic == "rate" else None
    return PointSpec(
        index,
        config.input_length,
        config.output_length,
        concurrency=int(level) if rate is None else 1,
        sessions=-1,
        rate=rate,
        duration_s=config.point_duration,
        warmup_s=config.warmup_duration,
    )


def _pct(values: pd.Series, q: float, scale: float = 1000.0) -> float | None:
    data = values.dropna().to_numpy(dtype=float)
    return float(np.percentile(data, q)) * scale if len(data) else None


def measured_start(summary: dict[str, Any]) -> float | None:
    """When a point's measured phase began (s since t0: the end of its warmup), from its
    summary.json's ``run.phases``; None when the run wrote none."""
    for phase in summary.get("run", {}).get("phases") or ():
        if phase.get("name") == "measured" and phase.get("start") is not None:
            return float(phase["start"])
    return None


def analyse_point(
    level: float,
    rows: pd.DataFrame,
    duration_s: float,
    run_dir: str,
    verdict: str | None,
    start: float | None = None,
    open_loop: bool = False,
) -> dict[str, Any]:
    """The figures of one point from all its rows (warmup included), as the module docstring
    defines them; ``start``: the window's (``measured_start``; None: the first measured
    arrival, for a point whose run left no phases); ``open_loop``: a rate level, whose
    throughputs leave out the measured request that arrived at the window's start."""
    measured = rows[rows["phase"] == "measured"]
    ok = measured[measured["status"] == "ok"]
    if start is None:
        start = float(measured["ready_at"].min()) if len(measured) else float("nan")
    end = start + duration_s
    if open_loop:  # (the latencies still take it: it is a measured request like the others)
        rows = rows[~((rows["phase"] == "measured") & (rows["ready_at"] <= start))]
    output_tokens = 0.0
    for times, tokens in zip(rows["chunk_times"], rows["output_tokens"], strict=True):
        if times is None or not len(times):
            continue
        chunks = np.asarray(times, dtype=float)
        per_chunk = tokens / len(chunks) if tokens is not None and not pd.isna(tokens) else 1.0
        output_tokens += per_chunk * int(np.sum((chunks >= start) & (chunks < end)))
    first = rows["first_chunk_at"]
    prefilled = (first >= start) & (first < end)
    input_tokens = float(rows.loc[prefilled, "prompt_tokens_total"].fillna(0).sum())
    done = rows[(rows["status"] == "ok") & (rows["completed_at"] >= start)]
    completed = int(np.sum(done["completed_at"] < end))
    window = duration_s if len(measured) else 0.0
    tpot_p50 = _pct(ok["tpot"], 50, 1.0)
    tpot_p99 = _pct(ok["tpot"], 99, 1.0)
    return {
        "level": level,
        "samples": len(ok),
        "failed": len(measured) - len(ok),
        "window_s": window,
        "output_tokens_per_s": output_tokens / window if window else None,
        "input_tokens_per_s": input_tokens / window if window else None,
        "requests_per_s": completed / window if window else None,
        "ttfc_p50_ms": _pct(ok["ttfc"], 50),
        "ttfc_p99_ms": _pct(ok["ttfc"], 99),
        # a reasoning model's time to its answer, after its thinking (None for another model)
        "answer_ttfc_p50_ms": _pct(ok["answer_ttfc"], 50) if "answer_ttfc" in ok else None,
        "answer_ttfc_p99_ms": _pct(ok["answer_ttfc"], 99) if "answer_ttfc" in ok else None,
        "e2e_p50_ms": _pct(ok["e2e"], 50),
        "e2e_p99_ms": _pct(ok["e2e"], 99),
        "tpot_p50_ms": None if tpot_p50 is None else tpot_p50 * 1000,
        "tpot_p99_ms": None if tpot_p99 is None else tpot_p99 * 1000,
        "interactivity_p50": 1 / tpot_p50 if tpot_p50 else None,
        "interactivity_p99": 1 / tpot_p99 if tpot_p99 else None,
        "health": verdict,
        "run_dir": run_dir,
    }


def stress_checks(table: list[dict[str, Any]], min_samples: int, unit: str) -> list[Check]:
    """The checks of the curve (module docstring); ``unit`` names a level (``c`` or ``rps``)."""
    few = [
        f"{unit}={_fmt(p['level'])}: {p['samples']}" for p in table if p["samples"] < min_samples
    ]
    failed = [f"{unit}={_fmt(p['level'])}: {p['failed']}" for p in table if p["failed"]]
    unhealthy = [
        f"{unit}={_fmt(p['level'])}: {p['health']}" for p in table if p["health"] != "PASS"
    ]
    drops: list[str] = []
    best: dict[str, Any] | None = None
    for point in sorted(table, key=lambda p: p["level"]):
        value = point["output_tokens_per_s"] or 0.0
        top = (best or {}).get("output_tokens_per_s") or 0.0
        if best is not None and value < (1 - MONOTONE_SLACK) * top:
            drops.append(
                f"{unit}={_fmt(point['level'])}: {value:.1f} tokens/s < "
                f"{top:.1f} at {unit}={_fmt(best['level'])}"
            )
        if best is None or value > top:
            best = point
    return [
        Check(
            "enough_samples",
            not few,
            f"below {counted(min_samples, 'measured ok request')}: " + "; ".join(few)
            if few
            else f"every point has at least {counted(min_samples, 'measured ok request')}",
        ),
        Check(
            "no_failures",
            not failed,
            "failed requests: " + "; ".join(failed) if failed else "no measured request failed",
        ),
        Check(
            "healthy_points",
            not unhealthy,
            "; ".join(unhealthy) if unhealthy else "every point's health verdict is PASS",
        ),
        Check(
            "monotone_throughput",
            not drops,
            "output throughput fell: " + "; ".join(drops)
            if drops
            else "output throughput never fell as the load rose",
            warning=True,
        ),
    ]


def _fmt(level: float) -> str:
    return f"{level:g}"


def run_stress(config: StressConfig, echo: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """Run the stress curve of ``config``; its result folder and results document."""
    assert config.max_level is not None
    assert config.num_levels is not None
    assert config.point_duration is not None
    assert config.min_samples is not None
    integer = config.integer_levels
    if config.mode == "manual":
        planned = config.levels_given()
    elif config.mode == "range":
        planned = log_spaced(config.min_level, config.max_level, config.num_levels, integer)
    else:
        planned = [log_spaced(config.min_level, config.min_level, 1, integer)[0]]
    table: list[dict[str, Any]] = []
    first = _spec(config, 0, planned[0])
    total = None if config.mode == "auto" else len(planned)
    with serving(config, first, NAME, echo, total) as (folder, server, run):
        echo(f"{NAME} ({config.mode}, {config.traffic}) -> {folder}")

        def measure(level: float) -> float:
            spec = _spec(config, len(table), level)
            result: PointResult = run(spec)
            rows = load_rows(result.run_dir, warmup=True)
            verdict = result.summary.get("health", {}).get("verdict")
            point = analyse_point(
                level,
                rows,
                config.point_duration or 0.0,
                str(result.run_dir.relative_to(folder)),
                verdict,
                measured_start(result.summary),
                open_loop=config.traffic == "rate",
            )
            table.append(point)
            echo(f"    {_line(point, config)}")
            return float(point["output_tokens_per_s"] or 0.0)

        if config.mode == "auto":
            auto_levels(
                measure,
                start=config.min_level,
                max_level=config.max_level,
                threshold=config.auto_threshold,
                fill_points=config.fill_points,
                integer=integer,
            )
        else:
            for level in planned:
                measure(level)
    table.sort(key=lambda p: p["level"])
    unit = "c" if integer else "rps"
    checks = stress_checks(table, config.min_samples, unit)
    plot = f"{NAME}.png" if config.plots and table else None
    body: dict[str, Any] = {
        "target": server.description,
        "config": config.public_dict(),
        "traffic": config.traffic,
        "window": "from the end of the warmup (the measured phase's start) for point_duration "
        "seconds",
        "plot": plot,
    }
    document = write_results(folder, NAME, body, table, checks)
    if plot is not None:
        from veeksha.experiment.microbench.plots import stress_plot

        stress_plot(table, str(config.traffic), folder / plot)
    return folder, document


def _line(point: dict[str, Any], config: StressConfig) -> str:
    unit = "c" if config.integer_levels else "rps"
    return (
        f"{unit}={_fmt(point['level'])}: {_num(point['output_tokens_per_s'])} output tokens/s, "
        f"TTFC p50 {_num(point['ttfc_p50_ms'])} ms, E2E p50 {_num(point['e2e_p50_ms'])} ms "
        f"({counted(point['samples'], 'request')})"
    )


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
