"""The ``veeksha`` command line: a thin click group.

Start-up stays cheap: this module imports only click and the error tree; each command imports what
it needs when it runs, and commands of other packages are registered by import path in
:data:`LAZY_COMMANDS`, loaded only when used. Every :class:`~veeksha.errors.VeekshaError` becomes
its message on stderr and its exit code, never a traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import importlib
import os
import re
import sys
import threading
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from veeksha import __version__
from veeksha.errors import RunAbortedError, ScenarioError, VeekshaError
from veeksha.plural import counted

if TYPE_CHECKING:
    from veeksha.scenario.loader import ScenarioSet
    from veeksha.scenario.models import Scenario

__all__ = ["LAZY_COMMANDS", "LIBRARY_DEFAULTS", "LazyGroup", "main", "set_library_defaults"]

# ---------------------------------------------------------------------------------------------
# LAZY COMMANDS: command name → "module:attribute" of a click command, imported on first use.
# To add a command, write it in your package and add ONE line here, e.g.
#     "sim-server": "veeksha.simulator.cli:sim_server",
# Only register modules that exist (a test imports every entry).
# ---------------------------------------------------------------------------------------------
LAZY_COMMANDS: dict[str, str] = {
    "report": "veeksha.experiment.cli:report",
    "compare": "veeksha.experiment.cli:compare",
    "sim-server": "veeksha.simulator.cli:sim_server",
    "capacity-search": "veeksha.experiment.capacity.cli:capacity_search",
    "prefill": "veeksha.experiment.microbench.cli:prefill",
    "decode": "veeksha.experiment.microbench.cli:decode",
    "stress": "veeksha.experiment.microbench.cli:stress",
    "diff": "veeksha.experiment.microbench.cli:diff",
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
#: - The background thread of Arrow's own jemalloc, which importing pyarrow starts even with
#:   another allocator chosen: unused, and a second thread keeps a process from forking its
#:   helpers (``veeksha.forked``).
LIBRARY_DEFAULTS: dict[str, str] = {
    ARROW_POOL_ENV: "system",
    "PYDANTIC_DISABLE_PLUGINS": "__all__",
    "OPENBLAS_NUM_THREADS": "1",
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}


def set_library_defaults() -> None:
    """Put :data:`LIBRARY_DEFAULTS` into the environment where it does not set them."""
    for name, value in LIBRARY_DEFAULTS.items():
        os.environ.setdefault(name, value)
    _skip_pydantic_plugin_loader()


_PYDANTIC_LOADER = "pydantic.plugin._loader"


def _skip_pydantic_plugin_loader() -> None:
    """With its plugins off, pydantic still imports its plugin loader on the first model, and
    the loader imports ``importlib.metadata`` (email, zipfile, csv: 63 M instructions, ~5 % of
    loading a scenario) only to find none. A stand-in loader finds none at once; any other name
    pydantic may ask it for comes from the real one."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__" or _PYDANTIC_LOADER in sys.modules:
        return
    loader = types.ModuleType(_PYDANTIC_LOADER)
    loader.get_plugins = tuple  # type: ignore[attr-defined]  # (no plugins: an empty tuple)
    loader.__getattr__ = _real_pydantic_loader_attribute  # type: ignore[method-assign]
    sys.modules[_PYDANTIC_LOADER] = loader


def _real_pydantic_loader_attribute(name: str) -> object:
    if name.startswith("__"):  # (the import system's questions: __path__, __spec__, ...)
        raise AttributeError(name)
    import importlib.machinery
    import importlib.util

    import pydantic.plugin

    where = list(pydantic.plugin.__path__)
    spec = importlib.machinery.PathFinder.find_spec(_PYDANTIC_LOADER, where)
    if spec is None or spec.loader is None:
        raise AttributeError(name)
    real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real)
    sys.modules[_PYDANTIC_LOADER] = real
    return getattr(real, name)


#: Commands whose runs start processes that import veeksha (each saves its compile time once
#: veeksha's bytecode exists).
_STARTS_PROCESSES = frozenset({"run", "capacity-search", "prefill", "decode", "stress"})


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
        from veeksha.terminal import commanding

        # read once, when each library loads: before any command imports one
        set_library_defaults()
        # SIGTERM and SIGHUP stop a command as Ctrl-C does; a closed terminal costs no result
        with commanding():
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
            from veeksha.terminal import ending

            ending()  # (another Ctrl-C now would be click's "Aborted!", exit 1)
            click.echo("interrupted", err=True)
            ctx.exit(RunAbortedError.exit_code)


