"""The points of a microbenchmark: one normal run each, started through ``run_point``.

A point is a closed loop of single-request sessions, ``concurrency`` at a time (concurrent
scheduler, no ramp-up: the first ``concurrency`` start together, each later one when one ends),
``sessions`` in all (after ``warmup_sessions`` untracked ones), each a prompt of exactly
``input_length`` tokens asking for exactly ``output_length`` tokens (``ignore_eos``). A timed
point (``duration_s``, ``veeksha stress``) starts sessions for ``warmup_s`` untracked seconds and
then ``duration_s`` measured ones, with no session count; with ``rate`` set its sessions arrive
open-loop, Poisson at ``rate`` per second, instead of the closed loop.
Point ``index`` uses seed ``seed + index``, so no two points send the same prompts (a server's
prefix cache finds nothing to reuse across points; within a point the prompts already differ).

The points run one after the other against one server (``shared_simulator``); each leaves a run
folder below ``<result folder>/points/`` that ``veeksha report`` reads like any other, and the
microbenchmark reads its requests.parquet afterwards.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from veeksha.errors import ConfigurationError, RunAbortedError
from veeksha.experiment.microbench.config import BenchConfig
from veeksha.experiment.point import PointResult, run_point
from veeksha.experiment.shared_server import SharedServer, aim_at, shared_simulator
from veeksha.plural import counted
from veeksha.record.parquet import read_table
from veeksha.scenario.models import Scenario

__all__ = [
    "PointSpec",
    "load_rows",
    "point_scenario",
    "result_folder",
    "run_points",
    "serving",
]

#: the points' generator-saturation limit (p99 of sent - ready), ms
DISPATCH_LAG_LIMIT_MS = 100.0

#: columns of requests.parquet the microbenchmarks read
ROW_COLUMNS = [
    "phase",
    "request_id",
    "status",
    "sent_at",
    "first_chunk_at",
    "completed_at",
    "chunk_times",
    "ttfc",
    "target_prompt_tokens",
    "prompt_tokens_total",
    "cached_tokens",
    "output_tokens",
    "requested_output_tokens",
    "ready_at",
    "e2e",
    "tpot",
]


@dataclass(frozen=True)
class PointSpec:
    """One point: its sessions, how many run at once, their prompt and output lengths."""

    index: int
    input_length: int
    output_length: int
    concurrency: int
    sessions: int
    warmup_sessions: int = 0
    rate: float | None = None
    duration_s: float | None = None
    warmup_s: float = 0.0
    image_side: int | None = None  # each request also carries one image of this side (pixels)


def point_scenario(config: BenchConfig, spec: PointSpec) -> Scenario:
    """The scenario of one point (validated like any scenario file)."""
    total = spec.sessions + spec.warmup_sessions
    traffic: dict[str, Any] = {
        "type": "concurrent",
        "target_concurrent_sessions": spec.concurrency,
        "rampup_seconds": 0,
    }
    if spec.rate is not None:
        traffic = {
            "type": "rate",
            "interval_generator": {"type": "poisson", "arrival_rate": spec.rate},
        }
    runtime: dict[str, Any] = {
        "max_sessions": spec.sessions,
        "warmup_sessions": spec.warmup_sessions,
        "benchmark_timeout": config.request_timeout * total + 60,
        "num_workers": config.num_workers,
    }
    if spec.duration_s is not None:
        runtime |= {
            "max_sessions": -1,
            "warmup_seconds": spec.warmup_s,
            "benchmark_timeout": spec.duration_s,
        }
    data: dict[str, Any] = {
        "seed": config.seed + spec.index,
        "traffic_scheduler": traffic,
        "session_generator": {
            "type": "synthetic",
            "session_graph": {"type": "single_request"},
            "channels": [
                {
                    "type": "text",
                    "body_length_generator": {"type": "fixed", "value": spec.input_length},
                }
            ],
            "output_spec": {
                "text": {"output_length_generator": {"type": "fixed", "value": spec.output_length}}
            },
        },
        "client": {
            "type": config.client_type,
            "tokenizer": {"type": config.tokenizer},
            "api_base": config.api_base,
            "model": config.model,
            "request_timeout": config.request_timeout,
            "ignore_eos": True,
            # (as given: each point's run reads ${NAME} when it starts, and its config.yaml
            # keeps the name, not the value; load_config checked that every one is set)
            "headers": dict(config.headers),
        },
        "runtime": runtime,
        "trace_recorder": {"enabled": False},
        # one-at-a-time and all-at-once points on a shared machine: a late send only delays
        # the next request (TTFC and TBC count from the send), so only a gross lag fails
        "health_checks": {"max_dispatch_lag_p99_ms": DISPATCH_LAG_LIMIT_MS},
        "simulator": config.simulator.model_dump(),
    }
    if spec.image_side is not None:
        side = {"type": "fixed", "value": spec.image_side}
        data["session_generator"]["channels"].append(
            {
                "type": "image",
                "count_generator": {"type": "fixed", "value": 1},
                "width_generator": side,
                "height_generator": side,
            }
        )
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:  # a combination of keys no scenario allows
        problems = "; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors())
        raise ConfigurationError(f"point {spec.index + 1}: {problems}") from None


def result_folder(output_dir: str, name: str, now: dt.datetime | None = None) -> Path:
    """A new folder ``<output_dir>/<UTC time>-<name>/`` (``-2``, ``-3``... when taken)."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
    base = Path(output_dir)
    try:
        base.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 100):
            candidate = base / (f"{stamp}-{name}" + ("" if attempt == 1 else f"-{attempt}"))
            try:
                candidate.mkdir()
            except FileExistsError:
                continue
            return candidate
    except OSError as exc:
        raise ConfigurationError(
            f"cannot create a result folder in {str(base)!r}: {exc.strerror or exc}; choose a "
            "writable folder with --output_dir DIR"
        ) from None
    raise ConfigurationError(
        f"too many {name} results in {str(base)!r}; choose another --output_dir"
    )


