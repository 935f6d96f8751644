"""One run of a scenario: the composition root.

Resolves the target (starting the built-in simulator when no api_base is set), builds the
session generator, starts the pinned worker pool, runs the traffic loop on uvloop, stops on
completion, timeout or signal with the configured grace, writes every row, then evaluates
(``engine.finish``; the set-up from the scenario: ``engine.run_setup``; how it stops, signals
included: ``engine.run_stop``).
It is the only module that knows both the scheduling side and the dispatch side.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import uvloop

from veeksha import __version__
from veeksha.clock import MonotonicClock
from veeksha.dispatch.affinity import plan_affinity
from veeksha.dispatch.inprocess import InProcessPool
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.dispatch.pool import WorkerPool
from veeksha.dispatch.settings import WorkerSettings, client_secrets, request_id_prefix
from veeksha.engine.cpu_wait import CpuWait
from veeksha.engine.finish import RunFinish, children_cpu_s
from veeksha.engine.launch import worker_count
from veeksha.engine.loop import TrafficLoop
from veeksha.engine.outcome import RunOutcome, exit_code_for
from veeksha.engine.pools import status_snapshot
from veeksha.engine.probe import RunProbe
from veeksha.engine.progress import ProgressLine, load_display
from veeksha.engine.recorder import RunRecorder
from veeksha.engine.run_setup import RunSetup, connection_warning
from veeksha.engine.run_stop import (
    RunStop,
    SetUpSignals,
    after_set_up,
    interruptible_set_up,
    signals_held,
    while_cleaning_up,
)
from veeksha.engine.runlog import RunLog
from veeksha.engine.server_watch import ServerWatch
from veeksha.engine.start import StartAt, agreed_t0, t0_lead_ns
from veeksha.engine.target import Target, TargetContext, describe
from veeksha.errors import ConfigurationError, RunAbortedError, VeekshaError
from veeksha.evaluate.streaming import StreamingMetrics
from veeksha.generate.spec import SessionSpec
from veeksha.plural import counted
from veeksha.record.parquet import ResultWriter, run_metadata
from veeksha.record.rows import warm_up as warm_up_rows
from veeksha.record.run_folder import write_config
from veeksha.record.trace import TraceWriter
from veeksha.scenario.loader import scenario_hash
from veeksha.scenario.models import Scenario
from veeksha.schedule.shards import ShardSpec
from veeksha.terminal import stop_signals
from veeksha.timers import LoopTimers

if TYPE_CHECKING:
    from veeksha.dispatch.launch import WorkerLaunch
    from veeksha.engine.server_watch import WatchProcess
    from veeksha.generate.traces import OpenTrace
    from veeksha.server.managed import ManagedServer
    from veeksha.server.profiler import ServerProfiler
    from veeksha.simulator.process import SimulatorProcess

__all__ = ["RunOutcome", "StartAt", "exit_code_for", "run_benchmark", "run_scenario"]

_NS = 1_000_000_000
_WORKER_START_TIMEOUT_S = 60.0


def run_benchmark(
    scenario: Scenario,
    run_dir: Path,
    quiet: bool = False,
    dry_run: bool = False,
    plots: bool = True,
    simulator: SimulatorProcess | None = None,
    *,
    shard: ShardSpec | None = None,
    start_at_wall_ns: StartAt | None = None,
    probe: RunProbe | None = None,
    evaluate: bool = True,
    workers: WorkerLaunch | None = None,
    watch_process: WatchProcess | None = None,
) -> int:
    """Run ``scenario`` into ``run_dir`` and return the process exit code (``shard``,
    ``start_at_wall_ns``, ``probe``, ``evaluate``, ``workers`` and ``watch_process``: see
    ``run_scenario``)."""
    outcome = run_scenario(
        scenario,
        run_dir,
        quiet=quiet,
        dry_run=dry_run,
        plots=plots,
        simulator=simulator,
        shard=shard,
        start_at_wall_ns=start_at_wall_ns,
        probe=probe,
        evaluate=evaluate,
        workers=workers,
        watch_process=watch_process,
    )
    if outcome.interrupted:  # even with --quiet: why the run ended early, and where its data is
        why = outcome.extra.get("error") or f"the run was {outcome.stop_reason or 'interrupted'}"
        sys.stderr.write(f"error: {why}\nresults collected so far: {run_dir}\n")
    return exit_code_for(outcome, scenario)


def run_scenario(
    scenario: Scenario,
    run_dir: Path,
    quiet: bool = False,
    dry_run: bool = False,
    plots: bool = True,
    simulator: SimulatorProcess | None = None,
    server: ManagedServer | None = None,
    *,
    shard: ShardSpec | None = None,
    start_at_wall_ns: StartAt | None = None,
    probe: RunProbe | None = None,
    evaluate: bool = True,
    workers: WorkerLaunch | None = None,
    watch_process: WatchProcess | None = None,
) -> RunOutcome:
    """Run ``scenario`` into ``run_dir`` on a uvloop event loop; returns what happened.

    ``dry_run`` sends nothing (each request completes at once inside this process, no workers:
    ``veeksha.dispatch.inprocess``); ``plots=False`` skips the evaluation's PNGs. ``simulator``:
    the built-in simulator already spawned for this run (``engine.target.spawn_simulator``),
    used and stopped by the run. ``server``: the scenario's managed server, already running
    and shared with other runs (``veeksha.server.managed``): used, left running.

    ``shard``: run one shard of a distributed experiment (docs/distributed.md): the global
    schedule is computed as on one host and only the sessions the shard owns start
    (``veeksha.schedule.shards``); every row gets the shard's index in its ``shard`` column.
    ``start_at_wall_ns``: t0 is that wall-clock instant (``time.time_ns()`` on this host, the
    driver's offset already applied), not the lead after the set-up (``engine.start.t0_lead_ns``);
    or a callable that returns
    that instant, called (in a thread: it may block, e.g. on the driver's barrier) once the
    set-up is done (workers ready, sessions' source made), so the driver can choose t0 when
    every shard is ready. ``probe``: a ``RunProbe`` the caller reads the run's state through
    (in flight, sessions started) from another thread while it goes.

    ``evaluate=False``: the run writes its rows (Parquet files, trace.jsonl) and summary.json's
    ``run`` section (with ``"evaluation": "skipped"``), and nothing else: no metrics, health
    checks, SLOs, plots or report; the outcome has no verdict (a distributed shard: the
    driver evaluates the merged run).

    ``workers``: worker processes launched for this run before its engine was imported
    (``engine.launch.launch_helpers``): the pool adopts them instead of starting its own
    (a count that differs: the missing ones are started, the extra ones killed).
    ``watch_process``: the server watch's process, launched likewise: the run's watch adopts
    it.
    """
    problems = scenario.problems()  # (a loaded scenario has none: the loader reports them)
    if problems:
        path, message = problems[0]
        where = ".".join(str(part) for part in path)
        raise ConfigurationError(f"{where}: {message}")
    run = _Run(scenario, Path(run_dir), quiet, dry_run)
    run.plots = plots
    run.evaluate = evaluate
    run.simulator = simulator
    run.server = server
    run.shard = shard
    run.start_at_wall_ns = start_at_wall_ns
    run.probe = probe
    run.launched = workers
    run.forked_helpers = workers is not None and workers.forked
    run.launched_watch = watch_process
    main = threading.current_thread() is threading.main_thread()
    sigint_before = signal.getsignal(signal.SIGINT) if main else None
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(run.execute())
    finally:  # (the set-up's handler, or the clean-up's after it was interrupted)
        now = signal.getsignal(signal.SIGINT) if main else None
        if isinstance(now, SetUpSignals) or now is while_cleaning_up:
            signal.signal(signal.SIGINT, sigint_before)


class _Run(RunSetup, RunFinish, RunStop):
    """The state of one run while it executes."""

    def __init__(self, scenario: Scenario, run_dir: Path, quiet: bool, dry_run: bool) -> None:
        self.scenario = scenario
        self.run_dir = run_dir
        self.quiet = quiet
        self.dry_run = dry_run
        self.clock = MonotonicClock()
        self.outcome = RunOutcome(run_dir)
        self.traffic: TrafficLoop | None = None
        entries = self.scenario.client_entries()
        # the status line shows each client's pools when there are several, or caps
        self._client_names: list[str] | None = (
            [name for name, _ in entries]
            if len(entries) > 1 or any(c.max_in_flight is not None for _, c in entries)
            else None
        )
        self.pool: WorkerPool | InProcessPool | None = None
        self.signals = 0
        self.began = False  # the run's signal handlers are in place (t0 is next)
        self.signal_in_drain = False  # (a stop signal after the traffic stopped at its timeout)
        self._drain_task: asyncio.Task[None] | None = None
        self.num_workers = 0
        self.main_cpu_s = 0.0
        self.children_cpu_start = 0.0
        # seconds the main process and the workers waited for a CPU during the traffic
        self.main_cpu_wait_s: float | None = None
        self.worker_cpu_wait_s: float | None = None
        self.release_wake_ups: dict[str, Any] | None = None
        self.deferred_results = 0
        self.plots = True
        self.evaluate = True
        self.trace: OpenTrace | None = None
        self.simulator: SimulatorProcess | None = None
        self.target_context: TargetContext | None = None
        self.server: ManagedServer | None = None
        self.server_metrics: dict[str, Any] | None = None  # what the scraper did (ServerWatch)
        self.profiler: ServerProfiler | None = None  # the server's profiler (server_profile)
        self.cache_reset: dict[str, Any] | None = None  # what prefix_cache_reset did
        self.watch: ServerWatch | None = None  # its process starts when the run begins
        self.shard: ShardSpec | None = None
        self.start_at_wall_ns: StartAt | None = None
        self.probe: RunProbe | None = None
        self.launched: WorkerLaunch | None = None
        self.launched_watch: WatchProcess | None = None
        self.forked_helpers = False  # (the launched processes are forks: veeksha.forked)

    async def execute(self) -> RunOutcome:
        interruptible_set_up()
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the run folder {self.run_dir}: {exc.strerror or exc}; "
                "choose a writable output_dir (or --output-dir)"
            ) from None
        if not (self.run_dir / "config.yaml").exists():
            write_config(self.run_dir, self.scenario)
        self.log = RunLog(
            self.run_dir, [s for _, c in self.scenario.client_entries() for s in client_secrets(c)]
        )
        try:
            await self._execute()
        except VeekshaError as exc:
            self.log.warning(f"run failed: {exc}")
            raise
        except (KeyboardInterrupt, asyncio.CancelledError):
            self.log.warning("interrupted (Ctrl-C, SIGTERM or SIGHUP)")
            # (Ctrl-C before t0 cancels this task: asyncio.Runner; SIGTERM, SIGHUP likewise,
            # veeksha.terminal. After it, the run's own handlers answer and the end is written)
            if not self.began:
                self._say(
                    "interrupted during the set-up, before t0: no request was sent, so the run"
                    f" folder {self.run_dir} holds no results (its run.log says how far it got)"
                )
            raise
        finally:
            self.log.close()
        return self.outcome

    async def _execute(self) -> None:
        runtime = self.scenario.runtime
        log = self.log
        log.info(
            f"veeksha {__version__}: scenario {scenario_hash(self.scenario)}, "
            f"seed {self.scenario.seed}{', dry run' if self.dry_run else ''}"
        )
        num_workers = worker_count(self.scenario)
        plan = plan_affinity(runtime.cpu_affinity, num_workers)
        # (the process' CPUs come back after the run: a sweep's or a search's next run in this
        # process plans its pinning from all of them, not from this run's main CPU)
        cpus_before = os.sched_getaffinity(0)
        if plan.main_cpus:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, plan.main_cpus)
        log.info(
            f"main process on CPUs {plan.main_cpus or 'any'}; {counted(num_workers, 'worker')}"
        )
        shortfall = connection_warning(self.scenario, num_workers)
        if shortfall is not None and not self.dry_run:
            log.warning(shortfall)
        # The built-in simulator shares the workers' CPUs, never the main process' one (it
        # would otherwise inherit the main process' pinning).
        spare = sorted({cpu for cpus in plan.worker_cpus for cpu in cpus} - set(plan.main_cpus))
        # the watch: its process launched ahead of the run (adopted), or started now, its
        # start-up beside the target's resolution and the set-up
        self.watch = ServerWatch.launch(self.scenario, self.dry_run, self.log, self.launched_watch)
        try:
            self.target_context = TargetContext(
                self.scenario,
                self.dry_run,
                spare or None,
                self.simulator,
                self.server,
                self.run_dir,
                say=self._announce,
            )
            with self.target_context as target:
                log.info(f"target: {describe(target)}")
                await self._run_with_target(target, num_workers, plan.worker_cpus)
        finally:
            if self.launched is not None:  # (those the pool did not adopt: a failed set-up)
                self.launched.close()
            if self.watch is not None:  # (the set-up failed before the run began)
                self.watch.abort()
                self.watch = None
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, cpus_before)

    def _announce(self, line: str) -> None:
        """A set-up line that may be followed by a long silence (a wait for the server): to
        run.log, and to the terminal unless quiet."""
        self.log.info(line)
        if not self.quiet:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    async def _run_with_target(
        self, target: Target, num_workers: int, worker_cpus: list[list[int]]
    ) -> None:
        configs = dict(self.scenario.client_entries())
        worker_settings, *more_settings = [
            msgspec.structs.replace(
                WorkerSettings.from_client(
                    configs[client.name],
                    client.api_base,
                    client.api_key,
                    dry_run=self.dry_run,
                    headers=client.headers,
                ),
                model=client.model,
                chunk_timestamps=self.scenario.runtime.chunk_timestamps,
                # (one run's ids, one prefix: a shard's folder has the run's name too)
                request_id_prefix=request_id_prefix(self.run_dir),
            )
            for client in target.clients
        ]
        for settings in (worker_settings, *more_settings):
            if settings.request_id_header:
                header, prefix = settings.request_id_header, settings.request_id_prefix
                self.log.info(f"request ids sent as {header}: {prefix}<request_id>")
                break
        if self.dry_run:  # nothing to send: answered in this process, no workers, no IPC
            self.pool = InProcessPool(self._on_results)
            num_workers = 0
        else:
            self.pool = WorkerPool(
                worker_settings,
                num_workers,
                worker_cpus,
                self._on_results,
                on_fatal=self._on_fatal,
                more_settings=more_settings,
                launched=self.launched,
            )
        self.num_workers = num_workers
        self.children_cpu_start = children_cpu_s()
        # The workers start up on the other core while this process makes the sessions' source.
        starting = asyncio.ensure_future(self.pool.start(timeout=_WORKER_START_TIMEOUT_S))
        try:
            await asyncio.sleep(0)  # (``start`` spawns every worker before it first waits)
            if self.watch is not None:  # (its process launched when the run began)
                self.watch.aim(self.scenario, target)
            make_session = self._session_source(target)
            warm_up_rows()  # loads the Arrow conversion code now, not at the writer's first tick
            load_display(self.quiet)  # (not in the lead before t0)
            # Set-up objects (modules, models, the prompt corpus) never die: moved out of the
            # collector's sight, so no full collection scans them mid-run (a 50-70 ms stall).
            # The command line turns the collector off for the set-up (veeksha.cli): on again.
            # No collection first (40-90 ms): the set-up's few hundred garbage objects stay;
            # a sweep's later point collects its predecessor's garbage before freezing.
            if gc.get_freeze_count():
                gc.collect()
            gc.freeze()
            gc.enable()
            await starting
            how = " (forked from this process)" if self.forked_helpers else ""
            self.log.info(f"workers ready: pids {sorted(self.pool.worker_pids.values())}{how}")
            if self.watch is not None:  # (started with the workers: ready by now, usually)
                self.watch.wait_ready()
            self._reset_prefix_caches(target)
            self._start_profile(target)
            await self._drive(target, make_session)
        finally:
            if self.profiler is not None:  # (the traffic failed before its drain stopped it)
                self.profiler.stop()
            if not starting.done():  # the set-up failed while the workers started
                starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, VeekshaError):
                await starting  # (its error, if it failed, is already on its way up)
            if self.watch is not None:  # (the set-up failed before the run began)
                self.watch.abort()
                self.watch = None
            await self.pool.stop(grace_s=0.0)

    # ------------------------------------------------------------------------------ the run

    async def _drive(self, target: Target, make_session: Callable[[int], SessionSpec]) -> None:
        scenario = self.scenario
        loop = asyncio.get_running_loop()
        run_id = self.run_dir.name
        settings = self._loop_settings()
        lead_ns = t0_lead_ns(settings.dispatch_ahead_ns)
        t0_ns, t0_wall_ns = await agreed_t0(self.start_at_wall_ns, lead_ns, self.log)
        t0_wall = datetime.fromtimestamp(t0_wall_ns // 1000 / 1e6, UTC)
        shard_index = None if self.shard is None else self.shard.index
        trace = None
        if scenario.trace_recorder.enabled:
            trace = TraceWriter(
                self.run_dir / "trace.jsonl",
                scenario.trace_recorder.include_content,
                t0_ns=t0_ns,
                clients=[name for name, _ in scenario.client_entries()],
                shard=shard_index,
                prompt_fallback=[
                    client.use_min_tokens_prompt_fallback for _, client in scenario.client_entries()
                ],
            )
        metadata = run_metadata(
            run_id=run_id,
            scenario_hash=scenario_hash(scenario),
            seed=scenario.seed,
            t0_ns=t0_ns,
            t0_wall=t0_wall,
            target=describe(target),
            t0_wall_ns=t0_wall_ns,
            shard=None if self.shard is None else (self.shard.index, self.shard.count),
        )
        writer = ResultWriter(
            self.run_dir,
            metadata,
            t0_ns=t0_ns,
            trace=trace,
            shard=shard_index,
            keep_texts=scenario.trace_recorder.include_content,
            on_error=lambda error: _call_soon(loop, self._on_write_error, error),
        )
        streaming = StreamingMetrics() if self._stream_metrics() else None
        recorder = RunRecorder(
            run_id,
            target.model,
            t0_ns,
            writer,
            self.tokenizer,
            trace,
            on_row=None if streaming is None else streaming.add,
            clients=[(client.name, client.model) for client in target.clients],
            tokenizers=self.tokenizers,
        )
        timers = LoopTimers(loop, self.clock)
        traffic = TrafficLoop(
            settings,
            make_session,
            self._submit,
            recorder,
            self.clock,
            timers,
            flush=self._flush,
            shard=self.shard,
            collect=self.pool.collect if isinstance(self.pool, WorkerPool) else None,
        )
        self.traffic = traffic
        finished: asyncio.Future[None] = loop.create_future()
        traffic.on_finish(lambda: _resolve(finished))
        traffic.on_stop(self._on_stop)
        if scenario.phases:
            traffic.on_phase(
                lambda name, at_ns: self.log.info(
                    f"phase {name} begins at {(at_ns - t0_ns) / _NS:.3f} s"
                )
            )
        progress = ProgressLine(
            self._snapshot,
            self.quiet,
            self._progress_interval(),
            periodic=None if streaming is None else streaming.snapshot,
            log=self.log.info,
        )
        watch = self.watch
        if watch is not None:
            watch.begin(self.run_dir, t0_ns, metadata)
        if self.probe is not None:
            clients = [(client.name, client.model) for client in target.clients]
            self.probe.attach(loop, traffic, t0_ns, t0_wall_ns, clients)
        self.log.info(f"t0 = {t0_wall.isoformat()}")
        stops = stop_signals()  # (SIGHUP too: the terminal closed; not after nohup)
        # (what comes back after the traffic: not the set-up's own Ctrl-C, which would say
        # "the set-up stops", but what it stood in for)
        before: dict[int, Any] = {sig: after_set_up(signal.getsignal(sig)) for sig in stops}
        for sig in stops:
            loop.add_signal_handler(sig, self._on_signal, sig)
        self.began = True  # (a signal from now on stops the traffic, not the set-up)
        server = None if self.target_context is None else self.target_context.server
        server_exit = None if server is None else server.exit_fd()
        if server is not None and server_exit is not None:
            loop.add_reader(server_exit, self._on_server_exit, server, server_exit, t0_ns)
        cpu_start = time.process_time()
        finish_import_s = 0.0  # (the evaluation's import after the traffic: not its CPU)
        assert self.pool is not None
        main_wait, worker_wait = CpuWait([os.getpid()]), CpuWait(self.pool.worker_pids.values())
        main_wait.start()
        worker_wait.start()
        # Ctrl-C from the traffic's end on: held until the run's end is written
        with contextlib.ExitStack() as held:
            try:
                progress.start()
                traffic.start(t0_ns)
                await finished
            finally:
                self.main_cpu_wait_s, self.worker_cpu_wait_s = main_wait.stop(), worker_wait.stop()
                progress.stop()
                try:  # (Ctrl-C in the drain stops it as in the traffic: its grace cut short)
                    if self._drain_task is not None:
                        await self._drain_task
                    await self.pool.stop(grace_s=0.0)
                    if self.profiler is not None:  # (its trace is written now: off the loop)
                        await asyncio.to_thread(self.profiler.stop)
                    if isinstance(self.pool, WorkerPool):  # (a dry run's pool holds nothing)
                        self.release_wake_ups = self.pool.wake_ups()
                        self.deferred_results = self.pool.deferred_results
                finally:  # (the watch's last scrape after the drain: every answer counted)
                    for sig in stops:
                        loop.remove_signal_handler(sig)
                    if server_exit is not None:
                        loop.remove_reader(server_exit)
                        os.close(server_exit)
                    # (no gap between; the handlers of before the traffic come back after it)
                    held.enter_context(signals_held(self._say, self.run_dir, stops, before))
                    self.watch = None
                    # the watch's last scrape runs in its process, the writer's part in its
                    # thread, while this one imports the evaluation
                    if watch is not None:
                        watch.request_stop()
                    writer.write_soon()
                    try:
                        finish_import_s = self._import_finish()
                    finally:
                        self.server_metrics = None if watch is None else watch.stop()
                if traffic.in_flight:
                    traffic.abandon_in_flight("worker_lost")
                if self.probe is not None:
                    self.probe.detach()
                timers.close()
                self.main_cpu_s = time.process_time() - cpu_start - finish_import_s
            self._finish(target, writer, t0_ns, t0_wall, t0_wall_ns)

    def _start_profile(self, target: Target) -> None:
        """Start the profiler of each server of the run (``server_profile``), before t0; a
        server that refuses is exit 2, nothing sent."""
        config = self.scenario.server_profile
        if not config.enabled:
            return
        if self.dry_run:
            self.log.info("server profile: not started (a dry run sends nothing)")
            return
        from veeksha.server.profiler import ServerProfiler

        targets = [(c.api_base, c.api_key, c.headers) for c in target.clients]
        profiler = ServerProfiler(config, targets, self.log.warning)
        profiler.start()
        self.profiler = profiler
        self.log.info(f"server profile: started on {', '.join(profiler.account['servers'])}")

    def _submit(self, item: WorkItem) -> int:
        assert self.pool is not None
        return self.pool.submit(item, flush=False)

    def _flush(self) -> None:
        if self.pool is not None:
            self.pool.flush()

    def _on_results(self, results: list[Result]) -> None:
        if self.traffic is not None:
            self.traffic.on_results(results)

    def _stream_metrics(self) -> bool:
        return any(evaluator.stream_metrics for evaluator in self.scenario.evaluators)

    def _progress_interval(self) -> float:
        for evaluator in self.scenario.evaluators:
            if evaluator.stream_metrics:
                return evaluator.stream_metrics_interval
        return 5.0

    def _snapshot(self) -> dict[str, float | int]:
        assert self.traffic is not None
        return status_snapshot(self.traffic, self._client_names, self.clock.now_ns())


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _call_soon(
    loop: asyncio.AbstractEventLoop, callback: Callable[[RunAbortedError], None], error: Any
) -> None:
    """From the writer thread: run ``callback(error)`` on the event loop."""
    loop.call_soon_threadsafe(callback, error)
