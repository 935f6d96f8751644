"""``veeksha capacity-search FILE`` (also ``--config FILE``, the public veeksha form)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["capacity_search"]


@click.command("capacity-search")
@click.argument("file", required=False, type=click.Path(path_type=Path))
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="The search FILE.")
@click.option("--output-dir", type=str, default=None, help="Base folder (output_dir).")
@click.option("--start-value", type=float, help="First value probed (start_value).")
@click.option("--max-value", type=float, help="Highest value probed (max_value).")
@click.option("--expansion-factor", type=float, help="Growth of the geometric phase (> 1).")
@click.option("--max-iterations", type=int, help="Values probed at most (max_iterations).")
@click.option("--precision", type=int, help="Decimal places of the value grid.")
@click.option("--confidence", type=float, help="Confidence of each SLO's interval (0.95).")
@click.option("--max-extensions", type=int, help="Extra runs of an undecided value (2).")
@click.option("--warmup-seconds", type=float, help="Warmup per probe without one of its own.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY.PATH=VALUE",
    help="Override a key of the scenario (benchmark_config), as `veeksha run --set`.",
)
@click.option(
    "--no-plots", is_flag=True, help="Skip the probe runs' own plots (capacity.png stays)."
)
@click.option("--quiet", "-q", is_flag=True, help="Print only the result.")
@click.pass_context
def capacity_search(
    ctx: click.Context,
    file: Path | None,
    config_file: Path | None,
    overrides: tuple[str, ...],
    no_plots: bool,
    quiet: bool,
    **flags: object,
) -> None:
    """Find the highest arrival rate (rate scheduler) or concurrency (concurrent scheduler) at
    which every SLO of the scenario holds, each judged by a confidence interval.

    Writes <output_dir>/capacity-<UTC time>-<hash>/ with one run folder per probe, capacity.json
    and capacity.png. Exit 0 when a capacity was found, 5 when no value met the SLOs, 4 when the
    first value could not be measured (unhealthy generator), 2 for bad input, 3 when interrupted.
    """
    if (file is None) == (config_file is None):
        raise click.UsageError("give the search file once: FILE or --config FILE")
    from veeksha.experiment.capacity.config import load_capacity_config
    from veeksha.experiment.capacity.runner import run_capacity_search

    path = file if file is not None else config_file
    assert path is not None
    config = load_capacity_config(path, flags, overrides)
    result = run_capacity_search(config, plots=not no_plots, echo=None if quiet else click.echo)
    if quiet:
        click.echo(f"capacity: {result.outcome.best} ({result.folder})")
    if result.exit_code:
        ctx.exit(result.exit_code)
