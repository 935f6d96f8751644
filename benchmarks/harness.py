"""What every figure needs: the simulator, a measured ``veeksha run`` subprocess, the machine.

``run_veeksha`` writes a scenario (JSON is valid YAML) and runs ``python -m veeksha.cli run`` in
a subprocess, so the whole process tree is measured from outside, start-up included:

- CPU seconds from ``getrusage(RUSAGE_CHILDREN)`` around the child's ``wait``: the kernel adds a
  reaped process' CPU, and that of every descendant it reaped (the workers), to its parent. The
  simulator is this process' child too, but it is reaped only after the figures, so it never
  counts as veeksha's.
- peak memory of the tree, sampled by a thread: the main process' RSS every 20 ms plus each
  descendant's private memory (USS, from ``/proc/PID/smaps_rollup`` every 100 ms). A helper
  forked from the main process (``veeksha.forked``) shares its pages, which an RSS sum would
  count once per process; USS counts each page once, in the main process (a fresh
  interpreter's shared libraries are counted there too: the figure is comparable across
  revisions). The main process' own peak RSS is kept apart (``ru_maxrss`` of the root is not
  separable, so it is sampled too).

Every run is measured with ``PYTHONDONTWRITEBYTECODE=1``, as on these machines: Python writes
no ``__pycache__`` of its own, and veeksha's modules are read from the bytecode
``veeksha.bytecode.warm`` leaves after a run (``python -m benchmarks`` warms both trees first, as
a user's install is from its second run on; the first run after an install compiles them). Runs
start from a source tree (``root``): this checkout, or another revision's package
(``baseline_tree``) for figures side by side with it.

``Simulator`` is the built-in server in its own process group; ``cpu_s`` reads its CPU from
/proc (all its processes), ``requests_total`` its own request counter from ``/metrics``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from veeksha.evaluate.exit_codes import ExitCode
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.simulator.process import SimulatorProcess

__all__ = [
    "ROOT",
    "Machine",
    "RunMeasure",
    "Simulator",
    "baseline_tree",
    "machine",
    "processes_cpu_s",
    "python_cpu_s",
    "run_veeksha",
    "scale_scenario",
    "scenario",
]

ROOT = Path(__file__).resolve().parent.parent
_SAMPLE_S = 0.02
_TREE_SCAN_S = 0.5
_PRIVATE_S = 0.1  # (a descendant's smaps_rollup costs 1-2 ms to read: not every sample)
_REQUESTS_RE = re.compile(r"^veeksha_sim_requests_total\{[^}]*\}\s+(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Machine:
    """Where the figures were measured."""

    cores: int
    cpu: str
    python: str
    commit: str
    date: str

    def line(self) -> str:
        """One Markdown line for BENCHMARKS.md."""
        return (
            f"Machine: {self.cores} cores, {self.cpu}, Python {self.python}. "
            f"Commit: {self.commit}. Date: {self.date}."
        )


def machine() -> Machine:
    """The machine, the interpreter, the commit (``+dirty`` with local changes) and now (UTC)."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    if _git("status", "--porcelain", "--untracked-files=no", "--", "veeksha", "benchmarks"):
        commit += "+dirty"
    return Machine(
        cores=len(os.sched_getaffinity(0)),
        cpu=cpu,
        python=platform.python_version(),
        commit=commit,
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    )


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def processes_cpu_s(procs: list[psutil.Process]) -> float:
    """CPU seconds (user + system) of ``procs`` so far; one that has gone counts nothing."""
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


class Simulator:
    """The built-in simulator in its own processes, with its CPU and request counter."""

    def __init__(self, **settings: Any) -> None:
        settings.setdefault("preset", "fast")
        self.config = SimulatorConfig.model_validate(settings)
        self._proc = SimulatorProcess(self.config)
        self.base_url = ""

    def __enter__(self) -> Simulator:
        self.base_url = self._proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._proc.stop()

    def _procs(self) -> list[psutil.Process]:
        pid = self._proc.pid
        if pid is None:
            return []
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu_s(self) -> float:
        """CPU seconds (user + system) of every server process so far."""
        return processes_cpu_s(self._procs())

    def requests_total(self) -> int:
        """Requests the server has received so far (its /metrics counter; one process)."""
        url = self.base_url.removesuffix("/v1") + "/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        return sum(int(m) for m in _REQUESTS_RE.findall(text))


