"""The link between the main process and one worker: a Unix stream socket pair, framed msgpack.

Topology: ``WorkerPool`` creates one ``socketpair(AF_UNIX, SOCK_STREAM)`` per worker before
spawning it; the child inherits its end (``pass_fds``) and finds the descriptor number in its
``WorkerSpawn``. Both directions use the one connection: ``WorkItem`` and ``Stop`` to the worker,
``WorkerReady`` and ``Result`` back. No broker, no temporary files, no background threads: a
message is one ``send`` on one side and one ``recv`` on the other, from the event loop. (pyzmq
used here before cost an I/O thread per process, woken for every message: ~0.07 CPU-ms per
request over both processes, and two more context switches on the way of every request.)

Framing: a 4-byte little-endian length, then one msgpack array of tagged messages, so a sender
may batch (the pool sends the items of one loop pass as one frame; workers flush Results once
per loop iteration) and a receiver decodes a frame in one call.

``Link`` is non-blocking both ways. ``send`` writes at once when it can; what the kernel does
not take waits in order in a user-space queue, written when the socket is writable again, so
``send`` never blocks and never drops (the run itself bounds what is queued). Reading happens in
a reader callback (``start``) or synchronously (``drain``: everything buffered now, e.g. the last
Results of a worker that just died). End of stream (the peer exited or closed) is reported once
through ``on_closed``.

The bulk link (``packet_pair``, ``send_packet``): a second pair per worker, of Unix *packet*
sockets (``SOCK_SEQPACKET``), for the Results nobody waits for (``WorkItem.deferrable``). A frame
is one packet: the kernel takes it whole or not at all, so a worker never blocks on it nor
leaves half a frame behind (``send_packet`` returns False and the worker sends the frame on the
normal link instead). The main process never watches it: it reads it with ``Link.drain`` when
it is awake anyway (``WorkerPool.collect``). What the worker sent is in the kernel's buffer at
once and stays readable after the worker died, until the main process reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from veeksha.dispatch.messages import FromWorker, ToWorker

__all__ = [
    "Link",
    "encode_frame",
    "from_worker_decoder",
    "packet_pair",
    "send_packet",
    "socket_pair",
    "to_worker_decoder",
]

T = TypeVar("T")

_HEADER = 4
_READ_BYTES = 1 << 18
# The bulk link's send buffer (the kernel caps it at net.core.wmem_max): what a worker may have
# sent there that the main process has not read yet, a few thousand Results.
_BULK_BUFFER_BYTES = 1 << 22
_encoder = msgspec.msgpack.Encoder()


def to_worker_decoder() -> msgspec.msgpack.Decoder[list[ToWorker]]:
    """Decoder of frames main → worker."""
    return msgspec.msgpack.Decoder(list[ToWorker])


def from_worker_decoder() -> msgspec.msgpack.Decoder[list[FromWorker]]:
    """Decoder of frames worker → main."""
    return msgspec.msgpack.Decoder(list[FromWorker])


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of Unix stream sockets; the second end is inheritable (for a child)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    theirs.set_inheritable(True)
    return ours, theirs


def packet_pair() -> tuple[socket.socket, socket.socket]:
    """The bulk link: a connected pair of Unix packet sockets; the second end is inheritable
    and has a large send buffer (see the module doc)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with contextlib.suppress(OSError):
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _BULK_BUFFER_BYTES)
    theirs.set_inheritable(True)
    return ours, theirs


def send_packet(sock: socket.socket, messages: list[Any]) -> bool:
    """Send ``messages`` as one frame in one packet on a non-blocking packet socket, at once or
    not at all: False when the kernel would not take it now (full, too large, peer gone)."""
    frame = encode_frame(messages)
    if len(frame) > _READ_BYTES:  # (the reader takes a packet in one buffer of this size)
        return False
    try:
        sock.send(frame)
    except OSError:  # (BlockingIOError included: the buffer is full)
        return False
    return True


def encode_frame(messages: list[Any]) -> bytearray:
    """One frame: the length header, then the msgpack array of ``messages``."""
    frame = bytearray(_HEADER)
    _encoder.encode_into(messages, frame, _HEADER)
    frame[:_HEADER] = (len(frame) - _HEADER).to_bytes(_HEADER, "little")
    return frame


