"""``WorkerPool``: spawn, feed and supervise the HTTP worker processes.

Everything here runs on the main process' event loop, in callbacks: one reader per worker on its
link (a Unix socket pair made before the spawn: see ``channel.Link``) and one on its pidfd, which
becomes readable when the process exits. No threads, no polling, no files.

Lifecycle
    ``start`` spawns every worker (``python -m veeksha.dispatch.worker``: a fresh interpreter that
    imports only the worker's modules, never the caller's ``__main__``; the ``WorkerSpawn``
    config, API key included, goes through its stdin; or adopts a worker launched ahead of the
    run, ``veeksha.dispatch.launch``, and sends it the same) and waits until each has said
    ``WorkerReady``. ``submit`` hands a ``WorkItem`` to the ready worker with the fewest requests
    in flight (ties: the lowest slot) and sends it at once, or, with ``flush=False``, keeps it
    in that worker's outbox until ``flush``: the traffic loop flushes once per pass, so a pass's
    items travel as one frame per worker. ``stop`` sends ``Stop(grace_s)`` to
    every worker, collects their last Results, reaps them and kills any straggler.

Exactly one Result per submitted item
    Each worker's in-flight request ids are tracked; a Result is delivered only if its id was
    still in flight on that worker, so a late Result for a request already declared lost is
    dropped, never delivered twice.

Supervision
    A worker that exits while the pool runs is detected at once (pidfd). The results it sent
    before dying are drained first; every request it still had gets a synthesized
    ``Result(status="error", error_kind="worker_lost")`` (sent_at and received_at unknown, set to
    dispatched_at) and a replacement is spawned on the same CPUs under a new worker id. More than
    ``max_deaths`` deaths within ``death_window_s`` stop the pool: ``error`` is set, ``on_fatal``
    is called with a ``RunAbortedError``, the remaining workers are stopped, and ``submit``
    raises from then on.

Results nobody waits for (the bulk links)
    A ``WorkItem`` marked ``deferrable`` (nothing in the run reacts to its success: see
    ``engine.deferral``) has its successful Result sent on the worker's bulk link
    (``channel.packet_pair``), which the event loop does not watch, so it wakes nobody. The pool
    reads every bulk link when the main process is awake anyway: before each batch of a normal
    link, and when the traffic loop calls ``collect`` (its arrival timer) if the last read is
    at least 3/4 of ``BULK_READ_INTERVAL_S`` old (so one read takes several Results); and,
    while a deferrable request is in flight, on a timer ``BULK_READ_INTERVAL_S`` after the last
    read, pushed back by the reads themselves. No Result waits unread longer than that. A
    worker that exits is read to the end of both links before any of its requests is declared
    lost, so a Result it sent is never lost with it.

The ``on_results`` contract
    ``on_results(results)`` is called on the pool's event loop (the one ``start`` ran on), from a
    loop callback, synchronously, with one or more Results in arrival order: once per drained
    batch of the results socket, once per worker death (its lost requests), and from ``stop``.
    It must not block; it may call ``submit``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import msgspec

from veeksha.dispatch.channel import Link, from_worker_decoder
from veeksha.dispatch.launch import WorkerLaunch, launch_worker
from veeksha.dispatch.messages import FromWorker, Result, Stop, WorkerReady, WorkerStats, WorkItem
from veeksha.dispatch.settings import WorkerSettings, WorkerSpawn
from veeksha.errors import ConfigurationError, RunAbortedError, VeekshaError
from veeksha.forked import ForkedProcess
from veeksha.timers import WakeUps

__all__ = ["WorkerPool", "WorkerSettings"]

_EXIT_MARGIN_S = 5.0  # beyond grace_s, for a worker to cancel, flush and exit
_LATE_RESULTS_S = 1.0  # after every worker exited, for their last Results to arrive
# The longest a deferrable request's Result waits in its bulk link, unread, while the main
# process sleeps: its row's processed_at is up to this much later (docs/engine.md).
BULK_READ_INTERVAL_S = 0.020
# ``collect`` reads only when the last read is at least this share of the interval old
_COLLECT_AFTER = 0.75


class _Handle:
    """The pool's view of one worker process."""

    __slots__ = (
        "backlog",
        "bulk",
        "cpus",
        "deferred",
        "exited",
        "in_flight",
        "link",
        "outbox",
        "pid",
        "pidfd",
        "proc",
        "ready",
        "sender",
        "slot",
        "start_error",
        "worker_id",
    )

    def __init__(
        self,
        worker_id: int,
        slot: int,
        cpus: list[int],
        link: Link[FromWorker],
        bulk: Link[FromWorker] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.slot = slot
        self.cpus = cpus
        self.link = link  # read from spawn on; closed once the process exited
        self.bulk = bulk  # its bulk link: read by WorkerPool.collect, never watched
        self.deferred: set[int] = set()  # deferrable requests in flight (may answer on bulk)
        self.proc: subprocess.Popen[bytes] | ForkedProcess | None = None
        self.pid = 0
        self.pidfd = -1
        self.sender: Link[FromWorker] | None = None  # the link, once the worker is ready
        self.in_flight: dict[int, int] = {}  # request_id -> dispatched (or release) time
        self.backlog: list[WorkItem] = []  # submitted before the worker was ready
        self.outbox: list[WorkItem] = []  # submitted with flush=False, sent by flush()
        self.start_error = ""
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.exited: asyncio.Future[int] = loop.create_future()


class WorkerPool:
    """N pinned worker processes sending requests; see the module docstring for the contract."""

    def __init__(
        self,
        settings: WorkerSettings,
        num_workers: int,
        worker_cpus: list[list[int]],
        on_results: Callable[[list[Result]], None],
        *,
        on_fatal: Callable[[VeekshaError], None] | None = None,
        max_deaths: int = 3,
        death_window_s: float = 10.0,
        more_settings: list[WorkerSettings] | None = None,
        launched: WorkerLaunch | None = None,
    ) -> None:
        if num_workers < 1:
            raise ValueError("num_workers must be at least 1")
        if worker_cpus and len(worker_cpus) != num_workers:
            raise ValueError("worker_cpus needs one entry per worker (or none)")
        self.settings = settings
        self.more_settings = more_settings or []  # clients 1, 2, … (WorkItem.client)
        self.num_workers = num_workers
        self._worker_cpus = worker_cpus or [[] for _ in range(num_workers)]
        self._on_results = on_results
        self._on_fatal = on_fatal
        self._max_deaths = max_deaths
        self._death_window_ns = int(death_window_s * 1e9)
        self._deaths: collections.deque[int] = collections.deque()
        self._handles: dict[int, _Handle] = {}  # every worker ever spawned, by id
        self._live: list[_Handle] = []  # spawned, not exited
        self._ready: list[_Handle] = []  # live and ready, by slot
        self._dirty: list[_Handle] = []  # handles with a non-empty outbox
        self._next_id = 0
        self._in_flight = 0
        self._idle: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._running = False  # start() succeeded: deaths are replaced from now on
        self._stopping = False
        self._closed = False
        self.error: VeekshaError | None = None
        # workers launched before the settings were known: the first spawns adopt them
        self._launched = launched
        self._bulk_timer: asyncio.Handle | None = None  # armed while any h.deferred
        self._bulk_due = 0.0  # (its loop time)
        self._bulk_read_at = 0.0  # loop time of the last collect
        self._wake_ups = WakeUps()  # the workers' release timers' (WorkerStats), as they stop
        self.deferred_results = 0  # Results taken from the bulk links (nobody waited for them)

    # ---------------------------------------------------------------------------------- public

    def wake_ups(self) -> dict[str, Any] | None:
        """summary.json's ``run.release_wake_ups``: the release timers' wake-ups of every worker
        that reported them as it stopped (None if none did: no wake-up lead, or none stopped)."""
        return self._wake_ups.to_dict() if self._wake_ups.workers else None

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet answered, over all workers."""
        return self._in_flight

    def in_flight_by_worker(self) -> dict[int, int]:
        """Requests in flight per live worker id."""
        return {h.worker_id: len(h.in_flight) for h in self._live}

    @property
    def worker_pids(self) -> dict[int, int]:
        """Process id of each live worker, by worker id."""
        return {h.worker_id: h.pid for h in self._live}

    async def start(self, timeout: float = 60.0) -> None:  # noqa: ASYNC109 - the public contract
        """Spawn every worker and wait until all are ready.

        Raises ``ConfigurationError`` naming the worker and its reason when one cannot start
        (or ``timeout`` seconds pass); then no worker is left running.
        """
        if self._started:
            raise RuntimeError("WorkerPool.start called twice")
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        try:
            handles = [self._spawn(slot) for slot in range(self.num_workers)]
            if self._launched is not None:  # (more launched than this pool has workers)
                self._launched.close()
            waits = [h.ready for h in handles]
            done, pending = await asyncio.wait(
                waits, timeout=timeout, return_when=asyncio.FIRST_EXCEPTION
            )
            for fut in done:
                fut.result()
            if pending:
                slow = [h.worker_id for h in handles if not h.ready.done()]
                raise ConfigurationError(f"worker(s) {slow} did not start within {timeout:g} s")
            self._running = True
        except BaseException:
            self._stopping = True
            await self._kill_all()
            self._close()
            raise

    def submit(self, item: WorkItem, *, flush: bool = True) -> int:
        """Hand ``item`` to the least-loaded ready worker; return that worker's id.

        With ``flush`` (the default) it is sent at once; without, it waits in the worker's
        outbox until ``flush()``, so the items of one event-loop pass travel as one frame
        per worker (one encode, one send). Never blocks. Raises ``RunAbortedError`` once the
        pool has failed or is stopping.
        """
        if self._stopping or self.error is not None:
            raise self.error or RunAbortedError("the worker pool is stopping")
        best: _Handle | None = None
        best_n = 1 << 62
        for h in self._ready:
            n = len(h.in_flight)
            if n < best_n:
                best, best_n = h, n
                if n == 0:
                    break
        if best is None:  # only replacements starting: queue on the least-loaded one
            if not self._live:
                raise RunAbortedError("no worker process is running")
            best = min(self._live, key=lambda h: len(h.in_flight))
        # (a held item's release time, should it be lost unanswered: see _lose)
        best.in_flight[item.request_id] = max(item.dispatched_at_ns, item.not_before_ns)
        self._in_flight += 1
        if item.deferrable and best.bulk is not None:
            best.deferred.add(item.request_id)
            if self._bulk_timer is None:
                self._arm_bulk_timer()
        if best.sender is None:
            best.backlog.append(item)
        elif flush:
            best.sender.send([item])
        else:
            if not best.outbox:
                self._dirty.append(best)
            best.outbox.append(item)
        return best.worker_id

    def flush(self) -> None:
        """Send every outbox (items submitted with ``flush=False``): one frame per worker."""
        dirty, self._dirty = self._dirty, []
        for h in dirty:
            items, h.outbox = h.outbox, []
            if h.sender is not None and items:  # (an exited worker's: _lose reports them)
                h.sender.send(items)

    def collect(self) -> None:
        """Read every bulk link now (see the module docstring); what came goes to
        ``on_results`` at once, as one batch. Call it only where ``on_results`` may run."""
        if self._bulk_timer is None:  # no deferrable request in flight
            return
        assert self._loop is not None
        if self._loop.time() - self._bulk_read_at < BULK_READ_INTERVAL_S * _COLLECT_AFTER:
            return  # read lately: the next wake-up (or the timer) takes them, more at once
        results = self._bulk_results()
        if results:
            self._deliver(results)

    async def stop(self, grace_s: float = 0.0) -> None:
        """Stop every worker: in-flight requests get ``grace_s`` seconds, then are cancelled.

        Every outstanding request gets its Result (through ``on_results``) before this returns;
        every worker process has been reaped, stragglers killed. Idempotent.
        """
        if self._closed or not self._started:
            return
        self._stopping = True
        self.flush()  # items submitted before stop reach their worker ahead of Stop
        for h in list(self._live):
            if h.sender is not None:
                h.sender.send([Stop(grace_s)])
            elif h.proc is not None:  # still starting: nothing was sent to it
                self._signal(h, signal.SIGKILL)
        exits = [h.exited for h in self._live]
        if exits:
            _, pending = await asyncio.wait(exits, timeout=max(0.0, grace_s) + _EXIT_MARGIN_S)
            if pending:
                await self._kill_all()
        assert self._idle is not None
        if self._in_flight:
            self._idle.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), _LATE_RESULTS_S)
        for h in list(self._handles.values()):
            if h.ready.done():
                self._lose(h, f"worker {h.worker_id} exited without answering")
            else:  # stopped while starting: its requests were never sent
                self._lose(h, "the pool stopped before its worker started", "cancelled")
        self._close()

    async def __aenter__(self) -> WorkerPool:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # ------------------------------------------------------------------------------- spawning

    def _spawn(self, slot: int) -> _Handle:
        assert self._loop is not None
        worker_id = self._next_id
        self._next_id += 1
        # a worker launched ahead (veeksha.dispatch.launch) if one waits, else one started now
        launched = self._launched.take() if self._launched is not None else None
        launched = launched or launch_worker()
        proc = launched.proc
        link = Link(launched.link, from_worker_decoder(), self._on_batch)
        bulk = Link(launched.bulk, from_worker_decoder(), self._on_batch)  # (drained, not started)
        h = _Handle(worker_id, slot, self._worker_cpus[slot], link, bulk)
        spawn = WorkerSpawn(
            worker_id=worker_id,
            parent_pid=os.getpid(),
            cpus=h.cpus,
            channel_fd=launched.channel_fd,
            bulk_fd=launched.bulk_fd,
            settings=self.settings,
            more_settings=self.more_settings,
        )
        link.start(self._loop)
        assert proc.stdin is not None
        try:
            proc.stdin.write(msgspec.msgpack.encode(spawn))
            proc.stdin.close()
        except OSError:  # it died already; the pidfd below reports it
            pass
        h.proc = proc
        h.pid = proc.pid
        h.pidfd = os.pidfd_open(proc.pid)
        assert self._loop is not None
        self._loop.add_reader(h.pidfd, self._on_exit, h)
        self._handles[worker_id] = h
        self._live.append(h)
        return h

    # ------------------------------------------------------------------------------ callbacks

    def _on_batch(self, batch: list[FromWorker]) -> None:
        # awake anyway: what waits in the bulk links comes first (it is older), in one batch
        results = self._bulk_results() if self._bulk_timer is not None else []
        self._take(batch, results)
        if results:
            self._deliver(results)

    def _take(self, batch: list[FromWorker], results: list[Result]) -> None:
        """The Results of ``batch`` still in flight, appended to ``results``."""
        handles = self._handles
        for msg in batch:
            if type(msg) is Result:
                h = handles.get(msg.worker_id)
                if h is not None and h.in_flight.pop(msg.request_id, None) is not None:
                    if h.deferred:
                        h.deferred.discard(msg.request_id)
                    results.append(msg)
            elif isinstance(msg, WorkerReady):
                self._on_ready(msg)
            elif isinstance(msg, WorkerStats):
                self._wake_ups.add(_wake_ups_of(msg))

    def _deliver(self, results: list[Result]) -> None:
        self._in_flight -= len(results)
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()
        self._on_results(results)

    def _bulk_results(self) -> list[Result]:
        """Everything the bulk links hold now (Results still in flight)."""
        loop = self._loop
        assert loop is not None
        now = self._bulk_read_at = loop.time()
        timer = self._bulk_timer
        if timer is not None and self._bulk_due - now < BULK_READ_INTERVAL_S * 0.9:
            # pushed back: while the traffic's own wake-ups read often enough, it never fires
            # (a wasted wake-up costs more than moving it: ~40 against ~3 CPU-µs)
            timer.cancel()
            self._bulk_due = now + BULK_READ_INTERVAL_S
            self._bulk_timer = loop.call_at(self._bulk_due, self._on_bulk_timer)
        results: list[Result] = []
        for h in self._live:
            if h.deferred and h.bulk is not None:
                self._take(h.bulk.drain(), results)
        self.deferred_results += len(results)
        return results

    def _arm_bulk_timer(self) -> None:
        assert self._loop is not None
        at = self._bulk_due = max(self._bulk_read_at + BULK_READ_INTERVAL_S, self._loop.time())
        self._bulk_timer = self._loop.call_at(at, self._on_bulk_timer)

    def _on_bulk_timer(self) -> None:
        """No read for a while: read now, and come back while a deferrable request is in
        flight (no read is ever more than ``BULK_READ_INTERVAL_S`` after the previous one)."""
        self._bulk_timer = None
        results = self._bulk_results()
        if any(h.deferred for h in self._live):
            self._arm_bulk_timer()
        if results:
            self._deliver(results)

    def _on_ready(self, msg: WorkerReady) -> None:
        h = self._handles.get(msg.worker_id)
        if h is None or h.exited.done():
            return
        if msg.error:
            h.start_error = msg.error
            return
        h.cpus = msg.cpus
        h.sender = h.link
        if h.backlog:
            h.sender.send(h.backlog)
            h.backlog = []
        self._ready.append(h)
        self._ready.sort(key=lambda x: x.slot)
        if not h.ready.done():
            h.ready.set_result(None)

    def _on_exit(self, h: _Handle) -> None:
        assert self._loop is not None
        assert h.proc is not None
        self._loop.remove_reader(h.pidfd)
        os.close(h.pidfd)
        h.pidfd = -1
        code = h.proc.wait()
        if h in self._live:
            self._live.remove(h)
        if h in self._ready:
            self._ready.remove(h)
        # What it sent before exiting is in its sockets: read them to the end, then close them.
        batch = h.link.drain()
        if h.bulk is not None:
            batch += h.bulk.drain()
            h.bulk.close()
        if batch:
            self._on_batch(batch)
        h.deferred.clear()
        h.link.close()
        h.sender = None
        h.outbox = []  # never sent; still in in_flight, so _lose reports them
        how = _describe_exit(code)
        if not h.ready.done():
            why = h.start_error or "see its error output above"
            h.ready.set_exception(
                ConfigurationError(
                    f"worker {h.worker_id} (CPUs {h.cpus or 'any'}) {how} before it was "
                    f"ready: {why}"
                )
            )
            h.ready.exception()  # retrieved here: a replacement's future may have no waiter
        h.exited.set_result(code)
        if self._stopping or not self._running:
            return
        # Unexpected: what it sent before dying was read above; the rest is lost. Replace it.
        self._lose(h, f"worker {h.worker_id} (pid {h.pid}) {how}")
        now = time.monotonic_ns()
        self._deaths.append(now)
        while self._deaths and now - self._deaths[0] > self._death_window_ns:
            self._deaths.popleft()
        if len(self._deaths) > self._max_deaths:
            self._fail(
                RunAbortedError(
                    f"{len(self._deaths)} worker processes died within "
                    f"{self._death_window_ns / 1e9:g} s (last: worker {h.worker_id} {how})"
                )
            )
        else:
            self._spawn(h.slot)

    # -------------------------------------------------------------------------------- helpers

    def _lose(self, h: _Handle, why: str, kind: str = "worker_lost") -> None:
        """Synthesize a Result (error/worker_lost, or cancelled) for every request ``h`` has."""
        if not h.in_flight:
            return
        lost, h.in_flight = h.in_flight, {}
        h.backlog = []
        h.deferred.clear()
        now = time.monotonic_ns()
        results = [
            Result(
                request_id=request_id,
                worker_id=h.worker_id,
                status="error" if kind == "worker_lost" else "cancelled",
                received_at_ns=min(dispatched_at, now),
                sent_at_ns=min(dispatched_at, now),
                completed_at_ns=now,
                error_kind=kind,
                error_message=why,
            )
            for request_id, dispatched_at in lost.items()
        ]
        self._in_flight -= len(results)
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()
        self._on_results(results)

    def _fail(self, error: VeekshaError) -> None:
        if self.error is not None:
            return
        self.error = error
        self._stopping = True
        self.flush()
        for h in self._live:
            if h.sender is not None:
                h.sender.send([Stop(0.0)])
            else:
                self._signal(h, signal.SIGKILL)
        if self._on_fatal is not None:
            self._on_fatal(error)

    def _signal(self, h: _Handle, sig: int) -> None:
        if h.proc is not None and h.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                h.proc.send_signal(sig)

    async def _kill_all(self) -> None:
        for h in list(self._live):
            self._signal(h, signal.SIGKILL)
        exits = [h.exited for h in self._live]
        if exits:
            await asyncio.wait(exits, timeout=_EXIT_MARGIN_S)
        for h in list(self._live):  # the pidfd never fired (should not happen): reap directly
            if h.proc is not None:
                h.proc.wait()
            if self._loop is not None and h.pidfd >= 0:
                self._loop.remove_reader(h.pidfd)
                os.close(h.pidfd)
                h.pidfd = -1
            self._live.remove(h)

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ready.clear()
        if self._bulk_timer is not None:
            self._bulk_timer.cancel()
            self._bulk_timer = None
        for h in self._handles.values():
            h.link.close()
            if h.bulk is not None:
                h.bulk.close()
            h.sender = None


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with code {code}"


def _wake_ups_of(msg: WorkerStats) -> WakeUps:
    wake_ups = WakeUps(workers=1)
    wake_ups.count, wake_ups.late = msg.count, msg.late
    wake_ups.max_ns, wake_ups.lead_max_ns = msg.max_ns, msg.lead_max_ns
    wake_ups.histogram = dict(msg.histogram)
    return wake_ups
