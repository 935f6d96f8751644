"""``veeksha prefill`` and ``veeksha decode``: parse the flags (or ``--config FILE``) and delegate.

Exit codes: 0 when every check of the measurement held, 4 when one failed (the results are
written all the same, the failure named), 2 for bad input (nothing run), 3 when interrupted.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import click

from veeksha.evaluate.exit_codes import ExitCode
from veeksha.experiment.microbench.config import (
    BenchConfig,
    DecodeConfig,
    PrefillConfig,
    load_config,
    parse_flags,
)
from veeksha.experiment.microbench.stress_config import StressConfig
from veeksha.plural import counted

__all__ = ["decode", "diff", "prefill", "stress"]

_SETTINGS = {"ignore_unknown_options": True, "allow_extra_args": False}


def _keys_help(kind: type[BenchConfig]) -> str:
    lines = []
    for name, info in kind.model_fields.items():
        shown = {"simulator": "{preset: realistic}", "headers": "{}"}
        default = (kind.FULL | shown).get(name, info.default)
        quick = kind.QUICK.get(name)
        extra = f" (--quick: {quick})" if quick is not None and quick != default else ""
        text = f"--{name}: {info.description} Default: {default}{extra}."
        lines += textwrap.wrap(text, width=76, subsequent_indent="    ", break_on_hyphens=False)
    return "\b\nKeys (flags, or keys of the --config YAML file):\n" + "\n".join(lines)


def _report(name: str, folder: Path, document: dict[str, Any]) -> None:
    click.echo(f"{name} results: {folder / (name + '_results.json')}")
    if name == "stress":
        _stress_table(document)
    for line in _figures(name, document):
        click.echo(f"  {line}")
    for check in document["checks"]:
        mark = "ok  " if check["passed"] else "WARN" if check.get("warning") else "FAIL"
        click.echo(f"  {mark} {check['name']}: {check['detail']}")


def _figures(name: str, document: dict[str, Any]) -> list[str]:
    if name == "prefill":
        lines = [
            f"{_prefill_point(p)}: TTFC p50 {_num(p['ttfc_p50_ms'])} ms"
            f" ({counted(p['samples'], 'sample')})"
            for p in document["points"]
        ]
        fit = document.get("fit")
        if fit:
            slope = (
                f"{fit['slope_ms_per_megapixel']:.2f} ms per megapixel"
                if "slope_ms_per_megapixel" in fit
                else f"{fit['slope_ms_per_1k_tokens']:.2f} ms per 1k tokens"
            )
            lines.append(
                f"fit: {slope}, intercept {fit['intercept_ms']:.2f} ms (r2 {fit['r2']:.3f})"
            )
        return lines
    if name == "stress":
        return []  # (a table: _stress_table)
    lines = [
        f"B={p['batch_size']} L={p['input_length']}: TBC p50 {_num(p['tbc_p50_ms'])} ms, "
        f"p99 {_num(p['tbc_p99_ms'])} ms ({counted(p['tbc_samples'], 'gap')} in "
        f"{p['window_s']:.2f} s)"
        for p in document["points"]
    ]
    lines += [
        f"fit L={f['input_length']}: {f['intercept_ms']:.3f} ms + {f['slope_ms_per_seq']:.4f} "
        "ms per sequence"
        for f in document.get("fits", [])
    ]
    return lines


#: the stress table's columns: (header, key of a point)
_STRESS_COLUMNS = (
    ("out tok/s", "output_tokens_per_s"),
    ("req/s", "requests_per_s"),
    ("TTFC p50 ms", "ttfc_p50_ms"),
    ("TTFC p99 ms", "ttfc_p99_ms"),
    ("E2E p50 ms", "e2e_p50_ms"),
    ("E2E p99 ms", "e2e_p99_ms"),
    ("tok/s per user p50", "interactivity_p50"),
)


def _stress_table(document: dict[str, Any]) -> None:
    """One row per load level, stacked to the terminal's width (``evaluate.stacked``)."""
    from rich.console import Console

    from veeksha.evaluate.stacked import StackedColumn, print_stacked

    points = document["points"]
    unit = "concurrency" if document["traffic"] == "concurrency" else "req/s offered"
    key = StackedColumn(unit, [f"{p['level']:g}" for p in points])
    shown = list(_STRESS_COLUMNS)
    if any(p.get("answer_ttfc_p50_ms") is not None for p in points):  # (a reasoning model)
        at = shown.index(("TTFC p99 ms", "ttfc_p99_ms")) + 1
        shown[at:at] = [("answer TTFC p50 ms", "answer_ttfc_p50_ms")]
    columns = [StackedColumn(h, [_num(p[k]) for p in points]) for h, k in shown]
    columns.append(StackedColumn("requests", [str(p["samples"]) for p in points]))
    print_stacked(Console(), "  throughput and latency per load level", key, columns)


