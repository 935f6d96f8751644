"""Shared tools of the robustness tests: run ``veeksha`` for real and audit what it left behind.

``start_run`` launches ``veeksha run`` as a real subprocess (CI=true, no stdin, its own output
folder) and returns a ``RunProcess`` that tracks every process the run started (workers,
simulator), so a test can signal them and check that none survives. ``run_in_process`` runs the
same command's own code in the test's process, for tests whose subject is not the process
boundary (what the workers make of a server's bytes): it spares the ~1.5 s of interpreter
start-up and imports of each ``veeksha run``, and still checks the exit code, the output, and
that every process the run started is gone. ``audit_run`` is the
"nothing was lost" check every test ends with: the run folder reads back (finalised or partial),
every node of every started session has exactly one row, every dispatched request is in the trace,
and ``veeksha report`` works on it.

Runs use ``--no-plots``: the PNGs are the slowest part of an evaluation and not what these tests
are about.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import textwrap
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pyarrow as pa

from veeksha.record.reader import load_requests, load_sessions, read_metadata
from veeksha.record.trace import read_trace

if TYPE_CHECKING:
    from veeksha.engine.outcome import RunOutcome
    from veeksha.scenario.models import Scenario

_MAIN = "from veeksha.cli import main; main(prog_name='veeksha')"


def write_scenario(folder: Path, text: str, name: str = "scenario.yaml") -> Path:
    """Write an inline YAML scenario (dedented) and return its path."""
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def veeksha_cmd(*args: str) -> list[str]:
    """The argv of ``veeksha ARGS...`` in this interpreter (the console script's entry point)."""
    return [sys.executable, "-c", _MAIN, *args]


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["CI"] = "true"
    env.pop("OPENAI_API_BASE", None)
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


def run_cli(*args: str, timeout: float = 30, env: dict[str, str] | None = None) -> CliResult:
    """Run ``veeksha ARGS`` to completion; its exit code and output."""
    proc = subprocess.run(
        veeksha_cmd(*args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        env=env or cli_env(),
        check=False,
    )
    return CliResult(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def assert_clean_error(self, code: int, *needles: str) -> str:
        """Exit ``code``, no traceback, a short message naming every needle; the message."""
        assert self.code == code, (self.code, self.output)
        assert "Traceback" not in self.output, self.output
        text = self.stderr.strip()
        assert text, "no message on stderr"
        for needle in needles:
            assert needle in text, (needle, text)
        return text


@dataclass
class RunProcess:
    """A ``veeksha run`` subprocess and every process it started (tracked while it runs)."""

    proc: subprocess.Popen[bytes]
    output_dir: Path
    descendants: dict[int, psutil.Process] = field(default_factory=dict)
    cmdlines: dict[int, list[str]] = field(default_factory=dict)

    def track(self) -> list[psutil.Process]:
        """Record the current descendants (call this while the run is alive)."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        for child in children:
            if child.pid not in self.descendants:
                self.descendants[child.pid] = child
                self.cmdlines[child.pid] = _cmdline(child)
        return children

    def workers(self) -> list[psutil.Process]:
        return [p for p in self.track() if _is(p, "veeksha.dispatch.worker", "veeksha-worker")]

    def simulators(self) -> list[psutil.Process]:
        return [p for p in self.track() if _is(p, "veeksha.simulator", "veeksha-sim")]

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``predicate`` (tracking descendants) until true; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.track()
            if predicate():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the run exited ({self.proc.returncode}) before {what}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}")

    def wait_dispatching(self, requests: int = 1, timeout: float = 20) -> None:
        """Wait until the run has recorded ``requests`` rows or trace lines on disk."""

        def dispatched() -> bool:
            folder = self.run_dir_or_none()
            if folder is None or not (folder / "trace.jsonl").exists():
                return False
            return len(read_trace(folder / "trace.jsonl")) >= requests

        self.wait_for(dispatched, timeout, f"{requests} dispatched requests")

    def send(self, sig: int) -> None:
        self.track()
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 30) -> CliResult:
        """Wait for the exit (tracking descendants meanwhile); its exit code and output."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.track()
            if time.monotonic() > deadline:
                self.proc.kill()
                out, err = self.proc.communicate()
                said = (err or b"").decode()
                raise AssertionError(f"veeksha run did not exit in {timeout} s: {said}")
            time.sleep(0.05)
        out, err = self.proc.communicate()
        return CliResult(self.proc.returncode, (out or b"").decode(), (err or b"").decode())

    def run_dir_or_none(self) -> Path | None:
        folders = [p for p in self.output_dir.iterdir() if p.is_dir()]
        return folders[0] if len(folders) == 1 else None

    @property
    def run_dir(self) -> Path:
        folder = self.run_dir_or_none()
        assert folder is not None, list(self.output_dir.iterdir())
        return folder

    def assert_no_survivors(self, within: float = 5.0) -> None:
        """Every process the run started is gone (or a zombie) within ``within`` seconds."""
        assert self.descendants, "no descendant process was ever seen"
        assert_gone(self.descendants.values(), within)


#: health checks that judge the load generator's own machine (its lag, its hand-overs): FAIL
#: when the test's processes waited for CPUs that other tests held, whatever was under test
MACHINE_CHECKS = frozenset({"generator_saturation", "lifecycle_delays"})


def assert_healthy(checks: dict[str, str], detail: object = "") -> None:
    """No health check FAILed (``checks``: name → status) but those that judge the machine
    (:data:`MACHINE_CHECKS`): a run's verdict under a full suite on 2 cores says as much of
    the other tests as of the run."""
    failed = {name for name, status in checks.items() if status == "FAIL"}
    assert not failed - MACHINE_CHECKS, (sorted(failed), detail)


def assert_gone(processes: Any, within: float = 5.0) -> None:
    """Every one of ``processes`` is gone (or a zombie) within ``within`` seconds; any left is
    killed (never left to the next test) and named."""
    deadline = time.monotonic() + within
    alive = _alive(processes)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = _alive(alive)
    described = [f"{p.pid} {' '.join(_cmdline(p))[:120]}" for p in alive]
    for p in alive:  # never leave them to the next test
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not alive, f"processes outlived the run: {described}"


def start_run(
    scenario: Path,
    output_dir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    own_group: bool = False,
    console: int | None = None,
) -> RunProcess:
    """Launch ``veeksha run SCENARIO --output-dir OUTPUT_DIR`` (no stdin, CI=true).

    ``own_group``: in a session (and process group) of its own, as a shell starts a job, so a
    test can signal the whole group (``os.killpg(run.proc.pid, sig)``) as a terminal, ``timeout``
    or ``docker stop`` do. ``console``: a file descriptor (a pty's slave end) for its stdout and
    stderr instead of pipes (``finish`` then returns empty output)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        veeksha_cmd("run", str(scenario), "--output-dir", str(output_dir), "--no-plots", *extra),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if console is None else console,
        stderr=subprocess.PIPE if console is None else console,
        env=env or cli_env(),
        start_new_session=own_group,
    )
    return RunProcess(proc, output_dir)


@contextlib.contextmanager
def helpers_forked_here() -> Iterator[None]:
    """A single run made the command's way in this process meanwhile (``launch_helpers``) forks
    its helpers (the built-in simulator, the workers, the server watch) from it, as
    ``veeksha run`` forks them from its own process.

    veeksha forks only from a process with one thread (``veeksha.forked.prepare``: a lock
    another thread held at the fork would stay held in the child), else it starts fresh
    interpreters, ~0.2 CPU-s each. A test's process has other threads, none holding a lock a
    helper takes: pytest-xdist's channel reader, Arrow's allocator's and BLAS's (which keep
    their own locks safe across a fork), an earlier run's idle executor threads; the hostile
    servers and the tests' own simulators are forked from it likewise. ``VEEKSHA_FORK=0``
    still starts fresh interpreters; ``run_scenario`` called as a library, and a sweep's
    points (``run_point``), start them as always. (The hostile held, numbers and wire
    modules: 47.8 -> 41.5 CPU-s, 73 -> 70 s.)"""
    import veeksha.forked

    real = veeksha.forked.single_threaded
    veeksha.forked.single_threaded = lambda: True
    try:
        yield
    finally:
        veeksha.forked.single_threaded = real


def run_as_the_command(scenario: Scenario, run_dir: Path, **options: Any) -> RunOutcome:
    """``run_scenario(scenario, run_dir, **options)`` with its helpers launched first, forked
    from this process, as ``veeksha run`` launches them (``launch_helpers``,
    ``helpers_forked_here``): not the three fresh interpreters ``run_scenario`` called as a
    library starts itself (~0.6 CPU-s a run)."""
    from veeksha.engine.launch import launch_helpers
    from veeksha.engine.run import run_scenario

    with helpers_forked_here():
        helpers = launch_helpers(scenario, bool(options.get("dry_run", False)))
    try:
        return run_scenario(
            scenario,
            run_dir,
            simulator=helpers.simulator,
            workers=helpers.workers,
            watch_process=helpers.watch,
            **options,
        )
    finally:
        helpers.close()  # (what the run did not adopt or stop, if it failed before it did)


def run_in_process(
    scenario: Path, output_dir: Path, *extra: str, env: dict[str, str] | None = None
) -> CliResult:
    """``veeksha run SCENARIO --output-dir OUTPUT_DIR --no-plots`` through the command line's
    code in this process, with the environment ``env`` (default ``cli_env()``): its exit code and
    output. An exception that escaped the command fails the test with its traceback; every
    process the run started (workers, the server watch) must be gone within 5 s of its end.

    What the run changes in this process is put back: its CPU pinning (the main process of a
    run pins itself to one CPU) and the collector (a run's set-up turns it off). Its helpers
    are forked from this process, as ``veeksha run`` forks its own (``helpers_forked_here``).
    """
    from click.testing import CliRunner

    from veeksha.cli import main

    output_dir.mkdir(parents=True, exist_ok=True)
    wanted = env or cli_env()
    changes: dict[str, str | None] = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    changes |= {k: None for k in os.environ if k not in wanted}
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    cpus, collecting = os.sched_getaffinity(0), gc.isenabled()
    try:
        with helpers_forked_here():
            invoked = CliRunner().invoke(
                main,
                ["run", str(scenario), "--output-dir", str(output_dir), "--no-plots", *extra],
                env=changes,
            )
    finally:
        os.sched_setaffinity(0, cpus)
        if collecting:
            gc.enable()
    if invoked.exception is not None and not isinstance(invoked.exception, SystemExit):
        assert invoked.exc_info is not None
        raise AssertionError("".join(traceback.format_exception(*invoked.exc_info)))
    assert_gone([p for p in me.children(recursive=True) if p.pid not in before])
    return CliResult(invoked.exit_code, invoked.stdout, invoked.stderr)


# --------------------------------------------------------------------------------- auditing


@dataclass
class Audit:
    requests: pa.Table
    sessions: pa.Table
    metadata: dict[str, str]

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.requests.to_pylist()

    def kinds(self) -> Counter[tuple[str, str]]:
        return Counter((r["status"], r["error_kind"] or "") for r in self.rows)


def audit_run(
    run_dir: Path, *, finalised: bool = True, report: bool = True, trace: bool = True
) -> Audit:
    """Check that nothing was lost; return the tables for more specific assertions.

    Finalised runs: every started session has a sessions row, and its ``num_nodes`` nodes each
    have exactly one request row (dispatched or cancelled). Partial runs (killed): every row is
    unique, and every session row's nodes are all there. In both, each dispatched row is in
    trace.jsonl and ``veeksha report`` reads the folder.
    """
    requests = load_requests(run_dir)
    sessions = load_sessions(run_dir)
    metadata = read_metadata(run_dir)
    assert metadata["partial"] == ("false" if finalised else "true"), metadata
    rows = requests.select(["session_id", "node_id", "request_id", "dispatched_at"]).to_pylist()
    keys = Counter((r["session_id"], r["node_id"]) for r in rows)
    duplicated = {k: n for k, n in keys.items() if n > 1}
    assert not duplicated, f"nodes with more than one row: {duplicated}"
    ids = Counter(r["request_id"] for r in rows)
    assert all(n == 1 for n in ids.values()), "a request id appears twice"
    by_session: dict[int, set[int]] = {}
    for session_id, node_id in keys:
        by_session.setdefault(session_id, set()).add(node_id)
    for s in sessions.select(["session_id", "num_nodes"]).to_pylist():
        expected = set(range(s["num_nodes"]))
        got = by_session.get(s["session_id"], set())
        assert got == expected, (s, sorted(got))
    if finalised:
        session_ids = set(sessions.column("session_id").to_pylist())
        assert session_ids == set(by_session), "a started session has no sessions row"
        assert requests.num_rows == sum(sessions.column("num_nodes").to_pylist())
    trace_file = run_dir / "trace.jsonl"
    if trace and trace_file.exists():
        traced = {entry.request_id for entry in read_trace(trace_file)}
        dispatched = {r["request_id"] for r in rows if r["dispatched_at"] is not None}
        if finalised:
            assert traced == dispatched, (len(traced), len(dispatched))
        else:  # a killed run may have traced requests whose rows were in the lost last second
            assert dispatched <= traced
    if report:
        from click.testing import CliRunner

        from veeksha.cli import main

        # in-process (the subprocess would only add interpreter start-up and imports)
        invoked = CliRunner().invoke(main, ["report", str(run_dir), "--no-plots", "--quiet"])
        assert invoked.exception is None or isinstance(invoked.exception, SystemExit), (
            invoked.output
        )
        assert invoked.exit_code in (0, 3, 4, 5), invoked.output
        assert (run_dir / "summary.json").exists()
    return Audit(requests, sessions, metadata)


def leaked_secrets(folder: Path, outputs: Sequence[str], secrets: Sequence[str]) -> list[str]:
    """Where each of ``secrets`` was written: in ``outputs`` (a command's stdout, stderr), in
    a file below ``folder`` (its bytes), or in a Parquet file's metadata or cells as read back
    (compression may hide them from the bytes). ``secret: where`` for each; empty when none."""
    import pyarrow.parquet as pq

    texts = [(f"output {i}", text) for i, text in enumerate(outputs)]
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        texts.append((str(path), path.read_bytes().decode("latin-1")))
        if path.suffix == ".parquet":
            parquet = pq.ParquetFile(path)
            read = [str(parquet.schema_arrow.metadata), str(parquet.metadata.metadata)]
            read += [repr(row) for row in parquet.read().to_pylist()]
            texts += [(f"{path} (read)", text) for text in read]
    found = (f"{secret}: {where}" for secret in secrets for where, text in texts if secret in text)
    return list(dict.fromkeys(found))


def summary(run_dir: Path) -> dict[str, Any]:
    return dict(json.loads((run_dir / "summary.json").read_text()))


# ------------------------------------------------------------------------------- processes


def _cmdline(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _cmdline_has(p: psutil.Process, needle: str) -> bool:
    return any(needle in part for part in _cmdline(p))


def _is(p: psutil.Process, module: str, name: str) -> bool:
    """Whether ``p`` is a helper of a run: a fresh interpreter running ``module``, or a fork of
    veeksha's main process named ``name`` (``veeksha.forked``)."""
    try:
        return p.name() == name or _cmdline_has(p, module)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _alive(processes: Any) -> list[psutil.Process]:
    alive = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            continue
    return alive
