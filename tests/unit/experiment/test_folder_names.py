"""Result folders named to the second never collide: a run, a sweep, a capacity search and a
microbenchmark started in the same second into the same output_dir (a script starting two, CI)
each get a new folder of their own (``-2``, ``-3``...), made with an exclusive mkdir, so two
processes racing for one name cannot both take it."""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from veeksha.experiment.capacity.config import load_capacity_config
from veeksha.experiment.capacity.runner import _create_folder
from veeksha.experiment.microbench.points import result_folder
from veeksha.experiment.sweep import create_sweep
from veeksha.record.run_folder import create_run_folder
from veeksha.scenario.loader import load_points_text, load_scenario_text

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
STAMP = "20260102T030405Z"


def _namer(tmp_path: Path, kind: str) -> Callable[[], Path]:
    """What makes a folder of ``kind`` in ``<tmp_path>/out``, at ``NOW``."""
    out = tmp_path / "out"
    if kind == "run":
        scenario = load_scenario_text("seed: 3\n", "s.yaml")
        return lambda: create_run_folder(out, scenario, NOW)
    if kind == "sweep":
        sweep = load_points_text("seed: !expand [1, 2]\n", "sweep.yaml")
        return lambda: create_sweep(sweep, out, now=NOW)
    if kind == "capacity":
        search = tmp_path / "search.yaml"
        search.write_text(
            textwrap.dedent(f"""\
                output_dir: {out}
                start_value: 1
                max_value: 4
                benchmark_config:
                  traffic_scheduler: {{type: concurrent, rampup_seconds: 0}}
                  evaluators: [{{slos: [{{name: p90, metric: ttfc, percentile: 0.9, value: 1}}]}}]
                """),
            encoding="utf-8",
        )
        capacity = load_capacity_config(search)
        return lambda: _create_folder(capacity, NOW)
    return lambda: result_folder(str(out), "prefill", NOW)


@pytest.mark.parametrize("kind", ["run", "sweep", "capacity", "microbench"])
def test_the_same_second_gives_a_new_folder_with_a_suffix(tmp_path: Path, kind: str) -> None:
    make = _namer(tmp_path, kind)
    first, second, third = make(), make(), make()
    assert STAMP in first.name
    assert (second.name, third.name) == (f"{first.name}-2", f"{first.name}-3")
    assert len({first, second, third}) == 3
    assert all(folder.is_dir() and folder.parent == tmp_path / "out" for folder in (first, second))


@pytest.mark.parametrize("kind", ["run", "sweep", "capacity", "microbench"])
def test_starts_racing_for_one_name_each_get_their_own(tmp_path: Path, kind: str) -> None:
    make = _namer(tmp_path, kind)
    with ThreadPoolExecutor(8) as pool:
        folders = list(pool.map(lambda _: make(), range(8)))
    assert len(set(folders)) == 8
    names = sorted(folder.name for folder in folders)
    base = min(names, key=len)
    assert set(names) == {base, *(f"{base}-{n}" for n in range(2, 9))}
