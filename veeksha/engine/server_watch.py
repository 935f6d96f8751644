"""``ServerWatch``: what veeksha watches of the server while a run goes: its Prometheus metrics
(``MetricsScraper``) and its GPUs (the dcgm-exporters of ``server_metrics.gpu_urls``, else for a
managed server on this host ``GpuSampler``'s nvidia-smi), all into
server_metrics.parquet, in a process of their own (``veeksha.server.watch_process``): parsing a
vLLM answer costs ~40 ms of CPU, which the main process' event loop never pays. The run starts
it before t0 and stops it when the traffic ends; then this process, which has Arrow loaded, merges
the parts the watch wrote into server_metrics.parquet (the watch's process never imports Arrow)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from veeksha.forked import ForkedProcess
from veeksha.isolated import isolated_module_command
from veeksha.net import server_root
from veeksha.record.server_metrics import merge_parts, status_metadata
from veeksha.server.gpu import GpuSampler
from veeksha.server.watch_process import MERGE_REQUEST, WatchSettings, die_with_parent

if TYPE_CHECKING:
    from veeksha.engine.target import Target
    from veeksha.scenario.models import Scenario

__all__ = [
    "ServerWatch",
    "WatchProcess",
    "discard_watch_process",
    "metrics_url",
    "start_watch_process",
    "watched",
]

#: The watch's process: a fresh interpreter, or a fork of veeksha's (``veeksha.forked``).
WatchProcess = subprocess.Popen[bytes] | ForkedProcess

_STOP_TIMEOUT_S = 30.0  # its last scrape (≤ 5 s) and the file's close: generous


class Log(Protocol):
    """Where the watch says what it skipped or what failed (the run's RunLog)."""

    def info(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...


def watched(scenario: Scenario, dry_run: bool) -> bool:
    """Whether a run of ``scenario`` has a server watch (not disabled, not a dry run)."""
    return scenario.server_metrics.enabled and not dry_run


def start_watch_process(fork: bool = False) -> WatchProcess:
    """The watch's process, started now: a fresh interpreter, or with ``fork`` a fork of this
    process (``veeksha.forked``: it must have one thread; the fork imports the scraper itself).
    It waits for its settings line (:meth:`ServerWatch.begin`)."""
    if fork:
        from veeksha.server.watch_process import main

        return ForkedProcess(
            main,
            "veeksha-watch",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    return subprocess.Popen(
        isolated_module_command("veeksha.server.watch_process"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        start_new_session=True,  # (Ctrl-C is veeksha's: it stops the watch after the drain)
        preexec_fn=die_with_parent,  # noqa: PLW1509  (only prctl: fork-safe)
    )


def discard_watch_process(process: WatchProcess) -> None:
    """Stop a process from :func:`start_watch_process`, launched ahead of a run
    (``engine.launch.launch_helpers``), that no run adopted (its standard input
    still open: a run's watch closes it when it stops); an adopted one is left as it is."""
    if process.stdin is None or process.stdin.closed:
        return
    with contextlib.suppress(OSError):
        process.stdin.close()  # (before its settings: it exits at once)
    try:
        process.wait(_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()


def metrics_url(api_base: str) -> str:
    """The default metrics address: the api_base's server root + ``/metrics``."""
    return server_root(api_base) + "/metrics"


class ServerWatch:
    """The server watch of one run: its process (``veeksha.server.watch_process``: the scraper,
    the GPU sampler and server_metrics.parquet), started by :meth:`launch` when the run begins
    (before its target is resolved: its start-up runs beside the set-up), aimed at the target by
    :meth:`aim`, given the run by :meth:`begin`, stopped by :meth:`stop` after the drain. Its
    warnings reach the run's log as they come (a thread that only waits on the process'
    output)."""

    def __init__(
        self,
        interval_s: float,
        log: Log,
        process: WatchProcess | None = None,
    ):
        self._log = log
        self._url = ""
        self._api_key: str | None = None
        self._headers: dict[str, str] | None = None
        self._interval_s = interval_s
        self._gpu: str | None = None
        self._gpu_urls: list[str] = []
        self._servers: list[dict[str, Any]] = []  # the clients' other servers (aim)
        self._status: dict[str, Any] | None = None
        self._run: tuple[Path, dict[str, str]] | None = None  # (begun: the run's folder, metadata)
        self._ready = threading.Event()
        self._reported = threading.Event()  # (its status line came, or its output ended)
        self._process = process or start_watch_process()
        self._reader = threading.Thread(target=self._read, name="server-watch", daemon=True)
        self._reader.start()

    @classmethod
    def launch(
        cls,
        scenario: Scenario,
        dry_run: bool,
        log: Log,
        process: WatchProcess | None = None,
    ) -> ServerWatch | None:
        """The watch of a run, its process starting now (or ``process``, started ahead by
        ``engine.launch.launch_helpers``), or None (disabled, or a dry run: no server). ``aim`` it
        before ``begin``."""
        if not watched(scenario, dry_run):
            return None
        return cls(scenario.server_metrics.interval, log, process)

    def aim(self, scenario: Scenario, target: Target) -> None:
        """Scrape ``target`` (``server_metrics.url``, else the /metrics of every server its
        clients go to, in the same rounds) and the GPU exporters of ``server_metrics.gpu_urls``;
        without those, sample its GPUs with nvidia-smi when it is a managed server on this
        host."""
        config = scenario.server_metrics
        self._url = config.url or metrics_url(target.api_base)
        self._api_key = target.api_key
        self._headers = target.headers or None
        self._servers = []
        if not config.url:  # every server of the run's clients (the first client's first)
            seen = {self._url}
            for client in target.clients:
                url = metrics_url(client.api_base)
                if url not in seen:
                    seen.add(url)
                    self._servers.append(
                        {"url": url, "api_key": client.api_key, "headers": client.headers or None}
                    )
        root = server_root(target.api_base)  # (a path in gpu_urls is on the server's address)
        self._gpu_urls = [root + url if url.startswith("/") else url for url in config.gpu_urls]
        if self._gpu_urls:
            self._log.info(
                f"GPU metrics: scraping {len(self._gpu_urls)} exporter(s) of "
                "server_metrics.gpu_urls (nvidia-smi is not run)"
            )
        elif config.gpu:
            program = GpuSampler.find()
            if target.kind != "managed":
                self._log.info(
                    "GPU sampling skipped: the server is not a managed server on this host"
                )
            elif program is None:
                self._log.info("GPU sampling skipped: nvidia-smi is not on PATH")
            else:
                self._gpu = program

    def wait_ready(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """Wait (before t0) until the process can scrape at once: its first scrape is at t0."""
        if not self._ready.wait(timeout_s) and self._process.poll() is None:
            self._log.warning(
                f"server metrics: the server watch's process was not ready within {timeout_s:g} s"
            )

    def begin(self, run_dir: Path, t0_ns: int, metadata: dict[str, str]) -> None:
        """Watch this run from t0 (the process scrapes at t0 + k × interval)."""
        settings = WatchSettings(
            self._url,
            self._api_key,
            self._interval_s,
            t0_ns,
            str(run_dir),
            metadata,
            self._gpu,
            self._headers,
            self._gpu_urls or None,
            self._servers or None,
        )
        self._run = (run_dir, dict(metadata))
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(dataclasses.asdict(settings)).encode() + b"\n")
            self._process.stdin.flush()
        except OSError:  # (it died: stop() says so)
            pass

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if "ready" in message:
                self._ready.set()
            elif "warning" in message:
                self._log.warning(str(message["warning"]))
            elif "status" in message:
                status = dict(message["status"])
                if message.get("parts"):  # (here, at once: beside the run's own end)
                    self._merge(status)
                self._status = status
                self._reported.set()
        self._ready.set()  # (it exited: nothing to wait for; stop() says why)
        self._reported.set()
        if self._status is not None:  # (stop() did not wait for its exit: reaped here)
            self._process.wait()
            self._process.stdout.close()

    def request_stop(self) -> None:
        """Ask for the last scrape now, without waiting for it (:meth:`stop` waits): it runs in
        the watch's process while this one does something else (imports the evaluation)."""
        stdin = self._process.stdin
        if stdin is not None and not stdin.closed:  # closing it is the stop request
            with contextlib.suppress(OSError):
                stdin.write(MERGE_REQUEST)  # (this process merges: Arrow is loaded here)
                stdin.flush()
            with contextlib.suppress(OSError):
                stdin.close()

    def stop(self) -> dict[str, Any]:
        """One last scrape (asked now unless :meth:`request_stop` asked for it),
        server_metrics.parquet finalised; what happened (for summary.json)."""
        process = self._process
        self.request_stop()
        # its status line comes after its last part is written: the merge needs nothing more,
        # and the process' own exit (its interpreter's teardown) runs beside the evaluation;
        # the reader reaps it when its output ends
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        self._reported.wait(_STOP_TIMEOUT_S)
        if self._status is None:  # it exited (or hangs) without one
            # (its output ends when it exits: Popen.wait with a timeout polls, with sleeps that
            # double up to 50 ms, the reader's join does not)
            self._reader.join(max(0.0, deadline - time.monotonic()))
            try:
                code = process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            self._close_output()
            error = f"the server watch's process exited with code {code} before it reported"
            self._log.warning(f"server metrics: {error}")
            return {"url": self._url, "status": "failed", "error": error, "rows": 0}
        return self._status

    def _merge(self, status: dict[str, Any]) -> None:
        """server_metrics.parquet from the parts the watch left (in the reader's thread, as its
        status line comes: Arrow's writing and the parts' removal run beside the main thread,
        which imports the evaluation meanwhile); a failure is said in ``status``."""
        if self._run is None:
            return
        run_dir, metadata = self._run
        try:
            merge_parts(run_dir, {**metadata, **status_metadata(status)})
        except Exception as exc:  # noqa: BLE001 - extras: the run goes on, and says why
            status["write_error"] = str(exc)
            self._log.warning(f"server metrics: cannot write server_metrics.parquet: {exc}")

    def abort(self) -> None:
        """Stop the process of a watch that never began (the set-up failed before t0)."""
        if self._process.poll() is None and self._status is None:
            with contextlib.suppress(OSError):
                if self._process.stdin is not None:
                    self._process.stdin.close()
            try:
                self._process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._close_output()

    def _close_output(self) -> None:
        self._reader.join()
        if self._process.stdout is not None:
            self._process.stdout.close()
