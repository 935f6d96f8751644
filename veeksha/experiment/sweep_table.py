"""sweep.parquet: one row per point of a sweep, built from the sweep folder alone.

Columns (docs/experiments.md lists them):

- ``index``, ``point`` (the swept values as one label), then one column per swept key, named by
  its short name (``arrival_rate``; the whole key path when the short name is taken);
- ``status``: ``complete``, ``interrupted`` (stopped by a signal), ``aborted`` (stopped by a
  fatal error), ``incomplete`` (a folder without summary.json), ``error`` (refused before
  running: unreachable target...), ``not_run``;
- ``health`` (PASS / FAIL, null without a summary), ``slo_met`` (null without SLOs), ``exit_code``
  (what ``veeksha run`` of that point alone would return), ``run_folder``, ``error``;
- the headline metrics of summary.json: request counts by status, ``error_rate``, throughput
  (``requests_per_s``, ``input/output/total_tokens_per_s``, ``sessions_per_s``,
  ``goodput_requests_per_s``), ``window_s``, ``<metric>_<p>_s`` for ttfc, tbc, tpot, e2e
  at mean, p50, p90, p99 (seconds), and with GPU samples ``joules_per_output_token`` and
  ``gpu_power_w`` (summary.json's ``gpus``; null without).

Points that failed a health check keep their numbers, marked ``health = FAIL``: the table and the
plots show them, never mix them silently with good ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from veeksha.evaluate.exit_codes import run_exit_code
from veeksha.experiment.point import read_summary

__all__ = [
    "LATENCY_COLUMNS",
    "TABLE_FILE",
    "progress_line",
    "read_table",
    "sweep_table",
    "value_columns",
    "write_outputs",
]

TABLE_FILE = "sweep.parquet"
_LATENCY = ("ttfc", "tbc", "tpot", "e2e")
_STATS = ("mean", "p50", "p90", "p99")
LATENCY_COLUMNS = tuple(f"{m}_{s}_s" for m in _LATENCY for s in _STATS)
_COUNTS = ("total", "ok", "error", "timeout", "cancelled", "abandoned")
_THROUGHPUT = ("requests_per_s", "input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s")


def _get(data: Mapping[str, Any], *path: str) -> Any:
    node: Any = data
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _strict(run_dir: Path) -> bool:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    from veeksha.record.run_folder import CONFIG_FILE

    try:
        config = YAML(typ="safe", pure=True).load((run_dir / CONFIG_FILE).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError):  # no readable config: the default
        return False
    return bool(_get(config, "health_checks", "strict")) if isinstance(config, dict) else False


def _status(run_dir: Path, summary: dict[str, Any], point: dict[str, Any]) -> str:
    if not run_dir.is_dir():
        return "not_run"
    if not summary:
        return "error" if point.get("error") else "incomplete"
    if not _get(summary, "run", "interrupted"):
        return "complete"
    return "interrupted" if _get(summary, "run", "stop_reason") == "interrupted" else "aborted"


def _exit_code(run_dir: Path, summary: dict[str, Any], point: dict[str, Any]) -> int | None:
    if not summary:
        code = point.get("exit_code")
        return int(code) if isinstance(code, int) else None
    return int(
        run_exit_code(
            interrupted=bool(_get(summary, "run", "interrupted")),
            health_failed=_get(summary, "health", "verdict") == "FAIL",
            strict=_strict(run_dir),
            all_slos_met=_get(summary, "slos", "all_met"),
        )
    )


def _metrics(summary: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name in _COUNTS:
        row[f"requests_{name}"] = _get(summary, "requests", name)
    row["error_rate"] = _get(summary, "errors", "error_rate")
    for name in _THROUGHPUT:
        row[name] = _get(summary, "throughput", name)
    row["sessions_per_s"] = _get(summary, "sessions", "sessions_per_s")
    row["goodput_requests_per_s"] = _get(summary, "goodput", "requests_per_s")
    row["window_s"] = _get(summary, "throughput", "window_s")
    for metric in _LATENCY:
        for stat in _STATS:
            row[f"{metric}_{stat}_s"] = _get(summary, "latency", metric, stat)
    # the GPUs', with server_metrics.gpu_urls or nvidia-smi (summary.json's gpus)
    row["joules_per_output_token"] = _get(summary, "gpus", "joules_per_output_token")
    row["gpu_power_w"] = _get(summary, "gpus", "power_mean_w")
    return row


def value_columns(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Swept key path → its column in the table (its short name unless a metric has it)."""
    reserved = {"index", "point", "status", "health", "slo_met", "exit_code", "run_folder"}
    reserved |= set(_metrics({})) | {"error"}
    short: dict[str, str] = dict(manifest.get("short_names") or {})
    out = {}
    for key in manifest.get("swept_keys") or []:
        name = short.get(key, key)
        out[key] = key if name in reserved else name
    return out


