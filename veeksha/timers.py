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
  deadline already due is run with ``call_soon``, as the loop timers would, unless one due no
  later still waits in the heap for its wake-up (a loaded loop reached both late): it then
  joins the heap behind it, so callbacks always run in deadline order.

**A wake-up lead** (``lead=True``, the workers' release timers): a loop that sleeps wakes late
by the kernel's and the machine's wake-up latency, measured at ~100-400 µs on these 2-core VMs
(longer the longer it slept; a hypervisor has to run the idle virtual CPU again). With a lead
the descriptor is armed that much *before* the deadline, and the callbacks due within the lead
when it fires wait for their time in a busy loop on ``time.monotonic_ns`` (never early). The
lead follows the wake-ups it sees: the 99th percentile of how late the descriptor's last 32
firings were noticed, at most 1 ms and at most 2 % of the time between firings (``WakeLead``),
so a loop that wakes from a deep sleep gets a longer lead, and a busy loop, which notices its
timers at once, or one woken often, a short one (and spins little). ``VEEKSHA_RELEASE_SPIN=0``
turns it off.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import ctypes
import heapq
import itertools
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from veeksha.clock import Clock

__all__ = [
    "SPIN_ENV",
    "Cancellable",
    "LoopTimers",
    "Timers",
    "WakeLead",
    "WakeUps",
    "precise_timers_available",
]

_NS = 1_000_000_000
_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1
_PR_SET_TIMERSLACK = 29
_log2 = math.log2
_insort = bisect.insort
_bisect_left = bisect.bisect_left

SPIN_ENV = "VEEKSHA_RELEASE_SPIN"  # "0": no wake-up lead (see the module docstring)


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
        # timerfd_settime without argtypes: its arguments (the descriptor, the flags, a byref
        # of an _Itimerspec, None) are passed as int, int, pointer and NULL all the same,
        # and the call, once a release, costs ~0.7 µs less than with them converted
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


class WakeUps:
    """What a run's wake-ups were: how many, how many came later than the lead of their time,
    the slowest, the longest lead, and their latencies in quarter-octave buckets (bucket ``b``
    holds ``2^(b/4)`` to ``2^((b+1)/4)`` µs, bucket 0 everything under 1.19 µs): a worker's
    account, summed over a run's workers (``add``) and its shards (``summed``)."""

    __slots__ = ("count", "histogram", "late", "lead_max_ns", "max_ns", "workers")

    def __init__(self, workers: int = 0) -> None:
        self.workers = workers  # (how many accounts were summed)
        self.count = 0
        self.late = 0
        self.max_ns = 0
        self.lead_max_ns = 0
        self.histogram: dict[int, int] = {}

    def record(self, latency_ns: int, lead_ns: int) -> None:
        """One wake-up ``latency_ns`` late, woken ``lead_ns`` ahead of its time
        (``WakeLead.observe`` does the same inline: keep the two alike)."""
        self.count += 1
        if latency_ns > lead_ns:
            self.late += 1
        self.max_ns = max(self.max_ns, latency_ns)
        self.lead_max_ns = max(self.lead_max_ns, lead_ns)
        micros = latency_ns / 1000
        bucket = int(4 * math.log2(micros)) if micros >= 1 else 0
        self.histogram[bucket] = self.histogram.get(bucket, 0) + 1

    def add(self, other: WakeUps) -> None:
        self.workers += other.workers
        self.count += other.count
        self.late += other.late
        self.max_ns = max(self.max_ns, other.max_ns)
        self.lead_max_ns = max(self.lead_max_ns, other.lead_max_ns)
        for bucket, n in other.histogram.items():
            self.histogram[bucket] = self.histogram.get(bucket, 0) + n

    def quantile_us(self, q: float) -> float:
        """The ``q`` quantile of the latencies, as its bucket's lower bound (within 19 %)."""
        rank = q * (self.count - 1)
        seen = 0
        for bucket in sorted(self.histogram):
            seen += self.histogram[bucket]
            if seen > rank:
                return 2 ** (bucket / 4) if bucket else 0.0
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        """summary.json's ``run.release_wake_ups`` (docs/evaluation_outputs.md)."""
        return {
            "workers": self.workers,
            "count": self.count,
            "later_than_lead": self.late,
            "p50_us": round(self.quantile_us(0.5), 1),
            "p99_us": round(self.quantile_us(0.99), 1),
            "max_us": round(self.max_ns / 1000, 1),
            "lead_max_us": round(self.lead_max_ns / 1000, 1),
            "histogram": {str(b): n for b, n in sorted(self.histogram.items())},
        }

    @classmethod
    def summed(cls, summaries: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
        """Several ``to_dict`` summaries (a distributed run's shards') as one; None for none."""
        total = cls()
        for summary in summaries:
            if summary:
                total.add(cls.from_dict(summary))
        return total.to_dict() if total.workers else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WakeUps:
        wake_ups = cls(int(data["workers"]))
        wake_ups.count = int(data["count"])
        wake_ups.late = int(data["later_than_lead"])
        wake_ups.max_ns = round(float(data["max_us"]) * 1000)
        wake_ups.lead_max_ns = round(float(data["lead_max_us"]) * 1000)
        wake_ups.histogram = {int(b): int(n) for b, n in data["histogram"].items()}
        return wake_ups


class WakeLead:
    """How long before a deadline a sleeping loop must be woken to be awake at it.

    The 99th percentile of the last ``window`` wake-up latencies seen (``start_ns`` until there
    are 8), within ``[0, cap_ns]`` and within ``budget`` of the mean time between wake-ups (the
    busy loop before each deadline is at most the lead, so it takes at most that share of the
    loop's time: at most 2 % of a core at any rate).
    """

    __slots__ = (
        "_gap_ns",
        "_last_ns",
        "_order",
        "_recent",
        "budget",
        "cap_ns",
        "ns",
        "wake_ups",
        "window",
    )

    QUANTILE = 0.99

    def __init__(
        self,
        start_ns: int = 150_000,
        window: int = 32,
        cap_ns: int = 1_000_000,
        budget: float = 0.02,
    ) -> None:
        self.ns = start_ns
        self.cap_ns = cap_ns
        self.window = window
        self.budget = budget
        self._recent: deque[int] = deque()  # (in the order seen)
        self._order: list[int] = []  # (the same, sorted)
        self._last_ns = 0
        self._gap_ns = 0.0  # (a moving mean of the time between wake-ups)
        self.wake_ups = WakeUps(workers=1)  # (this loop's whole run, for the run's summary)

    def observe(self, latency_ns: int, now_ns: int) -> None:
        """A wake-up at ``now_ns``, ``latency_ns`` after the time it was armed for."""
        # (WakeUps.record inline, and comparisons where max/min would be called: this runs at
        # every release, and the builtins' calls were a third of its time)
        w = self.wake_ups
        lead = self.ns
        count = w.count = w.count + 1
        if latency_ns > lead:
            w.late += 1
        if latency_ns > w.max_ns:  # noqa: PLR1730 - (see above)
            w.max_ns = latency_ns
        if lead > w.lead_max_ns:  # noqa: PLR1730
            w.lead_max_ns = lead
        bucket = int(4 * _log2(latency_ns / 1000)) if latency_ns >= 1000 else 0
        histogram = w.histogram
        histogram[bucket] = histogram.get(bucket, 0) + 1
        last = self._last_ns
        if last:
            gap = now_ns - last
            self._gap_ns = gap if count == 2 else 0.9 * self._gap_ns + 0.1 * gap
        self._last_ns = now_ns
        recent, order = self._recent, self._order
        recent.append(latency_ns)
        _insort(order, latency_ns)
        n = len(order)
        if n > self.window:
            del order[_bisect_left(order, recent.popleft())]
            n -= 1
        if n >= 8:
            quantile = order[min(n - 1, int(self.QUANTILE * n))]
            affordable = int(self.budget * self._gap_ns)
            ns = self.cap_ns if self.cap_ns < affordable else affordable
            if quantile < ns:  # noqa: PLR1730
                ns = quantile
            self.ns = ns if ns > 0 else 0


class LoopTimers:
    """Timers on an asyncio event loop, at the clock's ns (see the module docstring).

    ``precise`` None chooses the timerfd mechanism where available. ``lead`` wakes the loop
    ahead of each deadline and waits for it in a busy loop (precise mode only; see the module
    docstring); ``self.lead`` is then its ``WakeLead``. Call ``close`` when done (it releases the
    descriptor; pending callbacks never run).
    """

    __slots__ = (
        "_arm_at_ns",
        "_armed_lead_ns",
        "_armed_ns",
        "_clock",
        "_fd",
        "_heap",
        "_loop",
        "_seq",
        "_settime",
        "_spec",
        "_spec_ref",
        "lead",
        "precise",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        clock: Clock,
        precise: bool | None = None,
        lead: bool = False,
    ) -> None:
        self._loop = loop
        self._clock = clock
        self.precise = precise_timers_available() if precise is None else precise
        self._fd = -1
        self._heap: list[tuple[int, int, _Entry]] = []
        self._seq = itertools.count()
        self._armed_ns = 0
        self._arm_at_ns = 0  # when the descriptor fires: the deadline less the lead (0: stale)
        self._armed_lead_ns = 0  # the lead the descriptor was armed with
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
        spin = lead and self.precise and os.environ.get(SPIN_ENV, "1") != "0"
        self.lead: WakeLead | None = WakeLead() if spin else None

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> Cancellable:
        if not self.precise:
            delay = (when_ns - self._clock.now_ns()) / _NS
            return self._loop.call_later(max(0.0, delay), callback)
        heap = self._heap
        if when_ns <= time.monotonic_ns() and not (heap and heap[0][0] <= when_ns):
            return self._loop.call_soon(callback)
        # (due already, behind one due no later that waits for the descriptor's wake-up: in
        # the heap after it, or call_soon would release it first, out of deadline order)
        entry = _Entry(callback)
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
        """Arm the descriptor for ``when_ns`` (0: disarm it), less the lead if there is one;
        either resets its expirations."""
        if when_ns == self._armed_ns:
            return
        self._armed_ns = when_ns
        at = when_ns
        if when_ns and self.lead is not None:
            self._armed_lead_ns = self.lead.ns
            at = when_ns - self._armed_lead_ns
            # a firing is a wake-up to learn from only if it was armed for the future
            self._arm_at_ns = at if at > time.monotonic_ns() else 0
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(at, _NS)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, self._spec_ref, None):
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _on_fire(self) -> None:
        self._armed_ns = -1  # (what fired: armed again below, or disarmed, in every case)
        heap = self._heap
        now = horizon = time.monotonic_ns()
        if self.lead is not None:
            if self._arm_at_ns:
                self.lead.observe(now - self._arm_at_ns, now)
                self._arm_at_ns = 0
            # waited for in the busy loop: what is due within the lead of *this* wake-up (not
            # of each callback's end, or a dense train of deadlines would never let I/O in);
            # at least the lead it was armed with, so that what armed it is released now even
            # when observe() just shortened the lead (else a second wake-up for the same item)
            lead = self.lead.ns
            horizon = now + (lead if lead > self._armed_lead_ns else self._armed_lead_ns)
        while heap and (heap[0][2].cancelled or heap[0][0] <= max(now, horizon)):
            when, _, entry = heapq.heappop(heap)
            if not entry.cancelled:
                while now < when:  # (within the lead: awake, and never early)
                    now = time.monotonic_ns()
                entry.cancelled = True  # a later cancel() is a no-op
                entry.callback()
                now = time.monotonic_ns()
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        self._arm(heap[0][0] if heap else 0)  # (which also clears the readiness)
