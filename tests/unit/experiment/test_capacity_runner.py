"""A whole search over a fake server (no run, no simulator): what capacity.json and the printed
lines say when the search is interrupted, when requests fail, and when the first value already
fails."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np

from veeksha.errors import RunAbortedError
from veeksha.experiment.capacity.config import CapacityConfig, load_capacity_config
from veeksha.experiment.capacity.measure import ProbeRun, RunRequest
from veeksha.experiment.capacity.runner import CAPACITY_FILE, CapacityResult, _amount, _probe_all

SEARCH = """\
output_dir: {out}
start_value: {start}
max_value: 16
precision: 0
benchmark_config:
  traffic_scheduler: {{type: concurrent, rampup_seconds: 0}}
  runtime: {{max_sessions: 100, benchmark_timeout: 10}}
  evaluators: [{{slos: [{{name: p90 TTFC, metric: ttfc, percentile: 0.9, value: 0.1}}]}}]
"""


def config(tmp_path: Path, start: int = 1) -> CapacityConfig:
    path = tmp_path / "search.yaml"
    path.write_text(textwrap.dedent(SEARCH.format(out=tmp_path, start=start)), encoding="utf-8")
    return load_capacity_config(path)


class FakeServer:
    """A server whose p90 TTFC holds up to ``capacity`` (100 requests a run: 50 ms each below,
    200 ms above); ``failing(value)`` says at which values every request fails instead, and the
    run at ``stop_at`` is interrupted (Ctrl-C)."""

    server = None  # (no managed server)

    def __init__(
        self,
        capacity: float,
        stop_at: float | None = None,
        failing: Callable[[float], bool] = lambda _value: False,
    ) -> None:
        self.capacity = capacity
        self.stop_at = stop_at
        self.failing = failing

    def __call__(self, request: RunRequest) -> ProbeRun:
        if request.value == self.stop_at:
            raise RunAbortedError(f"interrupted during the probe at {request.value:g}")
        folder = Path(f"runs/run-{request.value:g}")
        if self.failing(request.value):
            return ProbeRun(request, folder, True, "health PASS", (np.full(100, np.inf),), 100, 100)
        latency = 0.05 if request.value <= self.capacity else 0.2
        return ProbeRun(request, folder, True, "health PASS", (np.full(100, latency),), 100, 0)


def search(config: CapacityConfig, server: FakeServer) -> tuple[CapacityResult, list[str]]:
    lines: list[str] = []
    folder = Path(config.output_dir) / "search"
    folder.mkdir()
    result = _probe_all(config, folder, lambda: None, server, {}, lines.append)  # type: ignore[arg-type]
    return result, "\n".join(lines).splitlines()


def test_an_interrupted_search_keeps_its_bracket_and_names_the_value_it_stopped_at(
    tmp_path: Path,
) -> None:
    # 1, 2, 4 pass, 8 and 6 fail, Ctrl-C during 5: the capacity is in [4, 6)
    result, lines = search(config(tmp_path), FakeServer(capacity=4, stop_at=5))
    assert result.exit_code == 3
    document = json.loads((result.folder / CAPACITY_FILE).read_text())
    assert [h["value"] for h in document["history"]] == [1, 2, 4, 8, 6]
    assert document["best_value"] == 4
    assert document["ceiling"] == {"value": 6, "verdict": "fail"}
    assert (document["interrupted"], document["interrupted_value"]) == (True, 5)
    assert not document["converged"]
    assert lines[-1] == (
        "capacity: 4 sessions; 6 is fail (interrupted while probing 5: the search did not finish)"
    )


def test_capacity_json_holds_the_bracket_while_the_search_runs(tmp_path: Path) -> None:
    seen: dict[float, dict[str, object]] = {}
    server = FakeServer(capacity=4)

    def watching(request: RunRequest) -> ProbeRun:
        path = tmp_path / "search" / CAPACITY_FILE
        if path.is_file():  # what a search killed (kill -9) before this probe would leave
            seen[request.value] = json.loads(path.read_text())
        return server(request)

    watching.server = None  # type: ignore[attr-defined]
    search(config(tmp_path), watching)  # type: ignore[arg-type]
    before_six = seen[6]  # written after 8 failed
    assert before_six["best_value"] == 4
    assert before_six["ceiling"] == {"value": 8, "verdict": "fail"}


def test_failed_requests_are_named_in_the_probe_line_the_conclusion_and_capacity_json(
    tmp_path: Path,
) -> None:
    # the server breaks from 6 on: every request an error (infinitely slow), not a latency
    result, lines = search(config(tmp_path), FakeServer(capacity=8, failing=lambda v: v >= 6))
    document = json.loads((result.folder / CAPACITY_FILE).read_text())
    entries = {h["value"]: h for h in document["history"]}
    assert (entries[4]["requests"], entries[4]["failed_requests"]) == (100, 0)
    assert (entries[6]["requests"], entries[6]["failed_requests"]) == (100, 100)
    probe = next(i for i, line in enumerate(lines) if "target_concurrent_sessions=6 " in line)
    assert lines[probe].endswith("FAIL (1 run; 100 of 100 requests failed)")
    assert lines[probe + 1] == "  p90 TTFC: +inf ms [+inf, +inf] vs 100 ms (n=100)"
    assert lines[-1] == "capacity: 5 sessions; 6 is fail (100 of 100 requests failed)"


def test_a_first_value_above_the_capacity_says_to_lower_start_value(tmp_path: Path) -> None:
    result, lines = search(config(tmp_path, start=8), FakeServer(capacity=4))
    assert result.exit_code == 5
    assert lines[-1] == (
        "no value met the SLOs: the first, 8, was fail; the capacity, if any, is below 8: "
        "lower start_value"
    )
    # at the grid's lowest value there is nothing lower to try
    (tmp_path / "low").mkdir()
    _result, lines = search(config(tmp_path / "low", start=1), FakeServer(capacity=0))
    assert lines[-1] == "no value met the SLOs: the first, 1, was fail"


def test_a_count_of_one_is_singular_in_the_probe_line_and_the_conclusion(tmp_path: Path) -> None:
    # capacity 1 session (it said "1 sessions"); at 2 one request, which failed (it said
    # "1 of 1 requests failed"), and with no extension the value stays undecided
    def one_failing(request: RunRequest) -> ProbeRun:
        if request.value < 2:
            return FakeServer(capacity=1)(request)
        folder = Path(f"runs/run-{request.value:g}")
        return ProbeRun(request, folder, True, "health PASS", (np.full(1, np.inf),), 1, 1)

    one_failing.server = None  # type: ignore[attr-defined]
    path = tmp_path / "search.yaml"
    path.write_text(SEARCH.format(out=tmp_path, start=1) + "max_extensions: 0\n")
    _result, lines = search(load_capacity_config(path), one_failing)  # type: ignore[arg-type]
    assert lines[0] == "probe 1: target_concurrent_sessions=1 PASS (1 run)"
    assert (
        lines[2] == "probe 2: target_concurrent_sessions=2 UNDECIDED (1 run; 1 of 1 request failed)"
    )
    assert lines[-1] == "capacity: 1 session; 2 is undecided (1 of 1 request failed)"
    assert _amount(1, "sessions/s") == "1 session/s"
    assert _amount(2.5, "sessions/s") == "2.5 sessions/s"