def scenario(
    *,
    api_base: str | None,
    scheduler: dict[str, Any],
    max_sessions: int,
    graph: dict[str, Any] | None = None,
    prompt_tokens: int = 128,
    output_tokens: int = 32,
    timeout_s: float = 120.0,
    request_timeout_s: float = 60.0,
    **runtime: Any,
) -> dict[str, Any]:
    """A benchmark scenario: completions API, fixed prompt and output lengths."""
    client: dict[str, Any] = {
        "type": "openai_completions",
        "request_timeout": request_timeout_s,
    }
    if api_base is not None:
        client["api_base"] = api_base
        client["model"] = "veeksha-sim"
    return {
        "seed": 1,
        "traffic_scheduler": scheduler,
        "session_generator": {
            "type": "synthetic",
            "session_graph": graph or {"type": "single_request"},
            "channels": [
                {
                    "type": "text",
                    "body_length_generator": {"type": "fixed", "value": prompt_tokens},
                }
            ],
            "output_spec": {
                "text": {"output_length_generator": {"type": "fixed", "value": output_tokens}}
            },
        },
        "client": client,
        "runtime": {
            "max_sessions": max_sessions,
            "benchmark_timeout": timeout_s,
            "post_timeout_grace_seconds": 5,
            **runtime,
        },
        "trace_recorder": {"enabled": False},
        "evaluators": [{"type": "performance", "stream_metrics": False}],
    }


def scale_scenario(sessions: int, timeout_s: float = 600.0) -> dict[str, Any]:
    """The scale figure's scenario: linear 3-request sessions (no think time, history
    inherited), 32-token prompts, 8 output tokens, 1,000 kept alive, no target (a dry run).

    Closed loop keeps 1,000 sessions alive: an open-loop rate beyond what the loop can start
    would start (and hold) every due session at once.
    """
    graph = {
        "type": "linear",
        "num_request_generator": {"type": "fixed", "value": 3},
        "request_wait_generator": {"type": "fixed", "interval": 0},
        "inherit_history": True,
    }
    return scenario(
        api_base=None,
        scheduler={"type": "concurrent", "target_concurrent_sessions": 1000, "rampup_seconds": 0},
        max_sessions=sessions,
        graph=graph,
        prompt_tokens=32,
        output_tokens=8,
        timeout_s=timeout_s,
    )


@dataclass
class RunMeasure:
    """One ``veeksha run`` subprocess, measured from outside."""

    run_dir: Path
    exit_code: int
    wall_s: float
    cpu_s: float  # the whole tree, start-up and evaluation included
    peak_tree_rss_mb: float
    peak_main_rss_mb: float
    rss_samples: list[tuple[float, float, float]] = field(default_factory=list)  # t, tree, main
    stderr: str = ""
    steal_pct: float = 0.0  # CPU time the hypervisor took from this VM during the run (all CPUs)


#: The exit codes of a run that went to its end: its figures stand whatever its verdicts say
#: (a health check's or an SLO's: 4, 5). A run aborted (3) or a crash (1) has none.
COMPLETE_RUN = (ExitCode.OK, ExitCode.HEALTH_FAILED, ExitCode.SLO_UNMET)


def check_complete(m: RunMeasure, what: str) -> None:
    """Raise unless the measured run went to its end (``COMPLETE_RUN``), with its stderr."""
    if m.exit_code not in COMPLETE_RUN:
        raise RuntimeError(f"{what}: veeksha exited {m.exit_code}:\n{m.stderr}")


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from /proc/stat; (0, 0) where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    steal = fields[7] if len(fields) > 7 else 0
    return steal, sum(fields[:8])


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Share of CPU time stolen by the hypervisor between two ``cpu_ticks`` readings, in %."""
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total > 0 else 0.0


class _RssSampler(threading.Thread):
    """Memory of a process tree (its root's RSS plus its descendants' USS: see the module
    docstring) and of its root every ``_SAMPLE_S``, cheaply: the tree's pids are looked up (a
    scan of every process, ~2 ms) only every ``_TREE_SCAN_S``, the descendants' USS read every
    ``_PRIVATE_S``, and each sample reads the root's ``/proc/PID/statm`` (~60 µs). A psutil
    scan per sample was measured (``perf sched timehist``) running ~2 ms every 20 ms on the
    worker's CPU, delaying its release timers by up to 1.5 ms: the sampler must not become part
    of what it measures."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
        t0 = time.monotonic()
        pids: list[int] = []
        scanned = -_TREE_SCAN_S
        private: dict[int, float] = {}  # descendant pid: its private memory, MB
        private_read = -_PRIVATE_S
        while not self.stop_event.is_set():
            now = time.monotonic() - t0
            if now - scanned >= _TREE_SCAN_S:
                try:
                    pids = [self.pid, *(c.pid for c in root.children(recursive=True))]
                except psutil.NoSuchProcess:
                    return
                scanned = now
            if now - private_read >= _PRIVATE_S:
                private = {pid: mb for pid in pids[1:] if (mb := _private_mb(pid)) is not None}
                private_read = now
            root_pages = _statm_rss_pages(self.pid)
            if root_pages is None:  # the root exited
                return
            main = root_pages * page_mb
            self.samples.append((now, main + sum(private.values()), main))
            self.stop_event.wait(_SAMPLE_S)


