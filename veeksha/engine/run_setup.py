"""A run's set-up from its scenario: the sessions' source (a generator or a trace, with the
tokenizer, calibrated against the server when it is the server's) and the traffic loop's
settings (scheduler, limits, phases, client caps).

A mixin of the run (``veeksha.engine.run``): it works on the run's own state.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from veeksha.engine.loop_settings import LoopSettings
from veeksha.engine.phases import apply_phases
from veeksha.engine.runlog import RunLog
from veeksha.engine.target import Target
from veeksha.generate.calibration import (
    CalibratedTokenizer,
    ChatTemplate,
    calibrated_tokenizer,
    measure_chat_template,
)
from veeksha.generate.distributions import make_interval_sampler
from veeksha.generate.rng import RandomStreams
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import (
    BuiltinTokenizer,
    ServerTokenizer,
    TokenizerLike,
    make_tokenizer,
)
from veeksha.scenario.models import (
    ConcurrentScheduler,
    RateScheduler,
    Scenario,
    TraceScheduler,
    TraceSessionGenerator,
)
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.ramp import ramp_of

if TYPE_CHECKING:
    from veeksha.generate.traces import OpenTrace

__all__ = ["DRY_RUN_SERVER_TOKENIZER", "RunSetup"]

DRY_RUN_SERVER_TOKENIZER = (
    "client.tokenizer type server: a dry run has no server to calibrate against, so its"
    " prompts are counted in the builtin tokenizer's tokens (the same lengths, other words);"
    " a run against the server calibrates its tokenizer"
)


class RunSetup:
    """Makes what the traffic loop is given: the sessions' source and the loop's settings."""

    scenario: Scenario
    dry_run: bool
    log: RunLog
    trace: OpenTrace | None
    tokenizer: TokenizerLike
    make_session: Callable[[int], SessionSpec]

    def _session_source(self, target: Target) -> Callable[[int], SessionSpec]:
        scenario = self.scenario
        runtime = scenario.runtime
        # one tokenizer counts the run's prompts: the first client's (``clients:`` or the one
        # ``client:``), calibrated against the first client's target (``Target``'s own);
        # a later client giving another is refused at validation (``scenario.crosscheck``)
        config = scenario.client_entries()[0][1].tokenizer
        tokenizer: TokenizerLike
        if self.dry_run and config.type == "server":
            # a dry run sends nothing, so there is no server to calibrate against: its prompts
            # have the same lengths in builtin tokens (other words), said on stderr and run.log
            self.log.warning(DRY_RUN_SERVER_TOKENIZER)
            sys.stderr.write(f"warning: {DRY_RUN_SERVER_TOKENIZER}\n")
            tokenizer = BuiltinTokenizer()
        else:
            tokenizer = make_tokenizer(config, target.api_base, target.model, target.api_key)
        if isinstance(tokenizer, ServerTokenizer):  # calibrated before t0; a failure is exit 2
            # (the built-in simulator's port changes every run: nothing to reuse)
            use_cache = getattr(config, "cache", True) and target.kind != "simulator"
            # (a managed server's port may be a free one, another every run: its calibration
            # is found by the server's kind, the model and the shape; the fingerprint checks it)
            server = scenario.server
            place = None
            if server is not None and getattr(config, "endpoint", None) is None:
                place = f"managed {server.type}"
            tokenizer = calibrated_tokenizer(tokenizer, use_cache, log=self.log.info, place=place)
            if any(c.type == "openai_chat_completions" for _, c in scenario.client_entries()):
                tokenizer.chat_template = self._chat_template(tokenizer)
        self.tokenizer = tokenizer
        make: Callable[[int], SessionSpec]
        total = runtime.max_sessions + runtime.warmup_sessions
        if isinstance(scenario.session_generator, TraceSessionGenerator):
            from veeksha.generate.traces import open_trace  # (Arrow's compute functions)

            self.trace = open_trace(scenario)
            self.log.info(self.trace.describe())
            for warning in self.trace.prepared.warnings():
                self.log.warning(warning)
            trace_sessions = self.trace.sessions(scenario.seed, tokenizer)
            make = trace_sessions.session
            make(0)  # the first piece (and its row group) is read now, not after t0
            if trace_sessions.limit is not None:
                total = min(total, trace_sessions.limit)
        else:
            make = SessionGenerator(scenario, tokenizer).session
            make(0)  # the first block (256 sessions) is made now, not in the loop at t0
        self.make_session = make
        if not runtime.pregenerate_sessions:
            return make
        sessions = [make(i) for i in range(total)]
        return sessions.__getitem__

    def _chat_template(self, tokenizer: CalibratedTokenizer) -> ChatTemplate | str:
        """The server's chat template measured now (3 calls, never cached: a server may change
        its template and not its tokenizer), said in run.log, or why not (said once)."""
        found = measure_chat_template(tokenizer.client, tokenizer.calibration)
        if isinstance(found, str):
            self.log.warning(
                f"server tokenizer: chat template not measured: {found}; the prompt_length "
                "check estimates it from the server's usage instead"
            )
        else:
            self.log.info(
                f"server tokenizer: chat template measured: {found.prompt} tokens a prompt of "
                f"one message, {found.turn} a further turn (counts {list(found.counts)} for "
                f"contents of {list(found.contents)} tokens)"
            )
        return found

    def _loop_settings(self) -> LoopSettings:
        scenario = self.scenario
        runtime = scenario.runtime
        scheduler = scenario.traffic_scheduler
        settings = LoopSettings(
            cancel_on_failure=scheduler.cancel_session_on_failure,
            max_sessions=runtime.max_sessions,
            warmup_sessions=runtime.warmup_sessions,
            warmup_seconds=runtime.warmup_seconds,
            benchmark_timeout_s=runtime.benchmark_timeout,
            client_caps=[client.max_in_flight for _, client in scenario.client_entries()],
            priority=runtime.priority,
            # a dry run answers at once in this process: nothing could hold an item until due
            dispatch_ahead_ns=0 if self.dry_run else round(runtime.dispatch_ahead_ms * 1e6),
        )
        extra_warmup = 0
        if self.trace is not None:
            limit = self.trace.hi - self.trace.lo
            settings.session_limit = None if self.trace.wrap else limit
            # sessions that warm the server up (rag's documents), once, before the trace's own
            extra_warmup = self.trace.warmup
            settings.warmup_sessions += extra_warmup
        if isinstance(scheduler, TraceScheduler):
            assert self.trace is not None
            settings.rate_gaps = self.trace.timeline().sample
        elif isinstance(scheduler, RateScheduler):
            rng = RandomStreams(scenario.seed).stream("arrivals")
            settings.rate_gaps = make_interval_sampler(scheduler.interval_generator, rng).sample
            ramp = ramp_of(scheduler)
            settings.rate_warp = None if ramp is None else ramp.warp
        else:
            assert isinstance(scheduler, ConcurrentScheduler)
            settings.concurrency = ConcurrencyRamp(
                scheduler.target_concurrent_sessions, scheduler.rampup_seconds
            )
        apply_phases(settings, scenario, extra_warmup)
        return settings
