"""A sweep: one normal run per point of a scenario file with ``!expand`` tags.

``veeksha run FILE`` on a sweep writes ``<output_dir>/sweep-<UTC time>-<hash>/``::

    sweep.yaml        the file as composed (includes spliced, !expand tags kept, secrets redacted)
    sweep.json        the manifest: swept keys, overrides, every point (index, values, folder)
    000-arrival_rate=4/   one normal run folder per point (config.yaml, summary.json, ...),
    001-arrival_rate=8/   plus point.json (its index, label and swept values)
    sweep.parquet     one row per point (``veeksha.experiment.sweep_table``)
    plots/            latency-throughput curves (``veeksha.experiment.sweep_plots``)

Points run one after the other through :func:`veeksha.experiment.point.run_point`, in the order of
``veeksha.scenario.tags``. Ctrl-C (SIGINT or SIGTERM) stops the point in progress the way a run
stops (what it collected is written and evaluated), runs no further point and writes the table of
what exists. ``veeksha run --resume SWEEP_DIR`` runs again the points that are not complete (a
point is complete when its folder holds a summary.json of a run that was not interrupted); an
incomplete point's old folder is kept under ``superseded/``.

The exit code of a sweep is the most severe of its points' exit codes, severity in the order
1, 2, 3, 4, 5 (``veeksha.evaluate.exit_codes``); 3 when the sweep was interrupted.

Managed servers: consecutive points whose managed servers are the same (``server_identity``) form
one group (:func:`point_groups`) and share one server lifecycle (:func:`group_context`): started
before the group's first point, logging into the sweep folder's ``server-N.log`` (N: the group's
first point), stopped after its last.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veeksha.errors import ConfigurationError, VeekshaError
from veeksha.evaluate.exit_codes import ExitCode
from veeksha.experiment.point import read_summary, run_point

if TYPE_CHECKING:  # (the scenario models are built only by what runs or loads points)
    from veeksha.scenario.loader import ScenarioSet, SweepPoint
    from veeksha.server.managed import ManagedServer

__all__ = [
    "MANIFEST_FILE",
    "POINT_FILE",
    "SOURCE_FILE",
    "SweepRun",
    "create_sweep",
    "group_context",
    "is_complete",
    "is_sweep_dir",
    "load_sweep",
    "point_groups",
    "read_manifest",
    "run_sweep",
    "sweep_exit_code",
]

SOURCE_FILE = "sweep.yaml"
MANIFEST_FILE = "sweep.json"
POINT_FILE = "point.json"
SUPERSEDED_DIR = "superseded"
REDACTED = "***"  # (as veeksha.scenario.loader.REDACTED)
_SECRET_OVERRIDES = ("client.api_key",)
_SEVERITY = (
    ExitCode.INTERNAL_ERROR,
    ExitCode.CONFIG_ERROR,
    ExitCode.RUN_ABORTED,
    ExitCode.HEALTH_FAILED,
    ExitCode.SLO_UNMET,
)


def _folder_part(text: str, limit: int = 100) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._=,+-]", "_", text)
    return cleaned[:limit]


def point_folder(point: SweepPoint) -> str:
    """``000-arrival_rate=4``: the index, then the swept values (file-name safe)."""
    return f"{point.index:03d}-{_folder_part(point.label)}" if point.label else f"{point.index:03d}"


def _redacted_overrides(overrides: Sequence[str]) -> list[str]:
    out = []
    for text in overrides:
        key = text.partition("=")[0].strip()
        secret = key in _SECRET_OVERRIDES or ".headers" in key  # (any header may be a credential)
        out.append(f"{key}={REDACTED}" if secret else text)
    return out


def create_sweep(
    points: ScenarioSet,
    output_dir: str | Path,
    overrides: Sequence[str] = (),
    now: dt.datetime | None = None,
    repeats: Mapping[str, Any] | None = None,
) -> Path:
    """Create ``<output_dir>/sweep-<UTC time>-<hash>/`` with sweep.yaml and sweep.json;
    ``repeats`` (``{count, confidence}``: ``points`` are ``with_repeats``'s) in sweep.json."""
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    shown = _redacted_overrides(overrides)
    digest = hashlib.sha256("\n".join([points.source_yaml, *shown]).encode()).hexdigest()[:10]
    base = Path(output_dir)
    name = f"sweep-{moment:%Y%m%dT%H%M%SZ}-{digest}"
    try:
        base.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            sweep_dir = base / (name if attempt == 1 else f"{name}-{attempt}")
            try:
                sweep_dir.mkdir()
                break
            except FileExistsError:
                continue
        else:
            raise ConfigurationError(f"too many sweeps named {name!r} in {str(base)!r}")
        (sweep_dir / SOURCE_FILE).write_text(points.source_yaml, encoding="utf-8")
        manifest = {
            "schema_version": 1,
            "created": moment.isoformat(),
            "swept_keys": points.swept_keys,
            "short_names": points.short_names,
            "overrides": shown,
            "points": [
                {
                    "index": p.index,
                    "label": p.label,
                    "values": p.values,
                    "folder": point_folder(p),
                }
                for p in points.points
            ],
        }
        if repeats:
            manifest["repeats"] = dict(repeats)
        _write_json(sweep_dir / MANIFEST_FILE, manifest)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot create a sweep folder in {str(base)!r}: {exc.strerror or exc}; choose a "
            "writable folder with --output-dir DIR (or output_dir: in the scenario)"
        ) from None
    return sweep_dir


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def is_sweep_dir(path: str | Path) -> bool:
    """Whether ``path`` is a sweep folder (it holds sweep.json)."""
    return (Path(path) / MANIFEST_FILE).is_file()


