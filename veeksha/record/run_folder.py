"""The run folder: one new directory per run, holding the resolved config and every output.

``<output_dir>/<UTC start, YYYYmmddTHHMMSSZ>-<scenario hash>/``, e.g.
``benchmark_output/20250101T120000Z-3f9a1c2b7d/``. Runs never overwrite each other: a second run of
the same scenario within the same second gets ``-2``, ``-3``... appended.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from veeksha.errors import ConfigurationError
from veeksha.scenario.loader import dump_resolved_yaml, scenario_hash
from veeksha.scenario.models import Scenario
from veeksha.scenario.session_generators import TraceSessionGenerator

__all__ = ["CONFIG_FILE", "create_run_folder", "run_folder_name", "write_config"]

CONFIG_FILE = "config.yaml"
_MAX_SUFFIX = 1000


def run_folder_name(scenario: Scenario, now: dt.datetime | None = None) -> str:
    """``<UTC timestamp>-<scenario hash>`` for a run starting at ``now`` (default: the clock)."""
    moment = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return f"{moment:%Y%m%dT%H%M%SZ}-{scenario_hash(scenario)}"


def create_run_folder(
    output_dir: str | Path, scenario: Scenario, now: dt.datetime | None = None
) -> Path:
    """Create and return a new, empty run folder below ``output_dir`` (created if needed).

    Raises :class:`ConfigurationError` naming the folder when it cannot be created.
    """
    base = Path(output_dir)
    name = run_folder_name(scenario, now)
    try:
        base.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _MAX_SUFFIX + 1):
            candidate = base / (name if attempt == 1 else f"{name}-{attempt}")
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            return candidate
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigurationError(
            f"cannot create a run folder in {str(base)!r}: {reason}; choose a writable folder "
            "with --output-dir DIR (or output_dir: in the scenario)"
        ) from None
    raise ConfigurationError(
        f"too many runs named {name!r} in {str(base)!r}; remove some or choose another --output-dir"
    )


def write_config(run_dir: str | Path, scenario: Scenario) -> Path:
    """Write the fully resolved scenario (secrets redacted) to ``<run_dir>/config.yaml``. A
    trace's path is written absolute: ``veeksha report`` reads the trace again from anywhere."""
    path = Path(run_dir) / CONFIG_FILE
    generator = scenario.session_generator
    if isinstance(generator, TraceSessionGenerator):
        absolute = str(Path(generator.trace_file).absolute())
        generator = generator.model_copy(update={"trace_file": absolute})
        scenario = scenario.model_copy(update={"session_generator": generator})
    try:
        path.write_text(dump_resolved_yaml(scenario), encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot write {str(path)!r}: {exc.strerror or exc}; check the folder's permissions"
        ) from None
    return path
