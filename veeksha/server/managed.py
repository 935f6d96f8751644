"""``ManagedServer``: the server under test started, waited for, logged and stopped by veeksha.

>>> with ManagedServer.for_scenario(scenario, Path("sweep/server.log")) as server:  # doctest: +SKIP
...     for point in points:  # several runs, one server lifecycle
...         run_scenario(point, folder_of(point), server=server)

A run given a running ``ManagedServer`` (``run_scenario(..., server=...)``) uses it and leaves
it running; a run whose scenario has a ``server:`` section and is given none starts its own,
logging into its run folder's server.log, and stops it after the run. Runs may share a server
when :func:`server_identity` is equal for their scenarios (the experiment layer's grouping key).

The process tree: veeksha → supervisor (``veeksha.server.supervise``, in a session of its own)
→ the server, in a process group of its own. The supervisor stops the server's whole group when
veeksha closes its stdin or dies (the kernel closes it then), so no server outlives veeksha,
whatever kills it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from veeksha.errors import ConfigurationError, TargetError
from veeksha.isolated import isolated_module_command
from veeksha.net import fetch
from veeksha.redact import Redactors, secret_values
from veeksha.server.commands import server_argv
from veeksha.server.server_log import ServerLog
from veeksha.server.supervise import PID_LINE

if TYPE_CHECKING:
    from veeksha.scenario.models import Scenario
    from veeksha.scenario.server import ManagedServerConfig
    from veeksha.scenario.simulator import SimulatorConfig

__all__ = ["SERVER_LOG", "ManagedServer", "managed_model", "server_identity"]

SERVER_LOG = "server.log"
#: vLLM serves ``POST /reset_prefix_cache`` only with this set (``prefix_cache_reset``).
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
#: a key of the scenario and a message about it → the message said where the key is written
KeyMessage = Callable[[tuple[str | int, ...], str], str]
_POLL_S = (0.05, 0.1, 0.2, 0.5)  # between readiness probes: quick at first, then calmer
_PROBE_TIMEOUT_S = 2.0


def managed_model(scenario: Scenario) -> str:
    """The model a client without its own asks the scenario's managed server for: the
    client's, else the ``server:`` section's, else the simulator's (a ``veeksha_sim`` server
    serves ``simulator.model``)."""
    config = scenario.server
    return scenario.client.model or getattr(config, "model", None) or scenario.simulator.model


def server_identity(scenario: Scenario) -> str | None:
    """A key equal for scenarios whose managed servers are the same (the resolved ``server:``
    section and, for the simulator, its settings as it runs with them: the window it adopts
    from ``client.max_model_len`` included); None without a ``server:`` section."""
    if scenario.server is None:
        return None
    resolved = {"server": scenario.server.model_dump(mode="json")}
    if scenario.server.type == "veeksha_sim":
        resolved["simulator"] = _simulator_settings(scenario).model_dump(mode="json")
    return json.dumps(resolved, sort_keys=True)


def _simulator_settings(scenario: Scenario) -> SimulatorConfig:
    """What a ``veeksha_sim`` server runs with: the ``simulator:`` section, serving every model
    its clients name (each client without an api_base goes to it; ``clients:`` may name
    several), each model's window its clients' ``max_model_len`` where the section leaves its
    own out, as for the simulator ``veeksha run`` starts (``scenario.windows``)."""
    from veeksha.scenario.windows import served_simulator

    return served_simulator(scenario)


class ManagedServer:
    """One managed server process: ``start()`` (spawn, wait until ready), ``api_base``,
    ``stop()``. A context manager: started on entry, stopped on exit."""

    def __init__(
        self,
        config: ManagedServerConfig,
        log_path: Path,
        model: str,
        api_key: str | Sequence[str | None] | None = None,
        simulator: SimulatorConfig | None = None,
        at_key: KeyMessage | None = None,
    ) -> None:
        """``api_key``: the clients' key (or keys), masked in server.log; ``at_key``: says an
        error of a ``server:`` key where the scenario file has it (``Scenario.at_key``, given
        by ``for_scenario``); default: the key path alone."""
        self.config = config
        self._at: KeyMessage = at_key or _key_path_only
        self.log_path = Path(log_path)
        self.model = model
        self.host = config.host
        self.port = config.port
        # the client's key, and every secret of the server's environment (veeksha's, plus
        # ``env``): a server or its wrapper may print them (vLLM logs its --api-key, a shell
        # with ``set -x`` its whole environment)
        keys = [api_key] if api_key is None or isinstance(api_key, str) else list(api_key)
        self._secrets = [
            key for key in [*keys, *secret_values({**os.environ, **config.env})] if key
        ]
        self._redact = Redactors(self._secrets)
        self._simulator = simulator
        self._supervisor: subprocess.Popen[bytes] | None = None
        self._log: ServerLog | None = None
        self._server_pid: int | None = None
        self.argv: list[str] = []

    @classmethod
    def for_scenario(cls, scenario: Scenario, log_path: Path) -> ManagedServer:
        """The server of ``scenario``'s ``server:`` section (not started)."""
        from veeksha.dispatch.settings import client_secrets
        from veeksha.redact import header_secrets

        config = scenario.server
        if config is None:
            raise ConfigurationError("the scenario has no server: section")
        config = _cache_reset_served(config, scenario)
        simulator = _simulator_settings(scenario)
        model = managed_model(scenario)
        # every client's key (and headers' secrets) is masked in its log, whichever server the
        # client goes to
        keys = [key for _, client in scenario.client_entries() for key in client_secrets(client)]
        if simulator is not None:  # (its command line holds the values it requires)
            keys += header_secrets(None, simulator.required_headers)
        return cls(config, log_path, model, keys, simulator, at_key=scenario.at_key)

    # ----------------------------------------------------------------------------- addresses

    @property
    def root_url(self) -> str:
        """``http://host:port`` as a client reaches it (a wildcard address: via loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}"

    @property
    def api_base(self) -> str:
        return self.root_url + "/v1"

    @property
    def pid(self) -> int | None:
        """The server's pid (also its process group id) once it started."""
        return self._server_pid

    @property
    def supervisor_pid(self) -> int | None:
        return None if self._supervisor is None else self._supervisor.pid

    @property
    def running(self) -> bool:
        return self._supervisor is not None and self._supervisor.poll() is None

    def exit_fd(self) -> int | None:
        """A pidfd that becomes readable when the server exits (its supervisor exits with it);
        None when it is not running or the kernel has no pidfd. The caller closes it."""
        if self._supervisor is None or self._supervisor.poll() is not None:
            return None
        try:
            return os.pidfd_open(self._supervisor.pid)
        except (AttributeError, OSError):
            return None

    def exit_code(self) -> int | None:
        """The server's exit code once it exited (None while it runs, or before it started)."""
        return None if self._supervisor is None else self._supervisor.poll()

    def describe(self) -> dict[str, object]:
        """What a run's metadata says about it (argv masked)."""
        return {
            "type": self.config.type,
            "argv": [self._redact(arg) for arg in self.argv],
            "pid": self.pid,
            "log": str(self.log_path),
        }

    # ---------------------------------------------------------------------------- lifecycle

    def start(self) -> str:
        """Spawn the server and wait until it is ready; its api_base. A ``server:`` key that
        cannot work (a program not found, a port taken, a model file missing) is refused
        before anything starts (``ConfigurationError``, exit 2); a server that exits or is not
        ready in time is stopped and ``TargetError`` (exit 2) says why, with the last lines of
        its log. Each names the key to fix, where the scenario file has it."""
        if self._supervisor is not None:
            raise RuntimeError("the server is already started")
        config = self.config
        unusable = _host_problem(self.host)
        if unusable is not None:
            raise ConfigurationError(
                self._at(
                    ("server", "host"),
                    f"{self.host!r} {unusable}: the server listens on this machine; use "
                    "127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of its "
                    "addresses",
                )
            )
        if self.port == 0:
            self.port = _free_port(self.host)
        elif _port_taken(self.host, self.port):
            # (the server started would fail to bind it, and until it exits, the one already
            # there would answer the readiness probe: the run would measure that one)
            raise ConfigurationError(
                self._at(
                    ("server", "port"),
                    f"{self.host}:{self.port} is already in use by another process (another "
                    "server?): stop it, or choose another server.port (0 picks a free one)",
                )
            )
        self.argv = server_argv(config, self.host, self.port, self._simulator)
        env = {**os.environ, **config.env}
        cwd = config.cwd
        if cwd is not None and not Path(cwd).is_dir():
            raise ConfigurationError(
                self._at(("server", "cwd"), f"{cwd!r} is not a folder: fix server.cwd")
            )
        program = self.argv[0]
        if shutil.which(program, path=env.get("PATH")) is None and not (
            os.sep in program and os.access(Path(cwd or ".") / program, os.X_OK)
        ):
            key: tuple[str | int, ...] = ("server", "executable")
            fix = (
                "fix server.executable"
                if program == _executable(config)
                else ("set server.executable (the program to run instead)")
            )
            if config.type == "command":
                key, fix = ("server", "command", 0), "fix server.command[0]"
            raise ConfigurationError(
                self._at(
                    key,
                    f"the program {program!r} was not found (PATH or the path given): "
                    f"install it or {fix}",
                )
            )
        missing = _missing_model(config)
        if missing is not None:
            raise ConfigurationError(self._at(("server", "model"), missing))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = ServerLog(self.log_path, self._redact)
        self._log.note(f"starting: {' '.join(self.argv)}")
        try:  # (the supervisor's own errors into the log, if it fails)
            with self.log_path.open("ab") as own_errors:
                self._supervisor = subprocess.Popen(
                    isolated_module_command(
                        "veeksha.server.supervise",
                        config.stop_signal,
                        repr(config.stop_timeout),
                        str(self.log_path.resolve()),
                        "--",
                        *self.argv,
                    ),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=own_errors,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                )
        except BaseException:  # (it could not be started at all)
            self._log.close()
            raise
        try:
            with _interruptible():
                self._hand_over_secrets()
                self._wait_ready(time.monotonic() + config.ready_timeout)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                self._log.note("interrupted while waiting for it to be ready")
            self.stop()
            raise
        self._log.note(f"ready at {self.root_url}")
        return self.api_base

    def _hand_over_secrets(self) -> None:
        """Send the supervisor what it masks in the server's output (its first line of input,
        not its command line, which any process of the machine can read), then read the
        server's pid from it (none: it could not start the server)."""
        supervisor = self._supervisor
        assert supervisor is not None
        assert supervisor.stdin is not None
        assert supervisor.stdout is not None
        try:
            supervisor.stdin.write(json.dumps(self._secrets).encode() + b"\n")
            supervisor.stdin.flush()
        except BrokenPipeError:  # (it died at once: its exit code and log say why)
            return
        line = supervisor.stdout.readline().decode(errors="replace")
        if line.startswith(PID_LINE):
            self._server_pid = int(line.removeprefix(PID_LINE))

    def _wait_ready(self, deadline: float) -> None:
        paths = [self.config.ready_path] if self.config.ready_path else ["/health", "/v1/models"]
        problem = "no answer yet"
        for attempt in range(1 << 30):
            if not self.running:
                fix = (
                    "server.command"
                    if self.config.type == "command"
                    else "server.model, server.args or server.env"
                )
                raise self._failure(
                    ("server", "command") if self.config.type == "command" else ("server",),
                    f"{self._exit_text()} before it was ready (its log says why: fix {fix})",
                )
            try:
                answer = fetch("GET", self.root_url + paths[0], timeout_s=_PROBE_TIMEOUT_S)
            except TargetError as exc:
                problem = str(exc)
            else:
                if answer.ok:
                    return
                problem = f"GET {paths[0]}: HTTP {answer.status}"
                if answer.status == 404 and len(paths) > 1:  # no /health: try the next path
                    paths.pop(0)
                    continue
            left = deadline - time.monotonic()
            if left <= 0:
                # (it answered, but not 2xx, on the path given: that path is the suspect)
                answered = self.config.ready_path is not None and ": HTTP " in problem
                raise self._failure(
                    ("server", "ready_path" if answered else "ready_timeout"),
                    f"was not ready within {self.config.ready_timeout:g} s ({problem}); raise "
                    "server.ready_timeout if it needs longer, or fix server.ready_path",
                )
            time.sleep(min(_POLL_S[min(attempt, len(_POLL_S) - 1)], left))

    def _exit_text(self) -> str:
        assert self._supervisor is not None
        code = self._supervisor.wait()
        if code == 127 and self.pid is None:
            return "could not be started"
        return f"exited with code {code}"

    def _failure(self, key: tuple[str | int, ...], what: str) -> TargetError:
        assert self._log is not None
        tail = self._log.tail()
        argv = " ".join(self._redact(a) for a in self.argv)
        return TargetError(
            self._at(key, f"the managed server ({argv}) {what}; its log: {self.log_path}")
            + (f"; last lines:\n{tail}" if tail else " (it wrote nothing)")
        )

    def stop(self) -> int | None:
        """Stop the server (stop_signal to its process group, SIGKILL after stop_timeout);
        its supervisor's exit code (the server's), None when it was not started."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is None:
            return None
        ended = supervisor.poll() is not None  # (by itself, before this stop)
        if supervisor.stdin is not None:  # closing it is the stop request
            with contextlib.suppress(OSError):
                supervisor.stdin.close()
        try:
            code = supervisor.wait(self.config.stop_timeout + 10.0)
        except subprocess.TimeoutExpired:  # (the supervisor itself is stuck: force it)
            for group in (self.pid, supervisor.pid):
                if group is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(group, signal.SIGKILL)
            code = supervisor.wait()
        if supervisor.stdout is not None:
            supervisor.stdout.close()
        if self._log is not None:
            self._log.close(f"{'had exited' if ended else 'stopped'} (exit code {code})")
        return code

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Ctrl-C (SIGINT, or SIGTERM) raises ``KeyboardInterrupt`` while inside, whatever handler
    was there, which comes back after. The readiness wait blocks the thread that called it: in
    a run that is the event loop's, whose SIGINT handler (``asyncio.Runner``'s) only asks the
    main task to stop at its next ``await``, so Ctrl-C was held until the server was ready or
    ``ready_timeout`` (600 s for an engine) had passed. Only in the main thread (the one
    signals reach)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in signals}

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    for sig in signals:
        signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _cache_reset_served(config: ManagedServerConfig, scenario: Scenario) -> ManagedServerConfig:
    """A vLLM server with ``VLLM_SERVER_DEV_MODE=1`` in its environment when the run empties its
    prefix cache (``prefix_cache_reset``): vLLM serves ``/reset_prefix_cache`` only then. A
    value ``server.env`` gives is kept."""
    from veeksha.scenario.server import VllmServer

    if not scenario.prefix_cache_reset.enabled or not isinstance(config, VllmServer):
        return config
    if DEV_MODE_ENV in config.env:
        return config
    return config.model_copy(update={"env": {**config.env, DEV_MODE_ENV: "1"}})


def _key_path_only(parts: tuple[str | int, ...], message: str) -> str:
    """An error of a ``server:`` key of a scenario not read from a file: the key path."""
    from veeksha.scenario.overrides import format_path

    return f"{format_path(parts)}: {message}"


def _executable(config: ManagedServerConfig) -> str | None:
    """The ``executable`` a ``server:`` section gives (None: its type's usual program)."""
    return getattr(config, "executable", None)


def _host_problem(host: str) -> str | None:
    """Why a server cannot listen on ``host`` here (not a name this machine resolves, not one
    of its addresses); None when it can (or the failure is another, a server's to report).
    (Was: a traceback from binding the port picked for it, exit 1.)"""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except socket.gaierror as exc:
            return f"is not a name this machine resolves ({exc.strerror})"
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return "is not an address of this machine"
    return None


#: what a model given as a path starts with (a Hugging Face id never does)
_PATH_STARTS = ("/", "./", "../")


def _missing_model(config: ManagedServerConfig) -> str | None:
    """Why the model of an engine's ``server:`` section cannot be served: a path (llama.cpp's
    ``-m`` always is one; vLLM's and SGLang's when it starts with ``/``, ``./`` or ``../``,
    else a Hugging Face id) that does not exist, relative to ``server.cwd`` as the server
    takes it. The engine would only fail after its start-up, in its own words. Not checked
    with a ``server.executable`` of the user's: a wrapper may run the engine where the path is
    (a container's own folders)."""
    if config.type not in ("vllm", "sglang", "llama_cpp") or getattr(config, "executable", None):
        return None
    model = config.model
    if config.type != "llama_cpp" and not model.startswith(_PATH_STARTS):
        return None
    path = Path(model)
    where = Path(config.cwd) if config.cwd else Path.cwd()
    if (where / path).exists():
        return None
    what = "GGUF file" if config.type == "llama_cpp" else "model folder"
    relative = "" if path.is_absolute() else f" (a relative path is taken from {where})"
    return f"{model!r}: no such {what}{relative}: fix server.model"


def _port_taken(host: str, port: int) -> bool:
    """Whether another process holds ``host:port`` now. Bound as a server binds it
    (SO_REUSEADDR: a port left in TIME_WAIT is free), never with SO_REUSEPORT, so a listener
    that set it is found too (a server that set it as well would share the port with it). Any
    other failure (an address not of this host, a privileged port) is the server's to report."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def _free_port(host: str) -> int:
    """A port free on ``host`` now (the server binds it right after)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