def _prefill_point(point: dict[str, Any]) -> str:
    """A prefill point's name, an image side's with its tokens: ``448x448 (256 tokens)``."""
    from veeksha.experiment.microbench.results import prefill_point

    if "image_side" not in point:
        return prefill_point(point)
    tokens = point.get("image_tokens")
    return f"{prefill_point(point)} ({'-' if tokens is None else tokens} tokens)"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _finish(ctx: click.Context, name: str, folder: Path, document: dict[str, Any]) -> None:
    _report(name, folder, document)
    if not document["passed"]:
        ctx.exit(ExitCode.HEALTH_FAILED)


@click.command(context_settings=_SETTINGS, epilog=_keys_help(PrefillConfig))
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML FILE of keys.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[--KEY VALUE...]")
@click.pass_context
def prefill(ctx: click.Context, config_file: Path | None, args: tuple[str, ...]) -> None:
    """TTFT against prompt length: one request at a time at each input length, 1 output token;
    the fitted slope (ms per 1k prompt tokens) and intercept (docs/microbench.md)."""
    from veeksha.experiment.microbench.prefill import run_prefill

    config = load_config(PrefillConfig, config_file, parse_flags(args))
    folder, document = run_prefill(config, click.echo)
    _finish(ctx, "prefill", folder, document)


@click.command(context_settings=_SETTINGS, epilog=_keys_help(DecodeConfig))
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML FILE of keys.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[--KEY VALUE...]")
@click.pass_context
def decode(ctx: click.Context, config_file: Path | None, args: tuple[str, ...]) -> None:
    """Time between chunks against batch size: each batch decoding together, measured in its
    common decode window; TBC p50/p99 per batch size (docs/microbench.md)."""
    from veeksha.experiment.microbench.decode import run_decode

    config = load_config(DecodeConfig, config_file, parse_flags(args))
    folder, document = run_decode(config, click.echo)
    _finish(ctx, "decode", folder, document)


@click.command(context_settings=_SETTINGS, epilog=_keys_help(StressConfig))
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="YAML FILE of keys.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[--KEY VALUE...]")
@click.pass_context
def stress(ctx: click.Context, config_file: Path | None, args: tuple[str, ...]) -> None:
    """Throughput against latency as the load rises: one timed point per concurrency or rate
    level (manual, range or auto); throughput, TTFC/E2E p50/p99 and interactivity per level
    (docs/microbench.md)."""
    from veeksha.experiment.microbench.stress import run_stress

    config = load_config(StressConfig, config_file, parse_flags(args))
    folder, document = run_stress(config, click.echo)
    _finish(ctx, "stress", folder, document)


@click.command()
@click.argument("dir_a", type=click.Path(path_type=Path))
@click.argument("dir_b", type=click.Path(path_type=Path))
@click.option(
    "--labels", nargs=2, default=None, metavar="A B", help="Names of the two sides (default: A, B)."
)
@click.option(
    "--output_dir",
    "--output-dir",
    default="diff_output",
    show_default=True,
    help="Base folder of the diff's folder.",
)
@click.option("--plots/--no_plots", default=True, help="Draw the plots.")
def diff(
    dir_a: Path, dir_b: Path, labels: tuple[str, str] | None, output_dir: str, plots: bool
) -> None:
    """Compare the prefill, decode and stress results in two folders (searched one level down
    too): overlaid plots per benchmark found in both, and a table of relative changes
    (B - A) / A, printed and written as diff.csv and diff.json (docs/microbench.md)."""
    import csv
    import json

    from veeksha.experiment.microbench.diff import compare
    from veeksha.experiment.microbench.points import result_folder

    names = labels or ("A", "B")
    pairs, changes, notes = compare(dir_a, dir_b)
    folder = result_folder(output_dir, "diff")
    drawn: dict[str, str] = {}
    if plots:
        from veeksha.experiment.microbench.diff_plots import diff_plot

        for name, results in pairs.items():
            drawn[name] = diff_plot(name, results, names, folder / f"diff_{name}.png").name
    rows = [change.as_dict() for change in changes]
    document = {
        "labels": list(names),
        "a": str(dir_a),
        "b": str(dir_b),
        "benchmarks": list(pairs),
        "notes": notes,
        "plots": drawn,
        "changes": rows,
    }
    (folder / "diff.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    with (folder / "diff.csv").open("w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(
            out, fieldnames=["benchmark", "point", "metric", "a", "b", "change", "health"]
        )
        writer.writeheader()
        writer.writerows(rows)
    for note in notes:
        click.echo(f"note: {note}")
    click.echo(
        f"{'benchmark':<9} {'point':<14} {'metric':<24} {names[0]:>12} {names[1]:>12} change"
    )
    for row in rows:
        change = "-" if row["change"] is None else f"{row['change'] * 100:+.1f} %"
        health = f"  ! {row['health']}" if row["health"] else ""
        click.echo(
            f"{row['benchmark']:<9} {row['point']:<14} {row['metric']:<24} "
            f"{_num(row['a']):>12} {_num(row['b']):>12} {change}{health}"
        )
    if any(row["health"] for row in rows):
        click.echo("! a point whose run's health verdict was not PASS: read its change with care")
    click.echo(f"diff: {folder}")