@contextmanager
def serving(
    config: BenchConfig,
    first: PointSpec,
    name: str,
    echo: Callable[[str], None],
    total: int | None = None,
) -> Iterator[tuple[Path, SharedServer, Callable[[PointSpec], PointResult]]]:
    """Start (or check) the server with the scenario of ``first``, make the result folder, and
    yield it, the server and a function running one point against that server (in its own
    run folder below ``<folder>/points/``). Nothing is made when the server cannot be used
    (``TargetError``, exit 2); an interrupted point stops the series (``RunAbortedError``, the
    points so far kept on disk)."""
    from veeksha.engine.target import client_api_base
    from veeksha.scenario.clients import DEFAULT_KEY_ENV

    assert config.output_dir is not None
    config.resolved_headers()  # an unset ${NAME}: exit 2 at its key, before anything starts
    scenario = point_scenario(config, first)
    # a bad OPENAI_API_BASE stops here, its message in this command's words (the key goes in
    # OPENAI_API_KEY: a microbenchmark has no api_key_env)
    client_api_base(scenario.client, DEFAULT_KEY_ENV)
    with shared_simulator(scenario) as (aimed, server):
        # (the built-in simulator too: one with required_headers refuses a run without them)
        _check_endpoint(aimed, config, echo)
        folder = result_folder(config.output_dir, name)

        def run(spec: PointSpec) -> PointResult:
            scenario = aim_at(point_scenario(config, spec), server)
            result = run_point(scenario, folder / "points", plots=config.point_plots)
            of = f"/{total}" if total else ""
            echo(f"  point {spec.index + 1}{of}: {result.run_dir.name}")
            if result.interrupted:
                raise RunAbortedError(f"interrupted; the points so far are in {folder}")
            return result

        try:
            yield folder, server, run
        except KeyboardInterrupt:  # (between points, or in a point's set-up: said alike)
            raise RunAbortedError(f"interrupted; the points so far are in {folder}") from None


def run_points(
    config: BenchConfig,
    specs: Sequence[PointSpec],
    name: str,
    echo: Callable[[str], None],
) -> tuple[Path, SharedServer, list[tuple[PointSpec, PointResult]]]:
    """Run every point of ``specs`` in order against one server (:func:`serving`); the result
    folder, the server and each point's result."""
    for spec in specs:  # every point's scenario is valid before anything starts
        point_scenario(config, spec)
    with serving(config, specs[0], name, echo, len(specs)) as (folder, server, run):
        echo(f"{name}: {counted(len(specs), 'point')} -> {folder}")
        done = [(spec, run(spec)) for spec in specs]
    return folder, server, done


def _check_endpoint(scenario: Scenario, config: BenchConfig, echo: Callable[[str], None]) -> None:
    """The endpoint answers and serves the model (after ``--ready_timeout``'s wait, if any):
    else exit 2 before any folder exists, the fix naming the flags (``--api_base``,
    ``--model``), not the points' scenario keys."""
    from veeksha.dispatch.settings import resolve_api_key
    from veeksha.engine.target import (
        SettingNames,
        check_reachable,
        client_api_base,
        trial_request,
        wait_until_ready,
    )
    from veeksha.scenario.clients import DEFAULT_KEY_ENV

    client = scenario.client
    api_base = client_api_base(client)
    assert api_base is not None
    where = "--api_base" if config.api_base else "OPENAI_API_BASE"
    names = SettingNames(where, "--model", f"{DEFAULT_KEY_ENV} to", "--headers", "--ready_timeout")
    headers = config.resolved_headers()
    api_key = resolve_api_key(client)
    if config.ready_timeout > 0:
        trial = trial_request(client, client.model or "")
        wait = config.ready_timeout
        wait_until_ready(api_base, api_key, wait, "--ready_timeout", headers, echo, trial)
    check_reachable(api_base, api_key, model=client.model, names=names, headers=headers)


def load_rows(run_dir: Path, *, warmup: bool = False) -> pd.DataFrame:
    """The measured rows of a point's requests.parquet (warmup rows too with ``warmup``)."""
    path = run_dir / "requests.parquet"
    try:
        # (in this thread alone: the next point's helpers are forked from this process)
        rows = read_table(path, columns=ROW_COLUMNS).to_pandas(use_threads=False)
    except (OSError, ValueError, KeyError) as exc:  # (KeyError: a column the file lacks)
        raise RunAbortedError(f"point {run_dir} left no readable requests.parquet: {exc}") from None
    if warmup:
        return rows
    return rows[rows["phase"] == "measured"].reset_index(drop=True)
