"""How a run stops: its traffic's stop (the end, a timeout, ``runtime.max_errors``), Ctrl-C,
SIGTERM and SIGHUP during the traffic and during the set-up before it, a managed server that
exits, the worker pool giving up; and the same signals held while the run writes its end.

``RunStop`` is a mixin of the run (``veeksha.engine.run``): it works on the run's own state.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veeksha.clock import MonotonicClock
from veeksha.engine.loop import TrafficLoop
from veeksha.engine.outcome import RunOutcome
from veeksha.engine.runlog import RunLog
from veeksha.errors import VeekshaError
from veeksha.scenario.models import Scenario

if TYPE_CHECKING:
    from veeksha.dispatch.inprocess import InProcessPool
    from veeksha.dispatch.pool import WorkerPool
    from veeksha.server.managed import ManagedServer

__all__ = [
    "RunStop",
    "SetUpSignals",
    "after_set_up",
    "interruptible_set_up",
    "signals_held",
    "while_cleaning_up",
]

_NS = 1_000_000_000


class RunStop:
    """Stops the run's traffic, for whatever reason, and says why (run.log, the console)."""

    scenario: Scenario
    run_dir: Path
    clock: MonotonicClock
    log: RunLog
    outcome: RunOutcome
    traffic: TrafficLoop | None
    pool: WorkerPool | InProcessPool | None
    signals: int
    signal_in_drain: bool
    _drain_task: asyncio.Task[None] | None

    def _on_stop(self, reason: str) -> None:
        grace = self.scenario.runtime.post_timeout_grace_seconds
        in_flight = 0 if self.traffic is None else len(self.traffic.in_flight)
        if reason == "errors" and self.traffic is not None:  # (runtime.max_errors, ...)
            message = f"{self.traffic.stop_detail}: the run stops, keeping what it has"
            self._say(message)
            self.outcome.interrupted = True
            self.outcome.extra.setdefault("error", message)
        self.log.info(f"stopping ({reason}): {in_flight} in flight, grace {grace:g} s")
        if grace >= 0 and self._drain_task is None:
            self._drain_task = asyncio.get_running_loop().create_task(self._drain(grace))

    async def _drain(self, grace_s: float) -> None:
        assert self.pool is not None
        await self.pool.stop(grace_s=grace_s)
        # Every worker's request has its result now; what is still in flight is answered in
        # this loop, not by a worker (a tool node's latency), and its grace is over too: cut.
        # (It held the run for the tool's whole latency, a second Ctrl-C included.)
        if self.traffic is not None and self.traffic.in_flight:
            self.traffic.abandon_in_flight("cancelled")

    def _on_signal(self, signum: int = signal.SIGINT) -> None:
        self.signals += 1
        self.outcome.interrupted = True
        traffic = self.traffic
        assert traffic is not None
        if self.signals == 1:
            grace = self.scenario.runtime.post_timeout_grace_seconds
            how = _SIGNAL_WORDS.get(signum, "")
            if traffic.stopping:  # in the drain: the grace already runs
                self.signal_in_drain = True
                waits = f"have what is left of their {grace:g} s"
                waits = "are awaited" if grace < 0 else "were stopped" if grace == 0 else waits
                self._say(
                    f"interrupted{how} after the traffic stopped ({traffic.stop_reason}): the"
                    f" {len(traffic.in_flight)} in flight {waits} (interrupt again to stop them"
                    " at once)"
                )
                return
            waits = f"get {grace:g} s to finish"
            waits = "are awaited" if grace < 0 else "are stopped" if grace == 0 else waits
            self._say(
                f"interrupted{how}: no new requests; the {len(traffic.in_flight)} in flight"
                f" {waits} (interrupt again to stop them at once)"
            )
            traffic.stop("interrupted")
        elif self._drain_task is None or self.signals >= 2:
            if self.signals == 2:
                self._say("interrupted again: the requests in flight are stopped now")
            task = asyncio.get_running_loop().create_task(self._drain(0.0))
            self._drain_task = self._drain_task or task

    def _on_server_exit(self, server: ManagedServer, fd: int, t0_ns: int) -> None:
        """The managed server exited during the traffic: every request from now on would fail
        (refused), so the run stops, keeping what it has (exit 3)."""
        asyncio.get_running_loop().remove_reader(fd)
        at_s = (self.clock.now_ns() - t0_ns) / _NS
        message = (
            f"the managed server exited (code {server.exit_code()}) {at_s:.3f} s after t0:"
            f" the run stops; its log: {server.log_path}"
        )
        self._say(message)
        self.outcome.interrupted = True
        self.outcome.extra.setdefault("error", message)
        if self.traffic is not None:
            self.traffic.stop("server_exited")

    def _say(self, message: str) -> None:
        """A line for run.log and for the console, even a quiet run's (a signal's answer)."""
        self.log.warning(message)
        sys.stderr.write(f"{message}\n")
        sys.stderr.flush()

    def _on_fatal(self, error: VeekshaError) -> None:
        """The worker pool gave up (workers keep dying): stop, keep what was collected."""
        self.outcome.interrupted = True
        self.outcome.extra["error"] = str(error)
        if self.traffic is not None:
            self.traffic.stop("worker_failure")
            self.traffic.abandon_in_flight("worker_lost")


