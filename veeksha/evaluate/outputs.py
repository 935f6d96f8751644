"""The evaluation files of a run folder: summary.json, slo.json and metrics/<metric>.csv.

Each CSV holds one metric's percentiles (``CSV_PERCENTILES``, 0 = min, 100 = max) with numpy's
linear interpolation::

    percentile,value,unit
    0,0.0412,s
    ...
    100,0.0921,s

An empty sample writes the header only. health.json/health.txt are written by
``HealthReport.write``; the plots by ``veeksha.evaluate.plots``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from veeksha.evaluate.jsonio import write_json
from veeksha.evaluate.metrics import LATENCY_METRICS, Digest
from veeksha.evaluate.slo import SloResult, all_met
from veeksha.evaluate.stats import CSV_PERCENTILES

__all__ = [
    "METRICS_DIR",
    "SLO_FILE",
    "SUMMARY_FILE",
    "write_metric_csvs",
    "write_slo",
    "write_summary",
]

SUMMARY_FILE = "summary.json"
SLO_FILE = "slo.json"
METRICS_DIR = "metrics"


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """Write summary.json; returns its path."""
    path = run_dir / SUMMARY_FILE
    write_json(path, summary)
    return path


def write_slo(run_dir: Path, results: list[SloResult]) -> Path:
    """Write slo.json: each SLO's observed value, threshold and met, and all_slos_met."""
    path = run_dir / SLO_FILE
    write_json(path, {"all_slos_met": all_met(results), "slos": [r.to_dict() for r in results]})
    return path


def write_metric_csvs(run_dir: Path, digests: dict[str, Digest]) -> list[Path]:
    """Write metrics/<metric>.csv for every latency metric (``digests``: their samples' digests,
    which hold the ``CSV_PERCENTILES`` quantiles); returns the paths."""
    folder = run_dir / METRICS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for metric in LATENCY_METRICS:
        quantiles = digests[metric.name].csv
        path = folder / f"{metric.name}.csv"
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["percentile", "value", "unit"])
            if quantiles:
                for q, v in zip(CSV_PERCENTILES, quantiles, strict=True):
                    writer.writerow([f"{q:g}", repr(float(v)), metric.unit])
        paths.append(path)
    return paths


def write_timeslices_csv(run_dir: Path, section: dict[str, Any]) -> Path:
    """Write metrics/timeslices.csv: summary.json's ``timeslices``, a slice a row (empty cell:
    no value); returns its path."""
    folder = run_dir / METRICS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "timeslices.csv"
    slices = section["slices"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        names = list(slices[0]) if slices else ["start", "end"]
        writer.writerow(names)
        for entry in slices:
            writer.writerow(["" if entry[n] is None else repr(entry[n]) for n in names])
    return path
