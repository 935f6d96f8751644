"""Serving the simulator: sockets, N processes on one port (SO_REUSEPORT), signals.

The first process binds the port (0 picks a free one), spawns ``processes - 1`` children that
bind the same port with SO_REUSEPORT (the kernel spreads connections across them), waits until
every child listens, then announces ``veeksha sim-server listening on http://HOST:PORT/v1`` on
stdout and serves too. SIGTERM or SIGINT stops it; it then terminates its children. Children
ignore SIGINT (the parent stops them) and die with the parent (PR_SET_PDEATHSIG) even if it is
killed outright, so no process outlives the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import uvloop

from veeksha.open_files import raise_open_file_limit
from veeksha.simulator.http import HttpConnection
from veeksha.simulator.server import SimServer
from veeksha.simulator.settings import SimSettings

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = ["ANNOUNCE", "make_socket", "serve"]

ANNOUNCE = "veeksha sim-server listening on"
_PR_SET_PDEATHSIG = 1
_CHILD_READY_TIMEOUT_S = 60.0
_BACKLOG = 4096


def make_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    """A listening, non-blocking TCP socket."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(_BACKLOG)
    sock.setblocking(False)
    return sock


async def _serve(config: SimSettings, sock: socket.socket, index: int, t0_ns: int) -> None:
    loop = asyncio.get_running_loop()
    app = SimServer(config, loop, process_index=index, t0_ns=t0_ns)
    # create_server listens again, with a backlog of 100 unless told: a burst of new
    # connections would then overflow the accept queue and wait 1 s for a SYN retransmit.
    server = await loop.create_server(lambda: HttpConnection(app), sock=sock, backlog=_BACKLOG)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if index == 0:
        loop.add_signal_handler(signal.SIGINT, stop.set)
    gc.freeze()  # startup objects never need collecting again
    gc.enable()  # (``python -m veeksha.simulator`` turns it off for the start-up)
    await stop.wait()
    server.close()  # open streams (a never-ending fault) are not waited for


def _run(config: SimSettings, sock: socket.socket, index: int, t0_ns: int) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_serve(config, sock, index, t0_ns))


def _child(
    config_json: str, host: str, port: int, index: int, t0_ns: int, ready: Connection
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    config = SimSettings.from_json(config_json)
    sock = make_socket(host, port, reuse_port=True)
    ready.send(True)
    ready.close()
    _run(config, sock, index, t0_ns)


def _stop_with_parent(parent_pid: int) -> None:
    """SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``); exit if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # it died before prctl took effect
        sys.exit(1)


def _announce(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def serve(
    config: SimSettings,
    host: str = "127.0.0.1",
    port: int = 0,
    processes: int | None = None,
    announce: Callable[[str], None] = _announce,
    parent_pid: int | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT with ``processes`` (default: ``config.processes``).

    With ``parent_pid`` (the process that started this server), the server gets SIGTERM when
    that parent dies, so a SIGKILLed ``veeksha run`` leaves no server behind.
    """
    if parent_pid is not None:
        _stop_with_parent(parent_pid)
    raise_open_file_limit()  # (a connection per client stream; its processes inherit it)
    count = processes or config.processes
    t0_ns = time.monotonic_ns()
    sock = make_socket(host, port, reuse_port=count > 1)
    port = sock.getsockname()[1]
    children: list[Any] = []
    try:
        waits = []
        if count > 1:  # (one process, the default, never loads multiprocessing)
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
        for index in range(1, count):
            receiver, sender = ctx.Pipe(duplex=False)
            child = ctx.Process(
                target=_child,
                args=(config.to_json(), host, port, index, t0_ns, sender),
                name=f"veeksha-sim-{index}",
                daemon=True,
            )
            child.start()
            sender.close()
            children.append(child)
            waits.append(receiver)
        for receiver in waits:
            if not receiver.poll(_CHILD_READY_TIMEOUT_S):
                raise RuntimeError("a simulator process did not start")
            receiver.recv()
        shown = f"[{host}]" if ":" in host else host
        announce(f"{ANNOUNCE} http://{shown}:{port}/v1")
        _run(config, sock, 0, t0_ns)
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.join(5)
            if child.is_alive():
                child.kill()
                child.join(5)