@contextlib.contextmanager
def signals_held(
    say: Callable[[str], None],
    run_dir: Path,
    stops: Sequence[int] = (signal.SIGINT, signal.SIGTERM),
    restore: Mapping[int, Any] | None = None,
) -> Iterator[None]:
    """Ctrl-C (one of ``stops``: SIGINT, SIGTERM, SIGHUP) while a run writes its end (the
    last rows, the evaluation, summary.json) is held until the end is written, then raised
    (``KeyboardInterrupt``): the run is whole, and a sweep or a search runs nothing more. A
    second one raises at once, saying so (the evaluation may then be incomplete). The handlers
    in ``restore`` (default: those in force on entry) are put back on the way out."""
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)
        name = signal.Signals(signum).name
        if len(held) > 1:
            say(
                f"{name} again: stopped at once; the rows are kept, but the evaluation may be"
                f" missing or incomplete: `veeksha report {run_dir}` evaluates the run again"
            )
            raise KeyboardInterrupt
        say(
            f"{name} while the run's results are written: they are"
            " finished first (again: stop at once, `veeksha report RUN_DIR` evaluates later)"
        )

    previous = {sig: signal.signal(sig, hold) for sig in stops}
    if restore is not None:
        previous.update(restore)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held:
        say(f"the run's results are written: {run_dir}")
        raise KeyboardInterrupt


def interruptible_set_up() -> None:
    """Ctrl-C during the set-up (before the run's own handlers, at t0): see ``SetUpSignals``."""
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            signal.signal(signal.SIGINT, SetUpSignals(handler))


class SetUpSignals:
    """Ctrl-C (and SIGTERM, SIGHUP: ``veeksha.terminal``) during a run's set-up.

    The first is asyncio's Runner's (``runner``): the run's task is cancelled, which takes
    effect at its next ``await``, so a step that blocks (the server tokenizer's calibration, a
    trace's first read, pregenerated sessions) ends first: it is said at once that the set-up
    stops and how to stop at once. (Raising KeyboardInterrupt at once instead can land inside
    an import, where Python swallows it and may leave the import lock held: a lost Ctrl-C, then
    a hang.) The second raises KeyboardInterrupt where the process is (the Runner's second);
    any later one, while that clean-up runs (the run's ``finally`` blocks, asyncio's own code,
    where it would leave the event loop half closed), is ignored: the clean-up is bounded (the
    workers and the simulator are killed after a short grace). ``run_scenario`` puts back the
    handler of before the run."""

    def __init__(self, runner: Callable[[int, Any], Any]) -> None:
        self.runner = runner
        self.count = 0

    def __call__(self, signum: int, frame: Any) -> Any:
        self.count += 1
        if self.count == 1:
            with contextlib.suppress(OSError):  # (not sys.stderr: not reentrant)
                os.write(2, _SET_UP_STOPS)
        else:
            signal.signal(signal.SIGINT, while_cleaning_up)
        return self.runner(signum, frame)


_SET_UP_STOPS = (
    b"interrupted: the set-up stops after its current step (interrupt again to stop at once)\n"
)


def after_set_up(handler: Any) -> Any:
    """``handler``, or what the set-up's own Ctrl-C stood in for."""
    return handler.runner if isinstance(handler, SetUpSignals) else handler


def while_cleaning_up(signum: int, frame: object) -> None:
    """Ctrl-C while an interrupted set-up cleans up: it is already stopping."""


#: how the stop message names a signal other than Ctrl-C
_SIGNAL_WORDS: dict[int, str] = {
    signal.SIGTERM: " (SIGTERM)",
    signal.SIGHUP: " (SIGHUP: the terminal closed)",
}
