"""The ``veeksha`` command line: a thin click group.

Start-up stays cheap: this module imports only click and the error tree; each command imports what
it needs when it runs, and commands of other packages are registered by import path in
:data:`LAZY_COMMANDS`, loaded only when used. Every :class:`~veeksha.errors.VeekshaError` becomes
its message on stderr and its exit code, never a traceback.
"""

from __future__ import annotations

import functools
import gc
import importlib
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from veeksha import __version__
from veeksha.errors import RunAbortedError, ScenarioError, VeekshaError

if TYPE_CHECKING:
    from veeksha.scenario.models import Scenario

__all__ = ["LAZY_COMMANDS", "LIBRARY_DEFAULTS", "LazyGroup", "main", "set_library_defaults"]

# ---------------------------------------------------------------------------------------------
# LAZY COMMANDS: command name → "module:attribute" of a click command, imported on first use.
# To add a command, write it in your package and add ONE line here, e.g.
#     "sim-server": "veeksha.simulator.cli:sim_server",
# Only register modules that exist (a test imports every entry).
# ---------------------------------------------------------------------------------------------
LAZY_COMMANDS: dict[str, str] = {
    "report": "veeksha.evaluate.cli:report",
    "compare": "veeksha.evaluate.cli:compare",
    "sim-server": "veeksha.simulator.cli:sim_server",
    "prefill": "veeksha.experiment.microbench.cli:prefill",
    "decode": "veeksha.experiment.microbench.cli:decode",
}

#: Arrow's allocator for the commands (``LazyGroup.main``); set it in the environment to choose
#: another (mimalloc, jemalloc).
ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"

#: Settings of the libraries veeksha's processes load, set (unless the environment already sets
#: them) before any command imports them; the processes a command starts (workers, the built-in
#: simulator) inherit them. Each is start-up CPU that buys veeksha nothing:
#:
#: - Arrow's allocator: its default (mimalloc) keeps tens of MB of freed pages resident whatever
#:   release_unused asks, where malloc_trim returns malloc's (veeksha.evaluate.source): a
#:   1,000,000-session run's peak, evaluation included, is about 70 MB lower.
#: - pydantic's plugins: without this, building the first model scans the entry points of every
#:   installed distribution for plugins (~30 ms); veeksha's models want none.
#: - OpenBLAS' threads: importing numpy starts one BLAS thread per core and gives each a buffer
#:   (~50 ms of CPU); veeksha does no linear algebra.
LIBRARY_DEFAULTS: dict[str, str] = {
    ARROW_POOL_ENV: "system",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
    "OPENBLAS_NUM_THREADS": "1",
}


def set_library_defaults() -> None:
    """Put :data:`LIBRARY_DEFAULTS` into the environment where it does not set them."""
    for name, value in LIBRARY_DEFAULTS.items():
        os.environ.setdefault(name, value)


class LazyGroup(click.Group):
    """A click group that loads commands named by import path on first use and turns every
    :class:`VeekshaError` into its message lines on stderr and its exit code."""

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy_commands:
            self.add_command(self._load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def _load(self, name: str) -> click.Command:
        module_name, _, attribute = self.lazy_commands[name].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.lazy_commands[name]} is not a click command")
        return command

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # read once, when each library loads: before any command imports one
        set_library_defaults()
        return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VeekshaError as exc:
            _report(exc)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            # Only outside a run's traffic (set-up, evaluation): the run itself turns Ctrl-C
            # into a clean stop. Processes it started are stopped on the way out.
            click.echo("interrupted", err=True)
            ctx.exit(RunAbortedError.exit_code)


def _report(exc: VeekshaError) -> None:
    prefix = "" if isinstance(exc, ScenarioError) else "error: "
    for line in str(exc).splitlines() or [type(exc).__name__]:
        click.echo(f"{prefix}{line}", err=True)


