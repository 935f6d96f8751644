"""The determinism promise (docs/engine.md, "Determinism"): the same scenario and seed give the
same sessions, prompts and arrival schedule, whatever else differs between two runs of it.

Every case of ``determinism_runs`` (each shipped scenario, shrunk; every graph type, interval
generator, closed loop with ramp-up, phases, a ramp, every trace flavor, one request log in
each file format) runs in separate processes that differ in what must not matter:

* ``A`` and ``B``: dry runs, ``PYTHONHASHSEED`` 1 and 2;
* ``C``: against the built-in simulator with 1 worker, ``PYTHONHASHSEED=3``;
* ``D``: against the built-in simulator with 2 workers, ``PYTHONHASHSEED=4``, its traces read
  from the caches another process made (A, B and C read theirs for the first time);
* a sweep (``veeksha run`` of an ``!expand`` file, dry) interrupted by SIGINT in its second
  point and resumed (``--resume``): each point is the same as A's run of that value alone.

The runs are compared row by row (:func:`fingerprint`: requests.parquet, sessions.parquet and
trace.jsonl with content, read back with pyarrow): per request its session, node, parents,
history parent, kind, agent, client and model, think time, lengths, images and prompt text; per
session its node count and, where the schedule fixes it, its start and phase. Answers and
measured times are not compared: a run against a server has other answers than a dry run, so
there only the text each request adds (its last message, and a system message) is compared, not
the history that carries earlier answers.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.json as pa_json
import pyarrow.parquet as pq
import pytest

from tests.integration.engine.determinism_runs import (
    BY_NAME,
    CASES,
    FORMATS,
    ROOT,
    SWEEP,
    SWEEP_RATES,
    Case,
    write_traces,
)

_LIMIT_S = 180  # "it did not hang"
_DRIVER = [sys.executable, "-m", "tests.integration.engine.determinism_runs"]
_SIM = [c.name for c in CASES if c.sim]
#: the cases whose sessions have several requests or clients: where workers could matter
_WORKERS = ["chat", "agentic", "concurrency", "debate", "clients", "vision"]
_WORKERS += ["request_log", "mooncake"]  # (traces: read from the caches C made)
_SWEPT = [c.name for c in CASES if c.name.startswith("sweep_")]

_REQUEST_KEYS = (
    "parents",
    "history_parent",
    "kind",
    "agent",
    "round",
    "client",
    "model",
    "wait_after_ready",
    "not_before",
    "target_prompt_tokens",
    "shared_prefix_tokens",
    "prompt_tokens_new",
    "requested_output_tokens",
    "images",
    "image_pixels",
)
_TRACE_KEYS = (
    "result",
    "latency_s",
    "transcript",
    "priority",
    "agent",
    "round",
    "client",
    "images",
)


def _env(hash_seed: int) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONHASHSEED=str(hash_seed), PYTHONPATH=path)


def _driver(out: Path, traces: Path, mode: str, names: list[str], hash_seed: int) -> Any:
    out.mkdir(parents=True)
    with (out / "driver.log").open("w") as log:  # (a file: a pipe nobody reads may fill up)
        return subprocess.Popen(
            [*_DRIVER, str(out), str(traces), mode, *names],
            cwd=ROOT,
            env=_env(hash_seed),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _finish(proc: Any, what: str) -> None:
    code = proc.wait(timeout=_LIMIT_S)
    log = Path(proc.args[len(_DRIVER)]) / "driver.log"
    assert code == 0, f"{what}: exit {code}\n{log.read_text()[-3000:]}"


def _interrupted_and_resumed_sweep(folder: Path) -> Path:
    """A dry sweep of SWEEP_RATES stopped by SIGINT in its second point, then resumed."""
    rates = ", ".join(map(str, SWEEP_RATES))
    source = folder / "sweep.yaml"
    source.write_text(SWEEP.format(rate=f"!expand [{rates}]"), encoding="utf-8")
    out = folder / "out"
    command = [sys.executable, "-m", "veeksha.cli", "run"]
    args = ["--dry-run", "--no-plots", "-q"]
    proc = subprocess.Popen(
        [*command, str(source), "--output-dir", str(out), *args],
        cwd=ROOT,
        env=_env(5),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + _LIMIT_S
    while not list(out.glob("sweep-*/001-*/trace.jsonl")):  # the second point's traffic
        assert proc.poll() is None, "the sweep ended before its second point"
        assert time.monotonic() < deadline, "the sweep's second point never started"
        time.sleep(0.02)
    time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=_LIMIT_S)
    assert proc.returncode == 3, err
    (sweep,) = out.glob("sweep-*")
    assert not list(sweep.glob("002-*")), "the interrupted sweep ran its last point"
    resumed = subprocess.run(
        [*command, "--resume", str(sweep), *args],
        cwd=ROOT,
        env=_env(6),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_LIMIT_S,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert list((sweep / "superseded").glob("001-*")), "the resume did not run point 1 again"
    return sweep


@dataclass(frozen=True)
class Runs:
    a: Path
    b: Path
    c: Path
    d: Path
    sweep: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    base = tmp_path_factory.mktemp("determinism")
    traces = {name: base / f"traces-{name}" for name in "ABCD"}
    for folder in traces.values():
        write_traces(folder)
    everything = [c.name for c in CASES]
    not_swept = [name for name in everything if name not in _SWEPT]
    procs = [
        _driver(base / "A", traces["A"], "dry", everything, 1),
        _driver(base / "B", traces["B"], "dry", not_swept, 2),
        _driver(base / "C", traces["C"], "sim:1", _SIM, 3),
        _driver(base / "cache", traces["D"], "cache", _WORKERS, 7),  # D's trace caches
    ]
    try:
        (base / "sweep").mkdir()
        sweep = _interrupted_and_resumed_sweep(base / "sweep")
        _finish(procs[3], "the trace caches of D")
        procs.append(_driver(base / "D", traces["D"], "sim:2", _WORKERS, 4))
        for proc, what in zip(procs, ["A", "B", "C", "cache", "D"], strict=True):
            _finish(proc, what)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return Runs(base / "A", base / "B", base / "C", base / "D", sweep)


# --------------------------------------------------------------------------------- comparison


def _run_folder(folder: Path) -> Path:
    """The run folder of a case (``<case>/run``) or of a sweep point (itself)."""
    return folder / "run" if (folder / "run").is_dir() else folder


def fingerprint(folder: Path, case: Case, answers: bool = True) -> dict[str, dict[Any, Any]]:
    """What the promise covers of one run, by request ``(session, node, attempt)`` and by
    session. ``answers=False``: leave out what follows from the server's answers (the history
    in a request's messages: only its last message, its own prompt, and a system message are
    kept)."""
    run = _run_folder(folder)
    requests = pq.read_table(run / "requests.parquet").to_pylist()
    sessions = pq.read_table(run / "sessions.parquet").to_pylist()
    trace = pa_json.read_json(run / "trace.jsonl").to_pylist()
    assert requests, f"{run}: an empty run compares nothing"
    assert sessions, run
    assert trace, run
    planned = {
        s["session_id"] for s in sessions if case.planned is None or s["session_id"] < case.planned
    }
    origin: dict[str, float] = {}  # (a phase after a drain begins when the drain ended)
    for row in sessions if case.drained else ():
        origin[row["phase"]] = min(origin.get(row["phase"], math.inf), row["started_at"])

    def since(time: float, phase: str) -> int:  # ns since t0, or since its phase's first start
        return round((time - origin.get(phase, 0.0)) * 1e9)

    by_request: dict[Any, Any] = {}
    for row in requests:
        key = (row["session_id"], row["node_id"], row["attempt"] or 0)
        entry = {name: row[name] for name in _REQUEST_KEYS}
        if not row["parents"] and row["session_id"] in planned:  # a root: the schedule's
            entry["ready_at"] = since(row["ready_at"], row["phase"])
            entry["phase"] = row["phase"]
        by_request[key] = entry
    by_session: dict[Any, Any] = {}
    for row in sessions:
        entry = {"num_nodes": row["num_nodes"]}
        if row["session_id"] in planned:
            entry["started_at"] = since(row["started_at"], row["phase"])
            entry["phase"] = row["phase"]
        by_session[row["session_id"]] = entry
    by_line: dict[Any, Any] = {}
    for line in trace:
        key = (line["session_id"], line["node_id"], line.get("attempt") or 0)
        messages = line.get("messages")
        if messages is not None and not answers:
            messages = [m for m in messages[:-1] if m[0] == "system"] + messages[-1:]
        entry = {name: line.get(name) for name in _TRACE_KEYS}
        entry["messages"] = messages
        by_line[key] = entry
    assert any(e["messages"] for e in by_line.values()), f"{run}: trace.jsonl has no content"
    return {"requests": by_request, "sessions": by_session, "trace.jsonl": by_line}


def differences(first: dict[str, dict[Any, Any]], second: dict[str, dict[Any, Any]]) -> list[str]:
    """Each difference between two fingerprints, one line each (the first few per table)."""
    out: list[str] = []
    for table, mine in first.items():
        theirs = second[table]
        if mine.keys() != theirs.keys():
            only_a = sorted(mine.keys() - theirs.keys())[:5]
            only_b = sorted(theirs.keys() - mine.keys())[:5]
            out.append(f"{table}: rows only in the first {only_a}, only in the second {only_b}")
        shown = 0
        for key in sorted(mine.keys() & theirs.keys()):
            fields = [f for f in mine[key] if not _same(mine[key][f], theirs[key].get(f))]
            if fields and shown < 5:
                shown += 1
                out.extend(
                    f"{table} {key} {f}: {str(mine[key][f])[:70]!r} != "
                    f"{str(theirs[key].get(f))[:70]!r}"
                    for f in fields
                )
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def _compare(first: Path, second: Path, case: Case, answers: bool = True) -> None:
    found = differences(fingerprint(first, case, answers), fingerprint(second, case, answers))
    assert not found, f"{case.name}: {first} vs {second}:\n" + "\n".join(found)


# ---------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", [c.name for c in CASES if c.name not in _SWEPT])
def test_another_process_and_hash_seed_give_the_same_run(runs: Runs, name: str) -> None:
    _compare(runs.a / name, runs.b / name, BY_NAME[name])


@pytest.mark.parametrize("name", _SIM)
def test_a_dry_run_gives_the_sessions_and_schedule_of_a_run(runs: Runs, name: str) -> None:
    _compare(runs.a / name, runs.c / name, BY_NAME[name], answers=False)


@pytest.mark.parametrize("name", _WORKERS)
def test_the_number_of_workers_changes_nothing(runs: Runs, name: str) -> None:
    _compare(runs.c / name, runs.d / name, BY_NAME[name], answers=False)


def test_a_request_log_gives_the_same_run_in_every_file_format(runs: Runs) -> None:
    first, *others = (f"format_{name}" for name in FORMATS)
    for other in others:
        _compare(runs.a / first, runs.a / other, BY_NAME[first])


def test_each_point_of_a_resumed_sweep_is_its_value_run_alone(runs: Runs) -> None:
    points = sorted(p for p in runs.sweep.iterdir() if p.name[:3].isdigit())
    assert [p.name for p in points] == [
        f"{i:03d}-arrival_rate={rate}" for i, rate in enumerate(SWEEP_RATES)
    ]
    for point, name in zip(points, _SWEPT, strict=True):
        _compare(runs.a / name, point, BY_NAME[name])
