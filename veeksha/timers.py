"""Timers at absolute monotonic times, so the traffic loop can run on a real or a fake clock.

Two mechanisms behind one interface (``Timers.call_at_ns``):

- **loop timers** (``loop.call_later``): portable, but uvloop's timers have millisecond
  resolution and the loop's clock is cached per iteration, so a callback fires up to ~1 ms late
  (or, relative to the true deadline, early).
- **precise** (Linux, the default there): one ``timerfd`` on CLOCK_MONOTONIC (the clock of
  ``time.monotonic_ns``) armed at the earliest deadline with nanosecond resolution and watched by
  the event loop like any socket. The kernel wakes the loop's ``epoll`` at the deadline (timer
  slack set to 1 µs for the process' main thread), the due callbacks run in deadline order, and
  the descriptor is re-armed for the next one. Nothing spins: an idle run costs no CPU, and a
  wake-up costs one ``timerfd_settime`` (re-arming the descriptor, or disarming it when nothing
  is left, resets its expiration count, which is what makes it readable: it is never read). A
  deadline already due is run with ``call_soon``, as the loop timers would.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from veeksha.clock import Clock

__all__ = ["Cancellable", "LoopTimers", "Timers", "precise_timers_available"]

_NS = 1_000_000_000
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1
_PR_SET_TIMERSLACK = 29


class Cancellable(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None: ...


class Timers(Protocol):
    """Calls ``callback`` once the clock reaches ``when_ns`` (at once if it already has)."""

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> Cancellable: ...


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


_libc: Any = None


def _load_libc() -> Any:
    global _libc  # noqa: PLW0603 - loaded once per process
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.timerfd_settime.argtypes = (
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        )
        _libc = libc
    return _libc


def precise_timers_available() -> bool:
    """Whether this platform has ``timerfd`` (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return hasattr(_load_libc(), "timerfd_create")
    except OSError:
        return False


class _Entry:
    """One scheduled callback of ``LoopTimers`` in precise mode (in the heap as
    ``(when_ns, seq, entry)``: ordered by C tuple comparisons, not a Python ``__lt__``)."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class LoopTimers:
    """Timers on an asyncio event loop, at the clock's ns (see the module docstring).

    ``precise`` None chooses the timerfd mechanism where available. Call ``close`` when done
    (it releases the descriptor; pending callbacks never run).
    """

    __slots__ = (
        "_armed_ns",
        "_clock",
        "_fd",
        "_heap",
        "_loop",
        "_seq",
        "_settime",
        "_spec",
        "_spec_ref",
        "precise",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, clock: Clock, precise: bool | None = None
    ) -> None:
        self._loop = loop
        self._clock = clock
        self.precise = precise_timers_available() if precise is None else precise
        self._fd = -1
        self._heap: list[tuple[int, int, _Entry]] = []
        self._seq = itertools.count()
        self._armed_ns = 0
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)  # (made once: passed on every arm)
        if self.precise:
            libc = _load_libc()
            self._settime = libc.timerfd_settime
            fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "timerfd_create failed")
            self._fd = fd
            with contextlib.suppress(AttributeError, OSError):
                libc.prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)  # 1 µs instead of 50 µs
            loop.add_reader(fd, self._on_fire)

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> Cancellable:
        if not self.precise:
            delay = (when_ns - self._clock.now_ns()) / _NS
            return self._loop.call_later(max(0.0, delay), callback)
        if when_ns <= time.monotonic_ns():
            return self._loop.call_soon(callback)
        entry = _Entry(callback)
        heap = self._heap
        heapq.heappush(heap, (when_ns, next(self._seq), entry))
        if heap[0][2] is entry:
            self._arm(when_ns)
        return entry

    def close(self) -> None:
        """Stop watching the descriptor and close it; later timers fall back to loop timers."""
        self.precise = False
        if self._fd >= 0:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
        self._heap.clear()

    def __del__(self) -> None:
        if self._fd >= 0:
            if not self._loop.is_closed():
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1

    def _arm(self, when_ns: int) -> None:
        """Arm the descriptor at ``when_ns`` (0: disarm it); either resets its expirations."""
        if when_ns == self._armed_ns:
            return
        self._armed_ns = when_ns
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(when_ns, _NS)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None):
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _on_fire(self) -> None:
        self._armed_ns = -1  # (what fired: armed again below, or disarmed, in every case)
        heap = self._heap
        now = time.monotonic_ns()
        while heap and (heap[0][2].cancelled or heap[0][0] <= now):
            entry = heapq.heappop(heap)[2]
            if not entry.cancelled:
                entry.cancelled = True  # a later cancel() is a no-op
                entry.callback()
                now = time.monotonic_ns()
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        self._arm(heap[0][0] if heap else 0)  # (which also clears the readiness)
