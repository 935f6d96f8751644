"""The end of a run: the rows flushed, the run's facts (summary.json's ``run``), the evaluation
(metrics, health, SLOs, plots, report) or, with ``evaluate=False``, a note that it was skipped,
and the Parquet files finalised with the verdict.

A mixin of the run (``veeksha.engine.run``): it works on the run's own state. The evaluation
(and its Arrow compute functions, ~0.1 CPU-s to import) is imported when the traffic has ended
(``_import_finish``, while the server watch scrapes one last time), not before t0: a shard that
never evaluates never imports it.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veeksha.clock import MonotonicClock
from veeksha.dispatch.kernel_stamps import chunk_timestamps
from veeksha.dispatch.settings import request_id_prefix
from veeksha.engine.loop import TrafficLoop
from veeksha.engine.outcome import RunOutcome
from veeksha.engine.runlog import RunLog
from veeksha.engine.target import Target, TargetContext, describe
from veeksha.errors import RunAbortedError
from veeksha.generate.calibration import CalibratedTokenizer
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import TokenizerLike
from veeksha.plural import counted
from veeksha.record.parquet import ResultWriter
from veeksha.scenario.models import Scenario
from veeksha.schedule.shards import ShardSpec

if TYPE_CHECKING:
    from veeksha.generate.traces import OpenTrace
    from veeksha.server.profiler import ServerProfiler

__all__ = ["RunFinish", "children_cpu_s"]

_NS = 1_000_000_000


class RunFinish:
    """Closes a run once its traffic has ended: what it did goes to ``outcome``, its facts to
    summary.json, and its rows are evaluated unless the run was told not to."""

    scenario: Scenario
    run_dir: Path
    quiet: bool
    plots: bool
    evaluate: bool
    clock: MonotonicClock
    log: RunLog
    outcome: RunOutcome
    traffic: TrafficLoop | None
    shard: ShardSpec | None
    trace: OpenTrace | None
    tokenizer: TokenizerLike
    tokenizers: list[TokenizerLike]
    make_session: Callable[[int], SessionSpec]
    num_workers: int
    main_cpu_s: float
    children_cpu_start: float
    main_cpu_wait_s: float | None
    worker_cpu_wait_s: float | None
    release_wake_ups: dict[str, Any] | None
    deferred_results: int
    server_metrics: dict[str, Any] | None
    profiler: ServerProfiler | None
    cache_reset: dict[str, Any] | None
    target_context: TargetContext | None
    signal_in_drain: bool

    def _on_write_error(self, error: RunAbortedError) -> None:
        self.outcome.interrupted = True
        self.outcome.extra["error"] = str(error)
        if self.traffic is not None:
            self.traffic.stop("write_error")
            self.outcome.stop_reason = self.traffic.stop_reason

    def _import_finish(self) -> float:
        """Import what :meth:`_finish` needs (the evaluation: ~25 ms) ahead of it, once the
        traffic has ended, while the run waits for another process anyway (the server watch's
        last scrape); the CPU seconds it took (not the traffic's: ``main_cpu_s`` leaves them
        out)."""
        started = time.process_time()
        import veeksha.evaluate.jsonio
        import veeksha.evaluate.outputs
        import veeksha.evaluate.source

        if self.evaluate:
            import veeksha.evaluate.run  # noqa: F401
        return time.process_time() - started

    def _finish(
        self, target: Target, writer: ResultWriter, t0_ns: int, t0_wall: datetime, t0_wall_ns: int
    ) -> None:
        """Evaluate what was recorded, then finalise the Parquet files with the verdict."""
        traffic = self.traffic
        assert traffic is not None
        outcome = self.outcome
        counters = traffic.counters
        if traffic.error is not None:
            outcome.interrupted = True
            outcome.extra.setdefault("error", f"no more sessions could be made: {traffic.error}")
        outcome.stop_reason = traffic.stop_reason
        if self.signal_in_drain and traffic.stop_reason == "timeout":
            # Ctrl-C in the drain: the user stopped the run (its rows' messages keep the
            # timeout that stopped the traffic; run.log has both)
            outcome.stop_reason = "interrupted"
        outcome.requests = counters.requests_done
        outcome.failed = counters.requests_failed
        outcome.abandoned = counters.requests_abandoned
        outcome.cancelled = counters.requests_cancelled
        outcome.sessions = counters.sessions_done
        if counters.chunk_stamps_clamped:
            clamped = counted(counters.chunk_stamps_clamped, "chunk read time")
            self.log.warning(
                f"{clamped} from the kernel fell outside"
                " [sent_at, the read's own time] (the wall clock stepped) and were clamped into"
                " it: substituted times, counted per request in requests.parquet's"
                " chunk_stamps_clamped"
            )
        extra = {
            "interrupted": str(outcome.interrupted).lower(),
            "stop_reason": outcome.stop_reason,
        }
        writer.write_soon()  # (rows the traffic's end added since the run's own call)
        if self.target_context is not None and not self._calibrated():
            # the watch's last scrape is done, the evaluation asks the server nothing (the
            # server tokenizer's check does): the simulator's shutdown runs beside it
            self.target_context.stop_simulator_soon()
        from veeksha.evaluate.jsonio import jsonable
        from veeksha.evaluate.outputs import write_summary
        from veeksha.evaluate.source import release_memory

        try:
            try:
                writer.flush()
            except RunAbortedError as error:
                if writer.io_error:  # the disk failed: the parts are what is kept
                    raise
                self._on_write_error(error)  # (a batch lost; the parts are evaluated, merged)
                extra["interrupted"], extra["stop_reason"] = "true", outcome.stop_reason
            if self.evaluate:
                release_memory()  # what the traffic freed: the evaluation's peak adds to it
            run_info = self._run_info(traffic, target, t0_ns, t0_wall, t0_wall_ns)
            if self.evaluate:
                self._evaluate(run_info, extra)
            else:
                write_summary(self.run_dir, {"run": jsonable(run_info), "evaluation": "skipped"})
                self._log_end("evaluation skipped")
        finally:
            writer.close(extra)

    def _run_info(
        self, traffic: TrafficLoop, target: Target, t0_ns: int, t0_wall: datetime, t0_wall_ns: int
    ) -> dict[str, Any]:
        """summary.json's ``run``: what the run did, on its own clock (``evaluate.run``)."""
        outcome = self.outcome
        end_s = (self.clock.now_ns() - t0_ns) / _NS
        start_ns = traffic.measured_start_ns
        run_info = {
            "run_id": self.run_dir.name,
            "t0_wall_time": t0_wall.isoformat(),
            "t0_wall_ns": t0_wall_ns,
            "measured_window": [
                None if start_ns is None else (start_ns - t0_ns) / _NS,
                end_s,
            ],
            "interrupted": outcome.interrupted,
            "stop_reason": outcome.stop_reason,
            "main_cpu_s": self.main_cpu_s,
            # the workers were reaped by now; the simulator, if any, is not yet
            "worker_cpu_s": children_cpu_s() - self.children_cpu_start,
            "main_cpu_wait_s": self.main_cpu_wait_s,
            "worker_cpu_wait_s": self.worker_cpu_wait_s,
            "release_wake_ups": self.release_wake_ups,
            "deferred_results": self.deferred_results,
            "num_workers": self.num_workers,
            "chunk_timestamps": chunk_timestamps(
                self.scenario.runtime.chunk_timestamps, [c.api_base for c in target.clients]
            ),
            "chunk_stamps_clamped": traffic.counters.chunk_stamps_clamped,
            "target": describe(target),
            "server_metrics": self.server_metrics,
        }
        if self.profiler is not None:
            run_info["server_profile"] = self.profiler.account
        if self.cache_reset is not None:
            run_info["prefix_cache_reset"] = self.cache_reset
        if self.scenario.labels:
            run_info["labels"] = dict(self.scenario.labels)
        if any(client.request_id_header for _, client in self.scenario.client_entries()):
            run_info["request_id_prefix"] = request_id_prefix(self.run_dir)
        run_info["phases"] = traffic.phase_windows(self.clock.now_ns())
        if self.shard is not None:
            run_info["shard"] = self.shard.to_dict()
        if self.trace is not None:
            run_info["trace"] = self.trace.summary()
        return run_info

    def _evaluate(self, run_info: dict[str, Any], extra: dict[str, str]) -> None:
        """Metrics, health checks, SLOs, plots and the report of the run's rows."""
        from veeksha.engine.prompt_check import server_tokenizer_info
        from veeksha.evaluate.run import evaluate_run
        from veeksha.evaluate.source import requests_source, sessions_source

        outcome = self.outcome
        # read a column at a time from the files: bounded memory at any run size
        requests = requests_source(self.run_dir)
        sessions = sessions_source(self.run_dir)
        calibrated = self._calibrated()
        infos = []
        for tokenizer, names in calibrated:  # (after the traffic, never in it)
            info = server_tokenizer_info(
                tokenizer,
                requests,
                self.make_session,
                self.scenario.seed,
                clients=names if self.scenario.clients else None,
            )
            infos.append(info)
        if infos:  # (the first, as ever; each, with several: docs/evaluation_outputs.md)
            run_info["server_tokenizer"] = infos[0]
            if len(infos) > 1:
                run_info["server_tokenizers"] = infos
        evaluation = evaluate_run(
            self.run_dir, self.scenario, requests, sessions, run_info, plots=self.plots
        )
        outcome.verdict = str(evaluation.verdict)
        outcome.all_slos_met = evaluation.all_slos_met
        extra["health_verdict"] = str(evaluation.verdict).lower()
        self._log_end(f"health {evaluation.verdict}; SLOs met: {evaluation.all_slos_met}")
        if not self.quiet:
            from rich.console import Console  # (a quiet run never loads rich)

            evaluation.render(Console(stderr=True))

    def _calibrated(self) -> list[tuple[CalibratedTokenizer, list[str]]]:
        """Each calibrated server tokenizer of the run and the names of the clients whose
        prompts it counts, in the clients' order."""
        found: dict[int, tuple[CalibratedTokenizer, list[str]]] = {}
        entries = self.scenario.client_entries()
        for (name, _), tokenizer in zip(entries, self.tokenizers, strict=True):
            if isinstance(tokenizer, CalibratedTokenizer):
                found.setdefault(id(tokenizer), (tokenizer, []))[1].append(name)
        return list(found.values())

    def _log_end(self, verdicts: str) -> None:
        outcome = self.outcome
        wake_ups = self.release_wake_ups
        if wake_ups is not None and wake_ups["count"]:
            woken = counted(wake_ups["count"], "wake-up")
            self.log.info(
                f"release timers: {woken}, each after its time by p50"
                f" {wake_ups['p50_us']:g} µs, p99 {wake_ups['p99_us']:g} µs, max"
                f" {wake_ups['max_us']:g} µs; {wake_ups['later_than_lead']} slower than their"
                f" lead (which reached {wake_ups['lead_max_us']:g} µs)"
            )
        if self.worker_cpu_wait_s is not None:
            main_wait = self.main_cpu_wait_s or 0.0
            self.log.info(
                "waited for a CPU held by another process: workers"
                f" {self.worker_cpu_wait_s:.3f} s in all, main process {main_wait:.3f} s"
            )
        self.log.info(
            f"ended ({outcome.stop_reason}): {counted(outcome.sessions, 'session')}, "
            f"{counted(outcome.requests, 'request')} answered ({outcome.failed} failed"
            f"{f', {outcome.abandoned} abandoned' if outcome.abandoned else ''}), "
            f"{outcome.cancelled} cancelled; {verdicts}"
        )


def children_cpu_s() -> float:
    """CPU seconds of every reaped child process so far (the workers, once stopped)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