def read_manifest(sweep_dir: str | Path) -> dict[str, Any]:
    """The sweep.json of a sweep folder; :class:`ConfigurationError` when it has none."""
    path = Path(sweep_dir) / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(
            f"{sweep_dir} is not a sweep folder ({MANIFEST_FILE}: {exc}); pass the folder "
            "`veeksha run` made for a sweep (sweep-<time>-<hash>)"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise ConfigurationError(f"{path} is not a sweep manifest (no 'points' list)")
    return data


def load_sweep(sweep_dir: str | Path, overrides: Sequence[str] = ()) -> ScenarioSet:
    """The points of an existing sweep, from its sweep.yaml and the overrides it was started
    with (then ``overrides``: secrets, which sweep.json never holds, can be given again)."""
    from veeksha.scenario.loader import load_points_text

    manifest = read_manifest(sweep_dir)
    source = Path(sweep_dir) / SOURCE_FILE
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read {source}: {exc.strerror or exc}") from None
    stored = [o for o in manifest.get("overrides", []) if not o.endswith(f"={REDACTED}")]
    points = load_points_text(text, str(source), [*stored, *overrides])
    repeats = manifest.get("repeats")
    if isinstance(repeats, dict):  # (a repeated run: its points, each that many times)
        from veeksha.experiment.repeats import with_repeats

        points = with_repeats(
            points, int(repeats.get("count", 1)), bool(repeats.get("vary_seed", False))
        )
    expected = [p.get("folder") for p in manifest["points"]]
    if [point_folder(p) for p in points.points] != expected:
        raise ConfigurationError(
            f"{source} no longer makes the points of {MANIFEST_FILE}; was it edited?"
        )
    return points


def is_complete(run_dir: str | Path) -> bool:
    """A point is complete when its folder holds a summary.json of a run not interrupted."""
    summary = read_summary(run_dir)
    run = summary.get("run") if isinstance(summary.get("run"), dict) else None
    return run is not None and not run.get("interrupted")


def point_groups(points: Sequence[SweepPoint]) -> list[list[SweepPoint]]:
    """Consecutive points whose managed servers are the same (``server_identity``: the resolved
    ``server`` section and, for the simulator, its settings): one server lifecycle per group.
    Without a ``server`` section, one group."""
    from veeksha.server.managed import server_identity

    groups: list[list[SweepPoint]] = []
    last: str | None = None
    for point in points:
        key = server_identity(point.scenario)
        if not groups or key != last:
            groups.append([])
        groups[-1].append(point)
        last = key
    return groups


@contextlib.contextmanager
def group_context(
    points: Sequence[SweepPoint], log_path: Path, *, start: bool = True
) -> Iterator[ManagedServer | None]:
    """The managed server of one group of points (None without a ``server`` section, or when
    ``start`` is false: a dry run, or every point of the group is complete): started before
    the group's first point, logging into ``log_path``, stopped after its last point, also on
    Ctrl-C and errors."""
    from veeksha.server.managed import ManagedServer

    scenario = points[0].scenario
    if scenario.server is None or not start:
        yield None
        return
    with ManagedServer.for_scenario(scenario, log_path) as server:
        yield server


def sweep_exit_code(codes: Sequence[int | None], interrupted: bool) -> int:
    """The most severe of the points' exit codes (order 1, 2, 3, 4, 5); 3 when interrupted."""
    present = {c for c in codes if c is not None}
    if interrupted:
        present.add(ExitCode.RUN_ABORTED)
    for code in _SEVERITY:
        if code in present:
            return int(code)
    return int(ExitCode.OK)


@dataclass
class SweepRun:
    """How a sweep ended: its folder, exit code, and whether Ctrl-C stopped it."""

    sweep_dir: Path
    exit_code: int
    interrupted: bool


def _supersede(run_dir: Path) -> None:
    """Move an incomplete point's folder under superseded/ (nothing recorded is deleted)."""
    if not run_dir.exists():
        return
    holder = run_dir.parent / SUPERSEDED_DIR
    holder.mkdir(exist_ok=True)
    for attempt in range(1, 1000):
        target = holder / f"{run_dir.name}-{attempt}"
        if not target.exists():
            shutil.move(str(run_dir), str(target))
            return


def _resume_hint(sweep_dir: Path) -> str:
    return f"resume with: veeksha run --resume {sweep_dir}"


def _stopped_by_signal(summary: dict[str, Any], interrupted: bool) -> bool:
    run = summary.get("run") if isinstance(summary.get("run"), dict) else {}
    return bool(interrupted) and (not run or run.get("stop_reason") == "interrupted")


def run_sweep(
    sweep_dir: Path,
    points: ScenarioSet,
    *,
    quiet: bool = False,
    plots: bool = True,
    dry_run: bool = False,
    echo: Callable[[str], None] = print,
    cooldown_s: float = 0.0,
) -> SweepRun:
    """Run every point of ``points`` that is not complete in ``sweep_dir``, then write the
    table and plots; returns the sweep's exit code. ``cooldown_s``: seconds of nothing between
    two points run (``--cooldown``: the server settles; Ctrl-C during it stops the sweep)."""
    from veeksha.experiment.sweep_table import write_outputs

    interrupted = False
    total = len(points.points)
    ran = False
    try:
        for group in point_groups(points.points):
            todo = not all(is_complete(sweep_dir / point_folder(p)) for p in group)
            log = sweep_dir / f"server-{group[0].index + 1}.log"
            with contextlib.ExitStack() as stack:
                server, failure = None, None
                try:
                    server = stack.enter_context(
                        group_context(group, log, start=todo and not dry_run)
                    )
                except VeekshaError as exc:  # recorded as each point's error, like a point's own
                    failure = exc
                for point in group:
                    run_dir = sweep_dir / point_folder(point)
                    if is_complete(run_dir):
                        if not quiet:
                            echo(f"[{point.index + 1}/{total}] {run_dir.name}: complete, kept")
                        continue
                    _supersede(run_dir)
                    if ran and cooldown_s > 0:
                        if not quiet:
                            echo(f"cooling down {cooldown_s:g} s before {run_dir.name}")
                        time.sleep(cooldown_s)
                    ran = True
                    if _run_one(
                        sweep_dir,
                        run_dir,
                        point,
                        total,
                        quiet,
                        plots,
                        dry_run,
                        echo,
                        server,
                        failure,
                    ):
                        interrupted = True
                        break
            if interrupted:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:

        def plot_failed(error: Exception) -> None:
            # (a second Ctrl-C can leave matplotlib half imported: the table is what matters)
            echo(f"sweep plots not drawn: {error!r}; `veeksha report {sweep_dir}` draws them")

        try:
            table = write_outputs(sweep_dir, plots=plots, plot_failed=plot_failed)
        except KeyboardInterrupt:  # (a second Ctrl-C, or the first, while the table is written)
            # the sweep did not finish: resuming runs what is left and writes the table again
            echo(f"sweep interrupted while writing its table; {_resume_hint(sweep_dir)}")
            raise
    if interrupted:
        echo(f"sweep interrupted; {_resume_hint(sweep_dir)}")
    codes = [int(c) for c in table["exit_code"].dropna().tolist()]
    code = sweep_exit_code(codes, interrupted)
    return SweepRun(sweep_dir, code, interrupted)


def _run_one(
    sweep_dir: Path,
    run_dir: Path,
    point: SweepPoint,
    total: int,
    quiet: bool,
    plots: bool,
    dry_run: bool,
    echo: Callable[[str], None],
    server: ManagedServer | None = None,
    failure: VeekshaError | None = None,
) -> bool:
    """Run one point into ``run_dir`` (with its group's managed server; ``failure``: why that
    server could not start, the point's error); print its progress line. True when Ctrl-C
    stopped it."""
    from veeksha.experiment.sweep_table import progress_line

    scenario = point.scenario.model_copy(update={"output_dir": str(sweep_dir)})
    started = time.monotonic()
    run_dir.mkdir(parents=True)
    info: dict[str, Any] = {"index": point.index, "label": point.label, "values": point.values}
    _write_json(run_dir / POINT_FILE, info)
    try:
        if failure is not None:
            raise failure
        result = run_point(
            scenario, run_dir=run_dir, quiet=True, plots=plots, dry_run=dry_run, server=server
        )
    except VeekshaError as exc:
        info.update(error=str(exc), exit_code=exc.exit_code)
        _write_json(run_dir / POINT_FILE, info)
        echo(f"[{point.index + 1}/{total}] {run_dir.name}: error: {exc}")
        return False
    info["exit_code"] = result.exit_code
    _write_json(run_dir / POINT_FILE, info)
    if not quiet:
        elapsed = time.monotonic() - started
        echo(f"[{point.index + 1}/{total}] {progress_line(run_dir.name, result.summary, elapsed)}")
    return _stopped_by_signal(result.summary, result.interrupted)