@click.group(
    cls=LazyGroup,
    lazy_commands=LAZY_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", "-V", prog_name="veeksha")
def main() -> None:
    """Benchmark LLM inference servers with realistic session traffic.

    Describe the traffic in a YAML scenario (see docs/scenario.md), check it with
    `veeksha validate`, run it with `veeksha run`.
    """


# ------------------------------------------------------------------------------------ helpers

_SET_HELP = (
    "Override a key of the scenario, e.g. --set traffic_scheduler.interval_generator."
    "arrival_rate=20 (value written as YAML). Repeatable; later ones win."
)


def _load(path: str | Path, overrides: Sequence[str]) -> Scenario:
    """Load a scenario; print the models' warnings (ignored keys) as one line each."""
    from veeksha.scenario.loader import load_scenario

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scenario = load_scenario(path, overrides)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    return scenario


def _check_trace(scenario: Scenario) -> None:
    """Read and check a trace scenario's trace (and cache it); raises ``TraceFileError``."""
    if scenario.session_generator.type == "trace":
        from veeksha.generate.traces import open_trace

        open_trace(scenario)


def _split_run_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """Separate positional arguments from veeksha-style ``--key.path VALUE`` pairs."""
    positional: list[str] = []
    extra: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and len(arg) > 2:
            step = 1 if "=" in arg else 2
            extra += args[i : i + step]
            i += step
        else:
            positional.append(arg)
            i += 1
    return positional, extra


def _run(ctx: click.Context, path: str, overrides: Sequence[str], options: RunOptions) -> None:
    # Set-up (imports, models, the prompt corpus) makes objects that live as long as the
    # process, and the collector's passes over them while they are made are wasted: ~150 passes,
    # a quarter of the start-up's CPU. The engine collects once and turns it back on before t0.
    gc.disable()
    from veeksha.record.run_folder import create_run_folder, write_config

    scenario = _load(path, overrides)
    if options.output_dir is not None:
        scenario = scenario.model_copy(update={"output_dir": str(options.output_dir)})
    _check_trace(scenario)  # a bad trace: exit 2 before any folder exists
    run_dir = create_run_folder(scenario.output_dir, scenario)
    write_config(run_dir, scenario)
    if not options.quiet:
        click.echo(f"run folder: {run_dir}")
    from veeksha.engine.target import spawn_simulator

    # the built-in simulator starts up on the other core while this process imports the engine
    simulator = spawn_simulator(scenario, options.dry_run)
    try:
        from veeksha.engine import run_benchmark

        result = run_benchmark(
            scenario,
            run_dir,
            quiet=options.quiet,
            dry_run=options.dry_run,
            plots=options.plots,
            simulator=simulator,
        )
    finally:
        if simulator is not None:
            simulator.stop()  # (the run stopped it already, unless it failed before its start)
    if result != 0:
        ctx.exit(result)


@dataclass(frozen=True)
class RunOptions:
    """Switches of `run` and `benchmark` that are not scenario keys."""

    output_dir: Path | None = None
    quiet: bool = False
    dry_run: bool = False
    plots: bool = True


def _run_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options `run` and `benchmark` share, handed to ``func`` as ``options: RunOptions``."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        output_dir: Path | None,
        quiet: bool,
        dry_run: bool,
        no_plots: bool,
        **kwargs: Any,
    ) -> Any:
        options = RunOptions(output_dir, quiet, dry_run, plots=not no_plots)
        return func(*args, options=options, **kwargs)

    decorators = (
        click.option(
            "--output-dir",
            type=click.Path(file_okay=False, path_type=Path),
            help="Base folder of run folders (default: the scenario's output_dir).",
        ),
        click.option("--quiet", "-q", is_flag=True, help="Print only warnings and errors."),
        click.option(
            "--dry-run",
            is_flag=True,
            help="Send nothing: requests complete at once inside the workers. Checks a "
            "scenario's shape and measures veeksha's own scheduling cost.",
        ),
        click.option(
            "--no-plots", is_flag=True, help="Skip the PNG plots of the evaluation (faster)."
        ),
    )
    for decorator in reversed(decorators):
        wrapper = decorator(wrapper)
    return wrapper


# ----------------------------------------------------------------------------------- commands


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
def validate(files: tuple[Path, ...], overrides: tuple[str, ...]) -> None:
    """Check scenario FILEs; print every problem as file:line:col: key: message.

    A trace scenario's trace file is read and checked too (file:line: message). Exits 0 when
    all are valid, 2 when any is not.
    """
    from veeksha.errors import ConfigurationError

    failed = False
    for path in files:
        try:
            scenario = _load(path, overrides)
            _check_trace(scenario)
        except (ScenarioError, ConfigurationError) as exc:
            _report(exc)
            failed = True
        else:
            click.echo(f"{path}: ok")
    if failed:
        raise click.exceptions.Exit(ScenarioError.exit_code)


@main.command()
@click.option(
    "--output",
    "-o",
    default="schemas/scenario.schema.json",
    show_default=True,
    help="Where to write the schema; '-' prints it.",
)
def schema(output: str) -> None:
    """Write the JSON Schema of scenarios (for editors and validators)."""
    from veeksha.scenario.schema import schema_text, write_schema

    if output == "-":
        click.echo(schema_text(), nl=False)
        return
    try:
        click.echo(f"wrote {write_schema(output)}")
    except OSError as exc:
        from veeksha.errors import ConfigurationError

        raise ConfigurationError(f"cannot write {output!r}: {exc.strerror or exc}") from None


_EXTRA_ARGS = {"ignore_unknown_options": True, "allow_extra_args": False}


@main.command(context_settings=_EXTRA_ARGS)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="FILE [--KEY.PATH VALUE]...")
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
@_run_options
@click.pass_context
def run(
    ctx: click.Context, args: tuple[str, ...], overrides: tuple[str, ...], options: RunOptions
) -> None:
    """Run the benchmark described by scenario FILE.

    Creates <output_dir>/<UTC time>-<scenario hash>/ holding config.yaml (the resolved scenario,
    secrets redacted) and the results. Keys can also be overridden veeksha-style:
    --traffic_scheduler.interval_generator.arrival_rate 20.
    """
    from veeksha.scenario.loader import extra_args_to_overrides

    positional, extra = _split_run_args(args)
    if len(positional) != 1:
        got = " ".join(positional) or "none"
        raise click.UsageError(f"expected one scenario FILE, got: {got}")
    _run(ctx, positional[0], [*overrides, *extra_args_to_overrides(extra)], options)


@main.command(context_settings=_EXTRA_ARGS)
@click.option(
    "--config", "config", required=True, type=click.Path(path_type=Path), help="Scenario FILE."
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[--KEY.PATH VALUE]...")
@_run_options
@click.pass_context
def benchmark(ctx: click.Context, config: Path, args: tuple[str, ...], options: RunOptions) -> None:
    """Alias of `run` for users of the public veeksha CLI: --config FILE [--a.b.c VALUE]..."""
    from veeksha.scenario.loader import extra_args_to_overrides

    _run(ctx, str(config), extra_args_to_overrides(args), options)


if __name__ == "__main__":
    main(prog_name="veeksha")
