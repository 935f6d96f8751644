"""Reads stamped with the kernel's receive time: a socket transport of our own for ``_Conn``.

uvloop's transports read with a plain ``read()`` and the protocol can only stamp a read with the
time the loop got round to it: at many streams the server's writes come in bursts, the loop reads
them one connection after another, and the last read of a burst is stamped milliseconds after its
bytes arrived. Here the socket has ``SO_TIMESTAMPNS`` set and is read with ``recvmsg``: the
kernel hands back, as an ``SCM_TIMESTAMPNS`` control message, the time (``CLOCK_REALTIME``) at
which the last segment of the read reached the socket. ``KernelStampTransport`` converts it to
``CLOCK_MONOTONIC`` with the offset between the two clocks and hands the bytes to the protocol's
``received_at(data, t_ns)``. The offset is sampled per connection, at its first read and then at
most every ``OFFSET_TTL_NS`` (100 ms), as the narrowest of three or more brackets (monotonic,
wall, monotonic: the monotonic time after the wall clock's, so a stamp is later, never earlier,
by at most the bracket, a fraction of a microsecond; ``clock_offset_ns``); the reads in between
share it, so the stamps of one stream keep the kernel's order. (Sampled at every read, a pause
between the two clock reads moved that read's stamp alone: under load a read stamped 0.3 ms late
came after its successor's.)
A wall clock stepped is seen within 100 ms; until then its stamps fall out of range (below).
Chunks that reach the socket before the worker reads it are merged by the kernel and share the
newest one's time.

A stamp is never later than the read's own monotonic time (a wall clock stepped back) nor earlier
than ``protocol.sent_at`` (the request's write; a wall clock stepped forward): such a stamp is
a time nobody observed, so it is clamped to the nearer bound and the protocol is told
(``stamp_clamped()``, off the common path): ``http1._Conn`` counts it on its exchange, and the
count reaches the request's row (``chunk_stamps_clamped``), summary.json
(``run.chunk_stamps_clamped``), run.log and the ``lifecycle_delays`` check. Without a control
message (a kernel without it) the read's own time is used, as with uvloop. Linux switches its
receive stamps on for the host from a work queue after the first socket asks, so segments that
arrive before that carry none: a worker switches them on before it says it is ready, and holds
them on while it lives (``hold_stamps_on``), whatever its connections do.

The rest is what ``_Conn`` needs of a transport: ``write`` sends at once and buffers what the
socket did not take, flushed when it is writable; ``close`` stops reading and writing, closes the
socket and calls ``connection_lost`` once, on the next loop pass; EOF calls
``connection_lost(None)``, a socket error ``connection_lost(exc)``. ``open_stamped`` connects
(an IP literal directly; a host name resolved once a process) with ``TCP_NODELAY``.
Cost: ~1.3 µs a read more than uvloop's own transport (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

__all__ = [
    "KERNEL_STAMPS_SUPPORTED",
    "OFFSET_TTL_NS",
    "KernelStampTransport",
    "StampedProtocol",
    "chunk_timestamps",
    "clock_offset_ns",
    "hold_stamps_on",
    "open_stamped",
]

_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_SCM_TIMESTAMPNS = _SO_TIMESTAMPNS  # (the control message's type is the option's number)
KERNEL_STAMPS_SUPPORTED = sys.platform.startswith("linux")
_READ_SIZE = 256 * 1024  # (as uvloop's read buffer)
# one buffer for every read of the process (a fresh 256 KiB per read would be an mmap each)
_BUFFER = bytearray(_READ_SIZE)
_VIEW = memoryview(_BUFFER)
_BUFFERS = [_BUFFER]
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 64
_monotonic_ns = time.monotonic_ns
_realtime_ns = time.time_ns
#: How long a connection's wall-to-monotonic offset is used before it is sampled again.
OFFSET_TTL_NS = 100_000_000
_BRACKETS = 3
#: A bracket this narrow is taken as unpaused; until one is seen, up to ``_MAX_BRACKETS`` are tried.
_NARROW_NS = 2_000
_MAX_BRACKETS = 12


def clock_offset_ns() -> int:
    """``CLOCK_MONOTONIC − CLOCK_REALTIME`` now, from the narrowest of at least ``_BRACKETS``
    brackets (monotonic, wall, monotonic), taken at the bracket's end: never less than the true
    offset, and more than it by the bracket's width. A loaded machine can pause every one of three
    (the error then reaches every stamp until the next sample), so brackets are taken until one
    is at most ``_NARROW_NS`` wide, ``_MAX_BRACKETS`` at most."""
    best_width = best = -1
    for taken in range(1, _MAX_BRACKETS + 1):
        before = _monotonic_ns()
        real = _realtime_ns()
        after = _monotonic_ns()
        if best_width < 0 or after - before < best_width:
            best_width, best = after - before, after - real
        if taken >= _BRACKETS and best_width <= _NARROW_NS:
            break
    return best


def hold_stamps_on(timeout_s: float = 1.0) -> tuple[list[socket.socket], bool]:
    """Switch the kernel's receive stamps on for the host and hold them on: a loopback
    connection that asks for them, read until a read carries a stamp (up to ``timeout_s``).
    Linux switches them on from a work queue after the first socket asks (and off after the
    last one closes), so reads in between carry none and get their read's own time. Returns
    the connection's sockets, to keep open while stamps are wanted (closed: the hold ends),
    and whether a stamp came; ``([], False)`` where there are none (not Linux, no loopback)."""
    if not KERNEL_STAMPS_SUPPORTED:
        return [], False
    held: list[socket.socket] = []
    try:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            held.append(socket.create_connection(listener.getsockname()))
            held.append(listener.accept()[0])
        reader, writer = held
        reader.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        deadline = time.monotonic() + timeout_s
        while True:
            writer.sendall(b"x")
            _, ancdata, _, _ = reader.recvmsg(16, _CMSG_SPACE)
            if ancdata or time.monotonic() >= deadline:
                return held, bool(ancdata)
            time.sleep(0.002)
    except OSError:
        for sock in held:
            sock.close()
        return [], False


# struct timespec {time_t tv_sec; long tv_nsec}, native
_timespec = struct.Struct("@ql").unpack_from


def chunk_timestamps(setting: str, api_bases: Sequence[str] = ("http://",)) -> str:
    """How chunks are stamped with ``runtime.chunk_timestamps: setting`` here, for clients at
    ``api_bases`` (a run fact): kernel, read, or mixed (kernel on the plain-http clients, read on
    the https ones, whose reads stay aiohttp's)."""
    plain = [base.startswith("http://") for base in api_bases]
    if setting != "kernel" or not KERNEL_STAMPS_SUPPORTED or not any(plain):
        return "read"
    return "kernel" if all(plain) else "mixed"


class StampedProtocol(Protocol):
    """What the transport calls: ``_Conn``'s asyncio callbacks plus a stamped read."""

    sent_at: int

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def received_at(self, data: bytes, t_ns: int) -> None: ...

    def stamp_clamped(self) -> None:
        """The stamp of the read about to be handed over was out of range and clamped."""


class KernelStampTransport(asyncio.Transport):
    """A connected non-blocking TCP socket read with ``recvmsg`` and its receive timestamps."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: StampedProtocol
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._out = bytearray()  # what the socket did not take yet
        self._closing = False
        self._lost = False
        self._recv = sock.recvmsg_into
        self._received = protocol.received_at
        self._offset = 0  # monotonic − wall, sampled at the first read, then every TTL
        self._offset_until = 0
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            n, ancdata, _, _ = self._recv(_BUFFERS, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._abort(exc)
            return
        if not n:
            self._abort(None)  # EOF
            return
        data = _VIEW[:n].tobytes()
        if ancdata:
            t = _monotonic_ns()
            if t >= self._offset_until:
                self._offset = clock_offset_ns()
                t = _monotonic_ns()  # (after the sample: no stamp is later than the read)
                self._offset_until = t + OFFSET_TTL_NS
            sec, nsec = _timespec(ancdata[0][2])
            stamp = sec * 1_000_000_000 + nsec + self._offset
            if stamp > t or stamp < self._protocol.sent_at:
                stamp = t if stamp > t else self._protocol.sent_at
                self._protocol.stamp_clamped()
            self._received(data, stamp)
            return
        self._received(data, _monotonic_ns())

    # ------------------------------------------------------------------------------ writing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        if self._out:
            self._out += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._abort(exc)
            return
        if sent < len(data):
            self._out += memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._abort(exc)
            return
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self._fd)

    def get_write_buffer_size(self) -> int:
        return len(self._out)

    # ------------------------------------------------------------------------------ closing

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._abort(None)

    def abort(self) -> None:
        self._abort(None)

    def _abort(self, exc: Exception | None) -> None:
        """Stop reading and writing, close the socket, ``connection_lost(exc)`` next pass."""
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
            self._out.clear()
        self._sock.close()
        self._loop.call_soon(self._call_connection_lost, exc)

    def _call_connection_lost(self, exc: Exception | None) -> None:
        if not self._lost:
            self._lost = True
            self._protocol.connection_lost(exc)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        if name == "peername":
            try:
                return self._sock.getpeername()
            except OSError:
                return default
        return default


_P = TypeVar("_P", bound=StampedProtocol)
_Address = tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]
# each origin resolved once a process (the resolver runs in a thread: GIL hand-overs at start-up)
_ADDRESSES: dict[tuple[str, int], list[_Address]] = {}


def _ip_literal(host: str, port: int) -> list[_Address]:
    """``host`` as an address when it is an IP literal (no resolver), else []."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return []
    if ip.version == 6:
        return [(socket.AF_INET6, socket.SOCK_STREAM, 0, "", (host, port, 0, 0))]
    return [(socket.AF_INET, socket.SOCK_STREAM, 0, "", (host, port))]


async def open_stamped(factory: Callable[[], _P], host: str, port: int) -> _P:
    """Connect to ``host:port`` and attach ``factory()``'s protocol to a stamped transport.

    Raises ``OSError`` as ``loop.create_connection`` would (every address tried, the last
    error raised).
    """
    loop = asyncio.get_running_loop()
    infos = _ADDRESSES.get((host, port))
    if infos is None:
        infos = _ip_literal(host, port)
        if not infos:
            infos = list(await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        _ADDRESSES[host, port] = infos
    if not infos:
        raise OSError(f"no address for {host}")
    error: OSError | None = None
    for family, type_, proto, _, address in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        protocol = factory()
        KernelStampTransport(loop, sock, protocol)
        return protocol
    assert error is not None
    raise error