def _private_mb(pid: int) -> float | None:
    """Memory only ``pid`` maps (USS: its private clean and dirty pages), MB; None once gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read()
    except OSError:
        return None
    kb = 0
    for line in text.splitlines():
        if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
            kb += int(line.split()[1])
    return kb / 1024


def _statm_rss_pages(pid: int) -> int | None:
    """Resident pages of ``pid`` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def run_veeksha(
    spec: dict[str, Any],
    workdir: Path,
    name: str,
    *,
    dry_run: bool = False,
    extra_args: tuple[str, ...] = (),
    while_running: Any = None,
    sample_rss: bool = False,
    env: dict[str, str] | None = None,
    root: Path = ROOT,
    plots: bool = False,
) -> RunMeasure:
    """Run ``spec`` with ``veeksha run`` in a subprocess; its folder, CPU and wall time, and
    with ``sample_rss`` its RSS every 20 ms (off by default: a sampler thread is one more thing
    on the 2 cores, and the timing figures need none).

    The run is ``-q --no-plots`` (the PNGs are not what most figures measure); ``plots=True``
    leaves ``--no-plots`` out: the run draws its plots, as a plain ``veeksha run`` does.

    ``root`` is the source tree whose ``veeksha`` runs (``python -m`` puts the working folder
    first on the path, and the workers and the built-in simulator inherit it): another
    revision's tree (``baseline_tree``) measures that revision with the same interpreter.

    ``while_running(proc)`` (optional) is called in this thread once the child is started and
    must return when the child exits (e.g. a per-second poll of the server's counter).
    ``env`` adds variables to the child's environment (another ``root`` is also put on its
    ``PYTHONPATH``, for processes started outside that folder).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{name}.yaml"
    path.write_text(json.dumps(spec, indent=1))
    out = workdir / name
    cmd = [sys.executable, "-m", "veeksha.cli", "run", str(path), "--output-dir", str(out), "-q"]
    cmd += ["--no-plots"] if not plots and _has_no_plots(root) else []
    if dry_run:
        cmd.append("--dry-run")
    cmd += list(extra_args)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    ticks = cpu_ticks()
    start = time.monotonic()
    # as on the machines the start-up figures are for: Python writes no bytecode (veeksha's own
    # modules are read from what veeksha.bytecode.warm wrote, the libraries' from pip's)
    child_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    if root != ROOT:
        paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        child_env["PYTHONPATH"] = os.pathsep.join([*paths, str(root)])
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=root, env=child_env
    )
    sampler = _RssSampler(proc.pid) if sample_rss else None
    if sampler is not None:
        sampler.start()
    stderr = b""
    try:
        if while_running is not None:
            while_running(proc)
        _, stderr = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if sampler is not None:
            sampler.stop_event.set()
            sampler.join()
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    samples = [] if sampler is None else sampler.samples
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    return RunMeasure(
        run_dir=runs[-1] if runs else out,
        exit_code=proc.returncode,
        wall_s=wall,
        cpu_s=cpu,
        peak_tree_rss_mb=max((s[1] for s in samples), default=0.0),
        peak_main_rss_mb=max((s[2] for s in samples), default=0.0),
        rss_samples=samples,
        stderr=stderr.decode(errors="replace")[-3000:],
        steal_pct=steal_pct(ticks, cpu_ticks()),
    )


_NO_PLOTS: dict[Path, bool] = {}


def _has_no_plots(root: Path) -> bool:
    """Whether this veeksha's ``run`` has ``--no-plots`` (plots are not what we measure)."""
    if root not in _NO_PLOTS:  # asked once per tree
        out = subprocess.run(
            [sys.executable, "-m", "veeksha.cli", "run", "--help"],
            capture_output=True,
            text=True,
            check=False,
            cwd=root,
        )
        _NO_PLOTS[root] = "--no-plots" in out.stdout
    return _NO_PLOTS[root]


def baseline_tree(revision: str, folder: Path) -> tuple[Path, str]:
    """Another revision's ``veeksha`` package written into ``folder`` (``git archive``; no
    worktree, no venv: the interpreter and its packages are this one's); the folder and the
    revision's short hash. Raises ``RuntimeError`` when git does not know ``revision``."""
    commit = _git("rev-parse", "--short", "--verify", f"{revision}^{{commit}}")
    if not commit:
        raise RuntimeError(f"git does not know the revision {revision!r}")
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "veeksha"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    )
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True, timeout=60)
    return folder, commit


def python_cpu_s(code: str, root: Path = ROOT, repeats: int = 5) -> float:
    """Median CPU-s (user + system) of a fresh interpreter running ``code`` in ``root``, as the
    run's processes start: no bytecode written (``PYTHONDONTWRITEBYTECODE=1``); what exists and
    is fresh is read (see the module docstring)."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    values = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True, timeout=60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        values.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return statistics.median(values)
