"""``SimulatorProcess``: the simulator in a real subprocess, for ``veeksha run`` and the tests.

>>> with SimulatorProcess(SimulatorConfig()) as sim:  # doctest: +SKIP
...     sim.base_url
'http://127.0.0.1:40123/v1'

The subprocess is ``python -m veeksha.simulator`` in its own session (process group): Ctrl-C in
the terminal reaches the owner only, which stops the server with ``stop()``: SIGTERM, then
SIGKILL to the whole group after a grace period, so no process is left behind. If the owner dies
without calling ``stop()`` (SIGKILL, a crash), the server notices (``--parent-pid``: the kernel
sends it SIGTERM when the thread that started it exits) and stops too, unless ``die_with_owner``
is False.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from types import TracebackType
from typing import IO, Any

from veeksha.errors import TargetError
from veeksha.forked import ForkedProcess
from veeksha.net import fetch
from veeksha.redact import masked_headers
from veeksha.scenario.simulator import SimulatorConfig

__all__ = ["SimulatorProcess"]

_URL = re.compile(r"(http://\S+/v1)")


class SimulatorProcess:
    """Start, find and stop a simulator subprocess on a loopback port."""

    def __init__(
        self,
        config: SimulatorConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        die_with_owner: bool = True,
        fork: bool = False,
    ) -> None:
        self.config = config
        self.host = host
        self.port = port
        self.die_with_owner = die_with_owner
        self.fork = fork  # (a fork of this process: see ``veeksha.forked``)
        self.base_url: str | None = None
        self._proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """Process id of the (first) server process, while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def root_url(self) -> str:
        """The server's address without ``/v1`` (for /health, /metrics, /tokenize)."""
        if self.base_url is None:
            raise RuntimeError("the simulator is not started")
        return self.base_url.removesuffix("/v1")

    def config_dict(self) -> dict[str, Any]:
        """The effective settings, for a run's metadata."""
        return {
            "target": "simulator",
            "base_url": self.base_url,
            **self.config.model_dump(mode="json"),
            # (a credential the simulator checks is never written out: the run's key)
            "required_headers": masked_headers(self.config.required_headers),
        }

    def start(self, timeout: float = 30.0) -> str:
        """Spawn the server, wait for its address and a healthy ``/health``; the base URL."""
        self.spawn()
        return self.wait_ready(timeout)

    def spawn(self) -> None:
        """Start the server process and return at once (``wait_ready`` waits for it): its
        start-up then runs beside whatever the caller does meanwhile."""
        if self._proc is not None:
            raise RuntimeError("the simulator is already started")
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop())
        args = [
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--settings-json",  # (validated here: the server's process reads it as it is)
            self.config.model_dump_json(),
        ]
        if self.die_with_owner:  # a SIGKILLed owner must not leave the server running
            args += ["--parent-pid", str(os.getpid())]
        if self.fork:
            self._proc = ForkedProcess(
                functools.partial(_forked_main, args),
                "veeksha-sim",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                start_new_session=True,
            )
            return
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "veeksha.simulator", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 30.0) -> str:
        """Wait (up to ``timeout`` seconds) for the spawned server's address and a healthy
        ``/health``; the base URL. On failure the server is stopped and ``TargetError`` says
        why."""
        if self._proc is None:
            raise RuntimeError("the simulator is not spawned")
        if self.base_url is not None:
            return self.base_url
        deadline = time.monotonic() + timeout + self.config.loading_s  # (503s until loaded)
        try:
            self.base_url = self._read_address(deadline)
            self._wait_healthy(deadline)
        except BaseException:
            self.stop()
            raise
        return self.base_url

    def _failure(self, what: str) -> TargetError:
        detail = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            detail = self._stderr.read().decode(errors="replace").strip()[-2000:]
        return TargetError(f"simulator {what}" + (f":\n{detail}" if detail else ""))

    def _read_address(self, deadline: float) -> str:
        proc = self._proc
        assert proc is not None
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            buf = b""
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._failure("did not report its address in time")
                if sel.select(left):
                    data = os.read(proc.stdout.fileno(), 4096)
                    if not data:
                        proc.wait(timeout=5)
                        raise self._failure(f"exited with code {proc.returncode}")
                    buf += data
                    found = _URL.search(buf.decode(errors="replace"))
                    if found:
                        return found.group(1)

    def _wait_healthy(self, deadline: float) -> None:
        url = self.root_url + "/health"
        while True:
            try:
                answer = fetch("GET", url, timeout_s=max(deadline - time.monotonic(), 0.1))
                if answer.ok:
                    return
                problem = f"HTTP {answer.status}"
            except TargetError as exc:
                problem = str(exc)
            if time.monotonic() >= deadline:
                raise self._failure(f"not healthy at {url}: {problem}")
            time.sleep(0.02)

    def terminate(self) -> None:
        """Ask the server to stop (SIGTERM) without waiting: ``stop`` then waits for the rest."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL the whole process group."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                deadline = time.monotonic() + grace
                _wait_for_eof(proc.stdout, grace)  # (its exit, without Popen.wait's polling)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            # the group is ours (start_new_session): stragglers die with it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> SimulatorProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _forked_main(args: list[str]) -> None:
    """The server in a fork of its owner (``veeksha.forked``): what only the simulator uses is
    imported here, in its own process, not by the owner before the fork."""
    from veeksha.simulator.__main__ import main

    main(args)


def _wait_for_eof(stream: IO[bytes] | None, timeout: float) -> None:
    """Read ``stream`` (the server's standard output) until its end, which comes when the
    server's processes have exited, or ``timeout`` seconds pass."""
    if stream is None:
        return
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(left) and not os.read(stream.fileno(), 65536):
                return