class Link(Generic[T]):
    """One end of a framed duplex link over a connected stream socket (see the module doc).

    ``on_batch(messages)`` gets the messages of every complete frame one read brought, oldest
    first, synchronously from the loop's reader callback (or from ``drain``); it must not block.
    """

    __slots__ = (
        "_buf",
        "_decode",
        "_loop",
        "_on_batch",
        "_on_closed",
        "_queue",
        "_rbuf",
        "_reading",
        "_rview",
        "_writing",
        "closed",
        "sock",
    )

    def __init__(
        self,
        sock: socket.socket,
        decoder: msgspec.msgpack.Decoder[list[T]],
        on_batch: Callable[[list[T]], None],
        on_closed: Callable[[], None] | None = None,
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self._decode = decoder.decode
        self._on_batch = on_batch
        self._on_closed = on_closed
        self._buf = bytearray()  # the start of a frame whose end has not arrived
        # Reads land in one buffer, reused: recv(256 KiB) allocated a fresh bytes object each
        # time, above malloc's mmap threshold: mmap, page faults, mremap, munmap per read.
        self._rbuf = bytearray(_READ_BYTES)
        self._rview = memoryview(self._rbuf)
        self._queue: deque[memoryview] = deque()  # accepted by send, not yet by the kernel
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._writing = False
        self.closed = False  # the peer's end of stream was seen, or close() was called

    # ------------------------------------------------------------------------------- sending

    def send(self, messages: list[Any]) -> None:
        """Send ``messages`` as one frame; never blocks (the rest is written when possible)."""
        if self.closed:
            return
        frame = encode_frame(messages)
        if not self._queue:
            try:
                sent = self.sock.send(frame)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:  # the peer is gone: its exit is reported by its supervisor
                return
            if sent == len(frame):
                return
            self._queue.append(memoryview(frame)[sent:])
        else:
            self._queue.append(memoryview(frame))
        self._want_write()

    @property
    def pending_bytes(self) -> int:
        """Bytes accepted by ``send`` and not yet taken by the kernel."""
        return sum(len(chunk) for chunk in self._queue)

    def _want_write(self) -> None:
        if not self._writing and self._loop is not None and not self._loop.is_closed():
            self._writing = True
            self._loop.add_writer(self.sock.fileno(), self._on_writable)

    def _on_writable(self) -> None:
        queue = self._queue
        try:
            while queue:
                chunk = queue[0]
                sent = self.sock.send(chunk)
                if sent < len(chunk):
                    queue[0] = chunk[sent:]
                    return
                queue.popleft()
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            queue.clear()
        self._stop_writing()

    def _stop_writing(self) -> None:
        if self._writing and self._loop is not None and not self._loop.is_closed():
            self._loop.remove_writer(self.sock.fileno())
        self._writing = False

    def flush_blocking(self, timeout_s: float) -> bool:
        """Write everything queued, waiting up to ``timeout_s``; True when all of it left."""
        deadline = time.monotonic() + timeout_s
        self._stop_writing()
        try:
            while self._queue:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.sock.settimeout(remaining)
                chunk = self._queue[0]
                sent = self.sock.send(chunk)
                if sent < len(chunk):
                    self._queue[0] = chunk[sent:]
                else:
                    self._queue.popleft()
        except OSError:
            return False
        finally:
            with contextlib.suppress(OSError):
                self.sock.setblocking(False)
        return True

    # ------------------------------------------------------------------------------- receiving

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Read on ``loop`` from now on (and write there what ``send`` could not)."""
        self._loop = loop
        if not self.closed:
            self._reading = True
            loop.add_reader(self.sock.fileno(), self._on_readable)
        if self._queue:
            self._want_write()

    def drain(self) -> list[T]:
        """Read and decode everything buffered now, without waiting; returns the messages."""
        out: list[T] = []
        while not self.closed and self._read_into(out):
            pass
        return out

    def _on_readable(self) -> None:
        out: list[T] = []
        self._read_into(out)
        if out:
            self._on_batch(out)

    def _read_into(self, out: list[T]) -> bool:
        """One ``recv``: its whole frames decoded into ``out``; False if nothing more came."""
        try:
            n = self.sock.recv_into(self._rbuf)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            n = 0
        if not n:
            self._eof()
            return False
        self._frames(self._rview[:n], out)  # (decoded messages do not refer to the buffer)
        return True

    def _frames(self, data: memoryview, out: list[T]) -> None:
        buf = self._buf
        if not buf:
            # the common case: the read holds whole frames; decode from it without copying
            view = memoryview(data)
            pos, end = 0, len(data)
            while end - pos >= _HEADER:
                size = int.from_bytes(view[pos : pos + _HEADER], "little")
                if end - pos - _HEADER < size:
                    break
                out.extend(self._decode(view[pos + _HEADER : pos + _HEADER + size]))
                pos += _HEADER + size
            if pos < end:
                buf += view[pos:]
            return
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= _HEADER:
            size = int.from_bytes(buf[pos : pos + _HEADER], "little")
            if end - pos - _HEADER < size:
                break
            out.extend(self._decode(buf[pos + _HEADER : pos + _HEADER + size]))  # (a copy)
            pos += _HEADER + size
        del buf[:pos]

    def _eof(self) -> None:
        already = self.closed
        self._detach()
        if not already and self._on_closed is not None:
            self._on_closed()

    def _detach(self) -> None:
        self.closed = True
        if self._loop is not None and not self._loop.is_closed():
            if self._reading:
                self._loop.remove_reader(self.sock.fileno())
            self._stop_writing()
        self._reading = False
        self._writing = False

    def close(self) -> None:
        """Stop reading and writing and close the socket (queued bytes are dropped)."""
        if self.sock.fileno() < 0:
            return
        self._detach()
        self._queue.clear()
        self.sock.close()