def _report(exc: VeekshaError) -> None:
    """``exc`` on stderr: a scenario's issues a line each, as ``file:line:col: ...``; another
    error after ``error: ``, the lines it quotes (a server's last lines) indented under it."""
    lines = str(exc).splitlines() or [type(exc).__name__]
    if isinstance(exc, ScenarioError):
        for line in lines:
            click.echo(line, err=True)
        return
    click.echo(f"error: {lines[0]}", err=True)
    for line in lines[1:]:
        click.echo(f"  {line}", err=True)


@click.group(
    cls=LazyGroup,
    lazy_commands=LAZY_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", "-V", prog_name="veeksha")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Benchmark LLM inference servers with realistic session traffic.

    Describe the traffic in a YAML scenario (see docs/scenario.md), check it with
    `veeksha validate`, run it with `veeksha run`.
    """
    if ctx.invoked_subcommand in _STARTS_PROCESSES:  # after the command: veeksha.bytecode
        from veeksha.bytecode import warm

        ctx.call_on_close(warm)
    if ctx.invoked_subcommand in _ENDS_AT_ONCE:
        _ending.at_once = True


#: Commands whose process ends without the interpreter's teardown (``entry``).
_ENDS_AT_ONCE = frozenset({"run"})


class _Ending:
    """Whether the command run by ``entry`` may end its process at once."""

    at_once = False


_ending = _Ending()


def entry() -> None:
    """The ``veeksha`` command (``main`` as a process): a ``veeksha run`` ends at once.

    When ``run`` returns, its files are closed, its processes reaped and its output written; the
    interpreter's teardown would then free every object of the engine, the scenario's models,
    numpy and Arrow one by one: ~0.1 CPU-s and 0.1-0.4 s of wall time (measured in
    BENCHMARKS.md, "the end of a run"), for memory the process gives back anyway. The atexit
    functions still run, the standard streams are flushed, and a process with a thread that is
    not a daemon ends the usual way.
    """
    try:
        main(prog_name="veeksha")
    except SystemExit as stop:
        others = [t for t in threading.enumerate() if t is not threading.main_thread()]
        if not _ending.at_once or not all(thread.daemon for thread in others):
            raise
        _end_now(stop.code)
    # (standalone click always raises SystemExit)


def _end_now(code: object) -> NoReturn:
    """``sys.exit(code)`` without the interpreter's teardown."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # (as sys.exit prints a message)
        sys.stderr.write(f"{code}\n")
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


# ------------------------------------------------------------------------------------ helpers

_SET_HELP = (
    "Override a key of the scenario, e.g. --set traffic_scheduler.interval_generator."
    "arrival_rate=20 (value written as YAML). Repeatable; later ones win."
)


def _load_points(
    path: str | Path, overrides: Sequence[str], *, source: bool = False
) -> ScenarioSet:
    """Load a scenario file's points (one, or a sweep's); print the models' warnings.
    ``source``: keep a plain file's composed text too (a repeated run's sweep.yaml)."""
    from veeksha.scenario.loader import load_points

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        points = load_points(path, overrides, source=source)
    for warning in caught:
        click.echo(f"warning: {warning.message}", err=True)
    return points


def _check_trace(scenario: Scenario, load_tokenizers: bool = False) -> list[str]:
    """Check the files the scenario names: read and check a trace scenario's trace (and cache
    it), find each local tokenizer (and, with ``load_tokenizers``, load it). A problem of a
    whole file (missing, a folder, empty, nothing to replay) is reported at the key naming it
    (``scenario.yaml:9:3: session_generator.trace_file: ...``); a trace's bad row at its own
    line of the trace. Returns what run.log will warn of (rows not replayed as the trace has
    them)."""
    from veeksha.errors import ConfigurationError
    from veeksha.scenario.loader import named_file_error

    out: list[str] = []
    for parts in scenario.named_files():
        try:
            if parts[-1] == "trace_file":
                from veeksha.generate.traces import open_trace

                out += open_trace(scenario).warnings()
            else:
                _check_tokenizer(scenario, parts, load_tokenizers)
        except ConfigurationError as exc:
            if getattr(exc, "line", None) is not None:  # (a trace's row: its own file and line)
                raise
            placed = named_file_error(scenario, parts, str(exc))
            if placed is None:
                raise
            raise placed from None
    return out


def _check_tokenizer(scenario: Scenario, parts: tuple[str | int, ...], load: bool) -> None:
    from veeksha.generate.tokenizer import HfTokenizerAdapter, resolve_tokenizer_json

    node: Any = scenario
    for part in parts:
        node = node[part] if isinstance(part, int) else getattr(node, part)
    if load:
        HfTokenizerAdapter(node)
    else:
        resolve_tokenizer_json(node)


class _Background:
    """``func(*args)`` on a thread; ``result()`` waits and raises its error here."""

    def __init__(self, func: Callable[..., object], *args: Any) -> None:
        import threading

        self._error: BaseException | None = None

        def call() -> None:
            try:
                func(*args)
            except BaseException as exc:  # noqa: BLE001 (raised again in the caller's thread)
                self._error = exc

        self._thread = threading.Thread(target=call, name="veeksha-check", daemon=True)
        self._thread.start()

    def result(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


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
    from veeksha.record.run_folder import create_run_folder

    if _is_capacity_search(Path(path)):
        raise click.UsageError(
            f"{path} is a capacity search file (it names benchmark_config or"
            " capacity_search_config), not a scenario: run it with"
            f" `veeksha capacity-search {path}`"
        )
    points = _load_points(path, overrides, source=options.repeats > 1)
    if options.vary_seed and options.repeats < 2:
        raise click.UsageError("--vary-seed goes with --repeats N (N ≥ 2)")
    if options.cooldown and options.repeats < 2 and not points.is_sweep:
        raise click.UsageError("--cooldown goes with a sweep (!expand) or --repeats N")
    if options.repeats > 1:
        if options.ray is not None or any(
            getattr(p.scenario.runtime, "distributed", None) is not None for p in points.points
        ):
            raise click.UsageError(
                "--repeats runs on this host only; drop --ray (or runtime.distributed)"
            )
        from veeksha.experiment.repeats import with_repeats

        repeats = {
            "count": options.repeats,
            "confidence": options.confidence,
            "vary_seed": options.vary_seed,
        }
        repeated = with_repeats(points, options.repeats, options.vary_seed)
        _run_sweep(ctx, repeated, overrides, options, repeats=repeats)
        return
    if points.is_sweep:
        if options.ray is not None:
            raise click.UsageError("--ray runs one scenario, not a sweep")
        _run_sweep(ctx, points, overrides, options)
        return
    scenario = points.points[0].scenario
    if options.output_dir is not None:
        scenario = scenario.model_copy(update={"output_dir": str(options.output_dir)})
    if options.ray is not None or getattr(scenario.runtime, "distributed", None) is not None:
        _run_distributed(ctx, scenario, options)
        return
    from veeksha.engine.launch import launch_helpers

    # The built-in simulator, the workers and the server watch: forked from this process once
    # it has imported what they need (none then pays for an interpreter and its imports), or
    # fresh interpreters where it cannot fork (veeksha.forked); they get their settings once
    # the target is known, and start serving while this process imports the engine.
    helpers = launch_helpers(scenario, options.dry_run)
    try:
        # A bad trace: exit 2 before any folder exists. A trace's first read (its conversion
        # to the Parquet cache, seconds for millions of rows, mostly in Arrow's C++ without the
        # GIL) runs on a thread while this one imports the rest of the engine. What the thread
        # imports is imported here first: two threads importing the same modules at once may
        # see each other's half-made modules. (After the forks: a process with two threads
        # does not fork, and Arrow may start one, its jemalloc's, if the environment says so.)
        if scenario.session_generator.type == "trace":
            import pyarrow.csv
            import pyarrow.parquet  # noqa: F401

            import veeksha.generate.traces  # noqa: F401
        checking = _Background(_check_trace, scenario)
        from veeksha.engine import run_benchmark

        checking.result()
        run_dir = create_run_folder(scenario.output_dir, scenario)
        _write_config_or_remove(run_dir, scenario)
        if not options.quiet:
            click.echo(f"run folder: {run_dir}")
        result = run_benchmark(
            scenario,
            run_dir,
            quiet=options.quiet,
            dry_run=options.dry_run,
            plots=options.plots,
            simulator=helpers.simulator,
            workers=helpers.workers,
            watch_process=helpers.watch,
        )
    finally:
        helpers.close()  # (what the run did not adopt or stop, if it failed before it did)
    if result != 0:
        ctx.exit(result)


def _write_config_or_remove(run_dir: Path, scenario: Scenario) -> None:
    """config.yaml into the new ``run_dir``; Ctrl-C meanwhile (nothing has run, the folder
    was not named yet) removes the folder instead of leaving it empty or half written."""
    from veeksha.record.run_folder import write_config

    try:
        write_config(run_dir, scenario)
    except KeyboardInterrupt:
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _run_distributed(ctx: click.Context, scenario: Scenario, options: RunOptions) -> None:
    """``--ray [ADDRESS]`` or ``runtime.distributed``: ``veeksha.distributed.driver``."""
    if options.dry_run:
        raise click.UsageError("--dry-run runs on this host only; drop --ray")
    from veeksha.distributed.driver import connect, run_distributed, settings_for
    from veeksha.record.run_folder import create_run_folder

    settings = settings_for(scenario, options.ray)
    assert settings is not None
    connect(settings.address)  # (Ray missing, or no cluster there: exit 2 before any folder)
    run_dir = create_run_folder(scenario.output_dir, scenario)
    _write_config_or_remove(run_dir, scenario)
    if not options.quiet:
        click.echo(f"run folder: {run_dir}")
    result = run_distributed(scenario, run_dir, settings, quiet=options.quiet, plots=options.plots)
    if result != 0:
        ctx.exit(result)


_ERROR = ": error: "  # (a sweep point's failure line goes to stderr)


def _run_sweep(
    ctx: click.Context,
    points: ScenarioSet,
    overrides: Sequence[str],
    options: RunOptions,
    sweep_dir: Path | None = None,
    repeats: dict[str, Any] | None = None,
) -> None:
    """Run (or, given ``sweep_dir``, resume) a sweep: ``veeksha.experiment.sweep``;
    ``repeats``: a run repeated (``--repeats``), its count and confidence."""
    from veeksha.engine.target import resolved_headers
    from veeksha.experiment.sweep import create_sweep, read_manifest, run_sweep

    for point in points.points:
        _check_trace(point.scenario)  # a bad trace: exit 2 before any folder exists
        resolved_headers(point.scenario)  # an unset ${NAME} too, not at each point's start
    if sweep_dir is None:
        base = options.output_dir or Path(points.points[0].scenario.output_dir)
        sweep_dir = create_sweep(points, base, overrides, repeats=repeats)
    if not options.quiet:
        click.echo(f"sweep folder: {sweep_dir} ({counted(len(points.points), 'point')})")
    result = run_sweep(
        sweep_dir,
        points,
        quiet=options.quiet,
        plots=options.plots,
        dry_run=options.dry_run,
        echo=lambda line: click.echo(
            line, err=line.startswith("sweep interrupted") or _ERROR in line
        ),
        cooldown_s=options.cooldown,
    )
    if not options.quiet and read_manifest(sweep_dir).get("repeats"):
        from rich.console import Console

        from veeksha.experiment.repeats import REPEATS_FILE, read_repeats, render_repeats

        render_repeats(Console(), read_repeats(sweep_dir))
        click.echo(f"wrote {sweep_dir / REPEATS_FILE}")
    if result.exit_code != 0:
        ctx.exit(result.exit_code)


@dataclass(frozen=True)
class RunOptions:
    """Switches of `run` and `benchmark` that are not scenario keys."""

    output_dir: Path | None = None
    quiet: bool = False
    dry_run: bool = False
    plots: bool = True
    ray: str | None = None  # --ray [ADDRESS]: a distributed run (docs/distributed.md)
    repeats: int = 1  # --repeats N: each scenario N times (veeksha.experiment.repeats)
    confidence: float = 0.95  # --confidence: of the repeats' intervals
    vary_seed: bool = False  # --vary-seed: repeat k with seed + k - 1
    cooldown: float = 0.0  # --cooldown: seconds between the runs of a sweep or of --repeats


def _run_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options `run` and `benchmark` share, handed to ``func`` as ``options: RunOptions``."""

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        output_dir: Path | None,
        quiet: bool,
        dry_run: bool,
        no_plots: bool,
        ray: str | None,
        repeats: int,
        confidence: float,
        vary_seed: bool,
        cooldown: float,
        **kwargs: Any,
    ) -> Any:
        options = RunOptions(
            output_dir,
            quiet,
            dry_run,
            plots=not no_plots,
            ray=ray,
            repeats=repeats,
            confidence=confidence,
            vary_seed=vary_seed,
            cooldown=cooldown,
        )
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
        click.option(
            "--ray",
            is_flag=False,
            flag_value="auto",
            default=None,
            metavar="[ADDRESS]",
            help="Run on a Ray cluster: auto (default), HOST:PORT, or local (one started for "
            "the run). Needs pip install 'veeksha[ray]' (docs/distributed.md).",
        ),
        click.option(
            "--repeats",
            type=click.IntRange(min=1, max=1000),
            default=1,
            show_default=True,
            metavar="N",
            help="Run the scenario (each point of a sweep) N times, same seed, and report how "
            "much each metric varies: mean, confidence interval, CV (docs/experiments.md).",
        ),
        click.option(
            "--confidence",
            type=click.FloatRange(min=0.5, max=0.9999),
            default=0.95,
            show_default=True,
            help="Confidence of the --repeats intervals.",
        ),
        click.option(
            "--vary-seed",
            is_flag=True,
            help="With --repeats: repeat k runs with seed + k - 1 (other prompts, which a "
            "server's prefix cache has not seen in the repeat before).",
        ),
        click.option(
            "--cooldown",
            type=click.FloatRange(min=0, max=86_400),
            default=0.0,
            metavar="SECONDS",
            help="Wait this long between the runs of a sweep or of --repeats (the server's "
            "queue drains, its GPUs cool).",
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

    The files a scenario names are read and checked too: its trace (a bad row at its own
    file:line), a local tokenizer; a file that cannot be used at the key naming it. A sweep (a
    FILE with !expand tags) lists its points, one line each, and every point is checked. Exits
    0 when all are valid, 2 when any is not.
    """
    from veeksha.errors import ConfigurationError

    failed = False
    for path in files:
        try:
            if _is_capacity_search(path):
                _validate_capacity_search(path, overrides)
                continue
            points = _load_points(path, overrides)
            for point in points.points:
                for warning in _check_trace(point.scenario, load_tokenizers=True):
                    click.echo(f"warning: {path}: {warning}", err=True)
        except (ScenarioError, ConfigurationError) as exc:
            _report(exc)
            failed = True
        else:
            if not points.is_sweep:
                click.echo(f"{path}: ok")
                continue
            click.echo(f"{path}: ok, a sweep of {counted(len(points.points), 'point')}")
            for point in points.points:
                click.echo(f"  {point.index:3d}  {point.label}")
    if failed:
        raise click.exceptions.Exit(ScenarioError.exit_code)


_CAPACITY_SEARCH_KEY = re.compile(r"^(benchmark_config|capacity_search_config)\s*:", re.MULTILINE)


def _is_capacity_search(path: Path) -> bool:
    """Whether ``path`` is a capacity search file (``veeksha capacity-search``), not a scenario."""
    try:
        return bool(_CAPACITY_SEARCH_KEY.search(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError):
        return False  # the scenario loader reports it


def _validate_capacity_search(path: Path, overrides: Sequence[str]) -> None:
    from veeksha.experiment.capacity.config import load_capacity_config

    config = load_capacity_config(path, overrides=overrides)
    _check_trace(config.scenario, load_tokenizers=True)
    click.echo(
        f"{path}: ok, a capacity search of {config.knob.title} from {config.start_value:g} "
        f"to {config.max_value:g}"
    )


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
@click.option(
    "--resume",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    metavar="SWEEP_DIR",
    help="Resume an interrupted sweep: run its points that are not complete (no FILE).",
)
@_run_options
@click.pass_context
def run(
    ctx: click.Context,
    args: tuple[str, ...],
    overrides: tuple[str, ...],
    resume: Path | None,
    options: RunOptions,
) -> None:
    """Run the benchmark described by scenario FILE.

    Creates <output_dir>/<UTC time>-<scenario hash>/ holding config.yaml (the resolved scenario,
    secrets redacted) and the results. Keys can also be overridden veeksha-style:
    --traffic_scheduler.interval_generator.arrival_rate 20. A FILE with !expand tags is a
    sweep: one run per point in <output_dir>/sweep-<UTC time>-<hash>/ (docs/experiments.md).
    """
    from veeksha.scenario.loader import extra_args_to_overrides

    positional, extra = _split_run_args(args)
    if resume is not None:
        if positional or options.output_dir is not None:
            raise click.UsageError(
                "--resume SWEEP_DIR takes no FILE and no --output-dir (the sweep holds its own)"
            )
        from veeksha.experiment.sweep import load_sweep

        all_overrides = [*overrides, *extra_args_to_overrides(extra)]
        gc.disable()
        points = load_sweep(resume, all_overrides)
        _run_sweep(ctx, points, all_overrides, options, sweep_dir=resume)
        return
    if len(positional) != 1:
        got = " ".join(positional) or "none"
        hint = next(
            (
                f" (--set takes KEY.PATH=VALUE: --set {key}={value})"
                for key, value in zip(
                    [o for o in overrides if "=" not in o], positional[1:], strict=False
                )
            ),
            "",
        )
        raise click.UsageError(f"expected one scenario FILE, got: {got}{hint}")
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
    entry()
