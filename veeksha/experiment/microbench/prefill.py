"""``veeksha prefill``: how time to first chunk grows with the prompt.

Vocabulary: one *point* per input length L, a normal run of ``samples_per_length`` single-request
sessions with a prompt of exactly L tokens and 1 output token, strictly one at a time (concurrent
scheduler, target 1, no ramp-up; one warmup request first opens the connection). A sample is a
request's TTFC (first content chunk − sent). The *fit* is the least-squares line through the
per-length **medians** (a slow outlier moves a median little, a mean a lot):

    TTFC(L) ≈ intercept_ms + slope_ms_per_1k_tokens × L / 1000

Worked example: against the built-in simulator (engine timing) one request's first token ends
one engine step, ``decode_step_ms + decode_step_ms_per_seq + 1000 × L / prefill_tokens_per_s``:
with the realistic preset (6 + 0.05 ms, 20,000 tokens/s) the true slope is 50 ms per 1k tokens
and the true intercept 6.05 ms, plus the HTTP round trip.

Checks: every request ok and every point healthy; strictly sequential (each request sent after
the one before it completed); exact lengths (the server's prompt tokens equal the target);
no prefix-cache hits (a cached prompt would prefill less than L).

With ``image_sides`` (a vision-language model) the points are image sides S at the one input
length: each request carries one S × S image of its own (the image channel's) before its text,
and the fit is against megapixels, ``TTFC(S) ≈ intercept_ms + slope_ms_per_megapixel × S² /
1e6``; each point reports ``image_tokens`` (the server's prompt tokens less the text's, a count
only the server knows), and exact lengths means one count for every request of a side.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from veeksha.experiment.microbench.config import PrefillConfig
from veeksha.experiment.microbench.points import PointSpec, load_rows, run_points
from veeksha.experiment.microbench.results import (
    Check,
    PointChecks,
    check,
    fit_line,
    prefill_x,
    write_results,
)
from veeksha.experiment.point import PointResult
from veeksha.plural import counted

__all__ = ["analyse_prefill", "prefill_specs", "run_prefill"]

NAME = "prefill"


def prefill_specs(config: PrefillConfig) -> list[PointSpec]:
    """One point per input length, in the given order (with ``image_sides``: one per side, at
    the one input length)."""
    assert config.input_lengths is not None
    assert config.samples_per_length is not None
    if config.image_sides is not None:
        (length,) = config.input_lengths
        return [
            PointSpec(i, length, 1, 1, config.samples_per_length, warmup_sessions=1, image_side=s)
            for i, s in enumerate(config.image_sides)
        ]
    return [
        PointSpec(i, length, 1, 1, config.samples_per_length, warmup_sessions=1)
        for i, length in enumerate(config.input_lengths)
    ]


def _ms(values: pd.Series) -> dict[str, float | None]:
    data = values.dropna().to_numpy(dtype=float) * 1000
    if not len(data):
        return {"p50": None, "mean": None, "min": None, "max": None, "p99": None}
    return {
        "p50": float(np.median(data)),
        "mean": float(data.mean()),
        "min": float(data.min()),
        "max": float(data.max()),
        "p99": float(np.percentile(data, 99)),
    }


def analyse_prefill(
    points: list[tuple[PointSpec, PointResult, pd.DataFrame]], folder: Path
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, list[Check], dict[int, list[float]]]:
    """Per-point figures, the fit, the checks and every sample (ms, by input length) from the
    points' measured rows."""
    table: list[dict[str, Any]] = []
    samples: dict[int, list[float]] = {}
    per_point = PointChecks()
    overlaps: list[str] = []
    wrong_length: list[str] = []
    cached: list[str] = []
    images = any(spec.image_side is not None for spec, _, _ in points)
    for spec, result, rows in points:
        ok = rows[rows["status"] == "ok"]
        ttfc = _ms(ok["ttfc"])
        side = spec.image_side or 0
        samples[side if images else spec.input_length] = sorted(
            (ok["ttfc"].dropna() * 1000).tolist()
        )
        verdict = result.summary.get("health", {}).get("verdict")
        point: dict[str, Any] = {"image_side": side, "megapixels": side * side / 1e6}
        table.append(
            (point if images else {})
            | {
                "input_length": spec.input_length,
                "samples": len(ok),
                "failed": len(rows) - len(ok),
                "ttfc_p50_ms": ttfc["p50"],
                "ttfc_mean_ms": ttfc["mean"],
                "ttfc_min_ms": ttfc["min"],
                "ttfc_max_ms": ttfc["max"],
                "ttfc_p99_ms": ttfc["p99"],
                "server_prompt_tokens": _median_int(ok["prompt_tokens_total"]),
                "cached_tokens_max": _max_int(ok["cached_tokens"]),
                "health": verdict,
                "run_dir": str(result.run_dir.relative_to(folder)),
            }
        )
        where = f"side={side}" if images else f"L={spec.input_length}"
        per_point.note(where, len(ok), spec.sessions, verdict)
        ordered = rows.sort_values("sent_at")
        sent = ordered["sent_at"].to_numpy(dtype=float)
        done = ordered["completed_at"].to_numpy(dtype=float)
        overlap = int(np.sum(sent[1:] < done[:-1]))
        if overlap:
            overlaps.append(
                f"{where}: {counted(overlap, 'request')} sent before the previous completed"
            )
        lengths = ok["prompt_tokens_total"]
        if images:  # (the text and the image: a count only the server knows, the same each)
            expected = lengths.median() if len(lengths.dropna()) else -1
            table[-1]["image_tokens"] = None if expected < 0 else int(expected) - spec.input_length
            bad = int(np.sum(lengths.isna() | (lengths != expected)))
        else:
            bad = int(np.sum(lengths.isna() | (lengths != spec.input_length)))
        if bad:
            seen = sorted({int(v) for v in lengths.dropna()})
            wrong_length.append(f"{where}: {counted(bad, 'prompt')} of {seen} tokens")
        hits = int(np.sum(ok["cached_tokens"].fillna(0) > 0))
        if hits:
            cached.append(f"{where}: {counted(hits, 'prompt')} partly cached")
    x_key = prefill_x(table)
    fit = fit_line(
        [p[x_key] for p in table if p["ttfc_p50_ms"] is not None],
        [p["ttfc_p50_ms"] for p in table if p["ttfc_p50_ms"] is not None],
    )
    fit_doc = None
    if fit is not None and images:
        fit_doc = {
            "method": "least squares through the per-side TTFC medians, against megapixels",
            "slope_ms_per_megapixel": fit.slope,
            "intercept_ms": fit.intercept,
            "r2": fit.r2,
            "sides": [p["image_side"] for p in table if p["ttfc_p50_ms"] is not None],
        }
    elif fit is not None:
        fit_doc = {
            "method": "least squares through the per-length TTFC medians",
            "slope_ms_per_1k_tokens": fit.slope * 1000,
            "intercept_ms": fit.intercept,
            "r2": fit.r2,
            "lengths": fit.points,
        }
    exact = (
        "the server counted the same prompt tokens for every request of a side (its text and"
        " one image)"
        if images
        else "the server counted exactly the target prompt tokens"
    )
    checks = [
        *per_point.checks(),
        check("sequential", overlaps, "each request was sent after the previous one completed"),
        check("exact_lengths", wrong_length, exact),
        check("no_cache_hits", cached, "no prompt token came from the server's prefix cache"),
    ]
    return table, fit_doc, checks, samples


def _median_int(values: pd.Series) -> int | None:
    data = values.dropna()
    return int(np.median(data)) if len(data) else None


def _max_int(values: pd.Series) -> int | None:
    data = values.dropna()
    return int(data.max()) if len(data) else None


def run_prefill(config: PrefillConfig, echo: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """Run the prefill microbenchmark of ``config``; its result folder and results document."""
    specs = prefill_specs(config)
    folder, server, done = run_points(config, specs, NAME, echo)
    points = [(spec, result, load_rows(result.run_dir)) for spec, result in done]
    table, fit, checks, samples = analyse_prefill(points, folder)
    plot = f"{NAME}.png" if config.plots and table else None
    body: dict[str, Any] = {
        "target": server.description,
        "config": config.public_dict(),
        "fit": fit,
        "plot": plot,
    }
    document = write_results(folder, NAME, body, table, checks)
    if plot is not None:
        from veeksha.experiment.microbench.plots import prefill_plot

        prefill_plot(samples, table, fit, folder / plot)
    return folder, document
