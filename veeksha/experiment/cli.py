"""``veeksha report`` and ``veeksha compare`` for run folders and sweep folders alike.

A sweep folder (it holds sweep.json) is handled here: ``report SWEEP_DIR`` rebuilds sweep.parquet
and the plots from the point folders alone; ``compare SWEEP_A SWEEP_B ...`` draws the sweeps'
curves on one plot and prints the relative change of each headline metric at matching swept
values. A run folder goes to ``veeksha.evaluate.cli`` unchanged.
"""

from __future__ import annotations

from pathlib import Path

import click

from veeksha.evaluate import cli as run_cli

__all__ = ["compare", "report"]

_DIR = click.Path(exists=True, file_okay=False, path_type=Path)


def _is_sweep(path: Path) -> bool:
    from veeksha.experiment.sweep import is_sweep_dir

    return is_sweep_dir(path)


@click.command()
@click.argument("run_dir", type=_DIR)
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots.")
@click.option("--quiet", "-q", is_flag=True, help="Write the files, print nothing.")
@click.pass_context
def report(ctx: click.Context, run_dir: Path, no_plots: bool, quiet: bool) -> None:
    """Recompute the summary, health checks, SLOs and plots of RUN_DIR and print the report.

    Works on finished runs and on the partial results of a killed run. On a sweep folder,
    rebuilds sweep.parquet and the sweep's plots from its point folders. Exits 0, or 2 when
    RUN_DIR is neither a run folder nor a sweep folder.
    """
    if not _is_sweep(run_dir):
        ctx.invoke(run_cli.report, run_dir=run_dir, no_plots=no_plots, quiet=quiet)
        return
    from veeksha.experiment.sweep_compare import render_table
    from veeksha.experiment.sweep_table import TABLE_FILE, write_outputs

    table = write_outputs(run_dir, plots=not no_plots)
    if not quiet:
        from rich.console import Console

        console = Console()
        render_table(console, run_dir.name, table)
        console.print(f"wrote {run_dir / TABLE_FILE}", soft_wrap=True)  # (a path: never cut)
        from veeksha.experiment.repeats import REPEATS_FILE, read_repeats, render_repeats

        if (run_dir / REPEATS_FILE).is_file():  # (a repeated run: how much its numbers vary)
            render_repeats(console, read_repeats(run_dir))


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=_DIR)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where compare of sweeps writes its plot (default: ./compare_<A>_vs_<B>.png).",
)
@click.pass_context
def compare(ctx: click.Context, run_dirs: tuple[Path, ...], plot_path: Path | None) -> None:
    """Headline metrics of RUN_DIRS side by side, with the change relative to the first.

    Sweep folders compare curve against curve: one plot with every sweep's latency-throughput
    curves, and a table of relative changes at matching swept values. Folders of repeated runs
    (--repeats) compare each metric's means with their intervals and Welch's t-test: whether
    the difference is larger than the runs' noise.
    """
    from veeksha.errors import ConfigurationError
    from veeksha.experiment.repeats import REPEATS_FILE

    if len(run_dirs) < 2:  # (one folder has nothing to be compared with)
        raise ConfigurationError(
            f"compare needs two folders or more (got one, {run_dirs[0]}): give another run, "
            "sweep or repeats folder to compare it with; veeksha report FOLDER shows one alone"
        )
    if all((d / REPEATS_FILE).is_file() for d in run_dirs):
        from rich.console import Console

        from veeksha.experiment.repeats_compare import compare_repeats

        compare_repeats(Console(), list(run_dirs))  # (repeated runs: real or noise)
        return
    sweeps = [_is_sweep(d) for d in run_dirs]
    if not any(sweeps):
        ctx.invoke(run_cli.compare, run_dirs=run_dirs)
        return
    if not all(sweeps):
        runs = ", ".join(str(d) for d, s in zip(run_dirs, sweeps, strict=True) if not s)
        raise ConfigurationError(
            f"compare takes run folders or sweep folders, not both ({runs} not a sweep); "
            "compare runs with a sweep's point folders (each a run folder), or sweeps with sweeps"
        )
    from rich.console import Console

    from veeksha.experiment.sweep_compare import compare_sweeps

    path = plot_path or Path(f"compare_{run_dirs[0].name}_vs_{run_dirs[1].name}.png")
    compare_sweeps(Console(), list(run_dirs), path)