def _typed(values: list[Any]) -> list[Any]:
    """A column of swept values Parquet can hold: numbers stay numbers, the rest become text."""
    from veeksha.scenario.loader import format_value

    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present):
        return values
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        if any(isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX for v in present):
            # (an integer past int64, 10**30: no Parquet integer holds it; a float column does)
            return [None if v is None else float(v) for v in values]
        return values
    return [None if v is None else format_value(v) for v in values]


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def sweep_table(sweep_dir: str | Path) -> pd.DataFrame:
    """The table of a sweep folder, from its sweep.json and each point's folder."""
    from veeksha.experiment.sweep import POINT_FILE, read_manifest

    sweep_dir = Path(sweep_dir)
    manifest = read_manifest(sweep_dir)
    columns = value_columns(manifest)
    rows: list[dict[str, Any]] = []
    for entry in manifest["points"]:
        run_dir = sweep_dir / str(entry.get("folder"))
        summary = read_summary(run_dir) if run_dir.is_dir() else {}
        point = _read_json(run_dir / POINT_FILE)
        row: dict[str, Any] = {"index": entry.get("index"), "point": entry.get("label")}
        values = entry.get("values") or {}
        for key, column in columns.items():
            row[column] = values.get(key)
        row |= {
            "status": _status(run_dir, summary, point),
            "health": _get(summary, "health", "verdict"),
            "slo_met": _get(summary, "slos", "all_met") if summary else None,
            "exit_code": _exit_code(run_dir, summary, point),
            "run_folder": run_dir.name,
            "error": point.get("error") or _get(summary, "run", "error"),
        }
        rows.append(row | _metrics(summary))
    frame = pd.DataFrame(rows)
    for column in columns.values():
        frame[column] = pd.Series(_typed(frame[column].tolist()), dtype=object)
        if frame[column].map(lambda v: isinstance(v, int | float) or v is None).all():
            frame[column] = pd.to_numeric(frame[column])
    frame["exit_code"] = frame["exit_code"].astype("Int64")
    frame["slo_met"] = frame["slo_met"].astype("boolean")
    for name in ("health", "error", "point", "status", "run_folder"):
        frame[name] = frame[name].astype("string")
    return frame


def read_table(sweep_dir: str | Path) -> pd.DataFrame:
    """sweep.parquet of a sweep folder, or the table built from its folders when absent."""
    path = Path(sweep_dir) / TABLE_FILE
    if path.is_file():
        return pd.read_parquet(path)
    return sweep_table(sweep_dir)


def write_outputs(
    sweep_dir: str | Path,
    *,
    plots: bool = True,
    plot_failed: Callable[[Exception], None] | None = None,
) -> pd.DataFrame:
    """(Re)write sweep.parquet and, unless ``plots`` is false, the plots; returns the table.
    ``plot_failed``: told why the plots could not be drawn (the table is written) instead of a
    raise."""
    from veeksha.experiment.sweep import read_manifest

    sweep_dir = Path(sweep_dir)
    table = sweep_table(sweep_dir)
    table.to_parquet(sweep_dir / TABLE_FILE, index=False)
    manifest = read_manifest(sweep_dir)
    repeats = None
    if manifest.get("repeats"):  # (a repeated run: how much its numbers vary)
        from veeksha.experiment.repeats import aggregate, write_repeats

        repeats = aggregate(table, manifest)
        write_repeats(sweep_dir, repeats)
    if plots:
        try:
            from veeksha.experiment.sweep_plots import write_sweep_plots

            write_sweep_plots(sweep_dir, table, manifest)
            if repeats is not None:
                from veeksha.experiment.repeats_plot import write_repeats_plot

                write_repeats_plot(sweep_dir, table, manifest, repeats)
        except Exception as error:
            if plot_failed is None:
                raise
            plot_failed(error)
    return table


def _ms(value: Any) -> str:
    from veeksha.evaluate.report import number_text

    return "-" if not isinstance(value, int | float) else f"{number_text(value * 1000)} ms"


def progress_line(name: str, summary: Mapping[str, Any], elapsed_s: float) -> str:
    """One line for a finished point: throughput, latencies, health, SLOs, time taken (numbers
    as the run report shows them: 4 significant digits)."""
    from veeksha.evaluate.report import number_text

    if not summary:
        return f"{name}: no results ({elapsed_s:.1f} s)"
    rps = _get(summary, "throughput", "requests_per_s")
    slo = _get(summary, "slos", "all_met")
    parts = [
        f"{number_text(rps)} req/s" if isinstance(rps, int | float) else "- req/s",
        f"TTFC p50 {_ms(_get(summary, 'latency', 'ttfc', 'p50'))}",
        f"p99 {_ms(_get(summary, 'latency', 'ttfc', 'p99'))}",
        f"E2E p99 {_ms(_get(summary, 'latency', 'e2e', 'p99'))}",
        f"health {_get(summary, 'health', 'verdict')}",
        "SLOs " + ("-" if slo is None else "met" if slo else "UNMET"),
    ]
    if _get(summary, "run", "interrupted"):
        parts.append(f"stopped: {_get(summary, 'run', 'stop_reason')}")
    return f"{name}: {', '.join(parts)} ({elapsed_s:.1f} s)"
