"""``veeksha decode``: how the time between chunks grows with the number of requests decoding.

Vocabulary: one *point* per (batch size B, input length L), a normal run of B single-request
sessions started together (concurrent scheduler, target B, no ramp-up), each a prompt of L
tokens asking for exactly ``output_length`` tokens. The requests reach the server one after the
other and are prefilled in the first engine steps, so early on the batch is still filling; the
*common decode window* is the span in which every request of the batch is decoding:

    window = [ max over requests of the first chunk,  min over requests of the last chunk ]

(``first_chunk_at`` and the last entry of ``chunk_times`` in requests.parquet, seconds since the
run's t0). A *sample* is a gap between two consecutive chunks of one request that both arrived
inside the window; TBC p50/p99 are taken over all of a point's samples. ``output_length`` must
be long enough for the first request to still be decoding when the last one got its first chunk
(``output_length × TBC`` well beyond the batch's prefill time): the ``windows_overlap`` check
fails, naming the point, when the window holds fewer than ``MIN_WINDOW_GAPS`` gaps per request.

Worked example: against the built-in simulator (engine timing) every step inside the window
decodes the whole batch and nothing else, so each gap is one step,
``decode_step_ms + decode_step_ms_per_seq × B``: TBC p50 against B is a line whose slope is
``decode_step_ms_per_seq`` and intercept ``decode_step_ms`` (the fit per input length).

Checks: every request ok and every point healthy; the windows overlapped; FCFS order (a request
sent later never got its first chunk earlier than one sent before it, beyond half a TBC: chunks
of one engine step may be read in any order).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from veeksha.experiment.microbench.config import DecodeConfig
from veeksha.experiment.microbench.points import PointSpec, load_rows, run_points
from veeksha.experiment.microbench.results import (
    Check,
    PointChecks,
    check,
    fit_line,
    write_results,
)
from veeksha.experiment.point import PointResult
from veeksha.plural import counted

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["MIN_WINDOW_GAPS", "DecodeWindow", "analyse_decode", "decode_specs", "run_decode"]

NAME = "decode"
MIN_WINDOW_GAPS = 4


def decode_specs(config: DecodeConfig) -> list[PointSpec]:
    """One point per (input length, batch size), batch sizes innermost."""
    assert config.input_lengths
    assert config.batch_sizes
    assert config.output_length
    pairs = [(length, batch) for length in config.input_lengths for batch in config.batch_sizes]
    return [
        PointSpec(i, length, config.output_length, batch, batch)
        for i, (length, batch) in enumerate(pairs)
    ]


class DecodeWindow:
    """The common decode window of one batch and the TBC samples inside it."""

    def __init__(self, chunk_times: list[NDArray[np.float64]]) -> None:
        firsts = [c[0] for c in chunk_times if len(c)]
        lasts = [c[-1] for c in chunk_times if len(c)]
        self.start = float(max(firsts)) if firsts else float("nan")
        self.end = float(min(lasts)) if lasts else float("nan")
        gaps: list[NDArray[np.float64]] = []
        self.min_gaps = 0
        counts: list[int] = []
        for times in chunk_times:
            inside = times[(times >= self.start) & (times <= self.end)]
            gap = np.diff(inside)
            counts.append(len(gap))
            gaps.append(gap)
        self.min_gaps = min(counts) if counts else 0
        self.gaps_s = np.concatenate(gaps) if gaps else np.empty(0)

    @property
    def length_s(self) -> float:
        return self.end - self.start


def _fcfs_inversions(rows: pd.DataFrame, tolerance_s: float) -> int:
    ordered = rows.sort_values("sent_at")["first_chunk_at"].to_numpy(dtype=float)
    earliest_later = np.minimum.accumulate(ordered[::-1])[::-1]
    return int(np.sum(earliest_later[1:] < ordered[:-1] - tolerance_s))


def analyse_decode(
    points: list[tuple[PointSpec, PointResult, pd.DataFrame]], folder: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Check]]:
    """Per-point figures, the fit per input length and the checks from the measured rows."""
    table: list[dict[str, Any]] = []
    per_point = PointChecks()
    no_window: list[str] = []
    unordered: list[str] = []
    for spec, result, rows in points:
        ok = rows[rows["status"] == "ok"]
        times = [np.asarray(c, dtype=float) for c in ok["chunk_times"] if c is not None]
        window = DecodeWindow(times)
        gaps_ms = window.gaps_s * 1000
        has = len(gaps_ms) > 0
        p50 = float(np.median(gaps_ms)) if has else None
        verdict = result.summary.get("health", {}).get("verdict")
        table.append(
            {
                "batch_size": spec.concurrency,
                "input_length": spec.input_length,
                "output_length": spec.output_length,
                "requests": len(ok),
                "failed": len(rows) - len(ok),
                "window_s": window.length_s if window.length_s > 0 else 0.0,
                "tbc_samples": len(gaps_ms),
                "tbc_p50_ms": p50,
                "tbc_p99_ms": float(np.percentile(gaps_ms, 99)) if has else None,
                "tbc_mean_ms": float(gaps_ms.mean()) if has else None,
                "decode_tokens_per_s": spec.concurrency * 1000 / float(gaps_ms.mean())
                if has and gaps_ms.mean() > 0
                else None,
                "health": verdict,
                "run_dir": str(result.run_dir.relative_to(folder)),
            }
        )
        where = f"B={spec.concurrency} L={spec.input_length}"
        per_point.note(where, len(ok), spec.sessions, verdict)
        if not window.length_s > 0 or window.min_gaps < MIN_WINDOW_GAPS:
            no_window.append(
                f"{where}: window {max(window.length_s, 0) * 1000:.1f} ms, "
                f"{counted(window.min_gaps, 'gap')} for the least covered request "
                "(raise output_length)"
            )
        tolerance = 0.5 * (p50 or 1.0) / 1000
        inversions = _fcfs_inversions(ok, tolerance)
        if inversions:
            unordered.append(
                f"{where}: {counted(inversions, 'request')} served before an earlier one"
            )
    fits: list[dict[str, Any]] = []
    for length in dict.fromkeys(p["input_length"] for p in table):
        usable = [p for p in table if p["input_length"] == length and p["tbc_p50_ms"] is not None]
        fit = fit_line([p["batch_size"] for p in usable], [p["tbc_p50_ms"] for p in usable])
        if fit is not None:
            fits.append(
                {
                    "input_length": length,
                    "method": "least squares through TBC p50 against batch size",
                    "slope_ms_per_seq": fit.slope,
                    "intercept_ms": fit.intercept,
                    "r2": fit.r2,
                    "batch_sizes": fit.points,
                }
            )
    checks = [
        *per_point.checks(),
        check("windows_overlap", no_window, "every batch decoded together in a common window"),
        check("fcfs_order", unordered, "first chunks came in the order the requests were sent"),
    ]
    return table, fits, checks


def run_decode(config: DecodeConfig, echo: Callable[[str], None]) -> tuple[Path, dict[str, Any]]:
    """Run the decode microbenchmark of ``config``; its result folder and results document."""
    specs = decode_specs(config)
    folder, server, done = run_points(config, specs, NAME, echo)
    points = [(spec, result, load_rows(result.run_dir)) for spec, result in done]
    table, fits, checks = analyse_decode(points, folder)
    plot = f"{NAME}.png" if config.plots and table else None
    body: dict[str, Any] = {
        "target": server.description,
        "config": config.public_dict(),
        "window": "from the last request's first chunk to the first request's last chunk",
        "fits": fits,
        "plot": plot,
    }
    document = write_results(folder, NAME, body, table, checks)
    if plot is not None:
        from veeksha.experiment.microbench.plots import decode_plot

        decode_plot(table, fits, folder / plot)
    return folder, document
