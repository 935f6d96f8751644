"""A run's set-up from its scenario: the sessions' source (a generator or a trace, with the
tokenizer, calibrated against the server when it is the server's) and the traffic loop's
settings (scheduler, limits, phases, client caps).

A mixin of the run (``veeksha.engine.run``): it works on the run's own state.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from veeksha.engine.error_budget import ErrorBudget
from veeksha.engine.loop_settings import LoopSettings
from veeksha.engine.phases import apply_phases
from veeksha.engine.runlog import RunLog
from veeksha.engine.target import Target
from veeksha.errors import ConfigurationError
from veeksha.generate.calibration import (
    CalibratedTokenizer,
    ChatTemplate,
    calibrated_tokenizer,
    measure_chat_template,
)
from veeksha.generate.distributions import make_interval_sampler
from veeksha.generate.rng import RandomStreams
from veeksha.generate.sessions import SessionGenerator
from veeksha.generate.spec import NodeSpec, SessionSpec, map_nodes
from veeksha.generate.tokenizer import (
    BuiltinTokenizer,
    ServerTokenizer,
    TokenizerLike,
    make_tokenizer,
)
from veeksha.open_files import connection_shortfall
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

__all__ = ["RunSetup", "connection_warning", "dry_run_server_tokenizer"]

DEFAULT_KEY = "client.tokenizer"


def dry_run_server_tokenizer(key: str = DEFAULT_KEY) -> str:
    """The warning of a dry run given a server tokenizer (at ``key``)."""
    return (
        f"{key} type server: a dry run has no server to calibrate against, so its"
        " prompts are counted in the builtin tokenizer's tokens (the same lengths, other words);"
        " a run against the server calibrates its tokenizer"
    )


def connection_warning(scenario: Scenario, num_workers: int) -> str | None:
    """A closed loop's warning when its workers could not each hold their share of its peak
    target of sessions (one connection each, at least) under this machine's open-file limit
    (``veeksha.open_files``); None for other traffic, whose connections depend on the server."""
    scheduler = scenario.traffic_scheduler
    if not isinstance(scheduler, ConcurrentScheduler) or num_workers < 1:
        return None
    targets = [phase.target_concurrent_sessions for phase in scenario.phases]
    peak = max([scheduler.target_concurrent_sessions, *(t for t in targets if t is not None)])
    return connection_shortfall(-(-peak // num_workers))


class RunSetup:
    """Makes what the traffic loop is given: the sessions' source and the loop's settings."""

    scenario: Scenario
    dry_run: bool
    log: RunLog
    trace: OpenTrace | None
    tokenizer: TokenizerLike  # the first client's
    tokenizers: list[TokenizerLike]  # each client's (``client_entries`` order)
    make_session: Callable[[int], SessionSpec]
    cache_reset: dict[str, Any] | None

    def _reset_prefix_caches(self, target: Target) -> None:
        """Empty each server's prefix cache (``prefix_cache_reset``), before t0; a server that
        cannot is exit 2, nothing sent."""
        if not self.scenario.prefix_cache_reset.enabled:
            return
        if self.dry_run:
            self.log.info("prefix cache reset: not done (a dry run sends nothing)")
            return
        from veeksha.server.cache_reset import reset_prefix_caches

        targets = [(c.api_base, c.api_key, c.headers) for c in target.clients]
        self.cache_reset = reset_prefix_caches(self.scenario.prefix_cache_reset, targets)
        for server in self.cache_reset["servers"]:
            calls = server["calls"]
            said = calls[0] if len(calls) == 1 else f"{calls[0]} and {len(calls) - 1} erase(s)"
            self.log.info(
                f"prefix cache emptied: {server['server']} ({server['api']}: {said}, "
                f"{server['seconds'] * 1000:.0f} ms)"
            )

    def _session_source(self, target: Target) -> Callable[[int], SessionSpec]:
        scenario = self.scenario
        runtime = scenario.runtime
        # each client's prompts are counted in its own tokenizer (a server one calibrated
        # against its own target), clients of the same one sharing it
        # (``Scenario.tokenizer_sharing``); a trace replay's rows too, each in its client's
        tokenizers = self._tokenizers(target)
        self.tokenizers = tokenizers
        tokenizer = tokenizers[0]
        self.tokenizer = tokenizer
        make: Callable[[int], SessionSpec]
        total = runtime.max_sessions + runtime.warmup_sessions
        if isinstance(scenario.session_generator, TraceSessionGenerator):
            from veeksha.generate.traces import open_trace  # (Arrow's compute functions)

            self.trace = open_trace(scenario)
            self.log.info(self.trace.describe())
            for warning in self.trace.warnings():
                self.log.warning(warning)
            trace_sessions = self.trace.sessions(scenario.seed, tokenizer, tokenizers)
            make = trace_sessions.session
            make(0)  # the first piece (and its row group) is read now, not after t0
            if trace_sessions.limit is not None:
                total = min(total, trace_sessions.limit)
        else:
            make = SessionGenerator(scenario, tokenizer, tokenizers).session
            make(0)  # the first block (256 sessions) is made now, not in the loop at t0
        vectors = [c.type == "openai_embeddings" for _, c in scenario.client_entries()]
        if any(vectors):  # (an embeddings request generates nothing: it asks for no output)
            make = _without_outputs(make, vectors)
        if scenario.abandonment.probability > 0:
            from veeksha.generate.abandonment import Abandoner

            make = Abandoner(scenario.abandonment, scenario.seed).source(make)
        self.make_session = make
        if not runtime.pregenerate_sessions:
            return make
        sessions = [make(i) for i in range(total)]
        return sessions.__getitem__

    def _tokenizers(self, target: Target) -> list[TokenizerLike]:
        """Each client's tokenizer (``client_entries`` order), built before t0: one instance
        for the clients that share one; a server one calibrated against its client's target,
        with the chat template measured when a chat client uses it."""
        scenario = self.scenario
        entries = scenario.client_entries()
        sharing = scenario.tokenizer_sharing()
        tokenizers: list[TokenizerLike] = []
        stand_in: BuiltinTokenizer | None = None  # (a dry run's, for every server one)
        for index, (_, client) in enumerate(entries):
            if sharing[index] != index:
                tokenizers.append(tokenizers[sharing[index]])
                continue
            config = client.tokenizer
            key = scenario.tokenizer_key(index)
            users = [entries[j] for j, first in enumerate(sharing) if first == index]
            if self.dry_run and config.type == "server":
                # a dry run sends nothing, so there is no server to calibrate against: its
                # prompts have the same lengths in builtin tokens (other words), said on
                # stderr and run.log (once: the first such client's)
                if stand_in is None:
                    stand_in = BuiltinTokenizer()
                    message = dry_run_server_tokenizer(key)
                    self.log.warning(message)
                    sys.stderr.write(f"warning: {message}\n")
                tokenizers.append(stand_in)
                continue
            own = target.clients[index]
            made = make_tokenizer(
                config, own.api_base, own.model, own.api_key, own.headers, key=key
            )
            if isinstance(made, ServerTokenizer):  # calibrated before t0; a failure is exit 2
                # (the built-in simulator's port changes every run: nothing to reuse)
                use_cache = getattr(config, "cache", True) and own.kind != "simulator"
                # (a managed server's port may be a free one, another every run: its
                # calibration is found by the server's kind, the model and the shape; the
                # fingerprint checks it)
                server = scenario.server
                place = None
                own_port = getattr(config, "endpoint", None) is None
                if own.kind == "managed" and server is not None and own_port:
                    place = f"managed {server.type}"
                names = [name for name, _ in users]
                say = self._said_of(names, self.log.info)
                try:
                    calibrated = calibrated_tokenizer(made, use_cache, log=say, place=place)
                except ConfigurationError as exc:  # (named at this client's key)
                    if key == DEFAULT_KEY:
                        raise
                    raise ConfigurationError(str(exc).replace(DEFAULT_KEY, key)) from None
                if any(c.type == "openai_chat_completions" for _, c in users):
                    warn = self._said_of(names, self.log.warning)
                    calibrated.chat_template = self._chat_template(calibrated, say, warn)
                made = calibrated
            tokenizers.append(made)
        return tokenizers

    def _said_of(self, names: list[str], say: Callable[[str], None]) -> Callable[[str], None]:
        """``say`` (run.log's info or warning), naming the clients a server tokenizer counts
        for (with ``clients:``)."""
        if not self.scenario.clients:
            return say
        who = ", ".join(names)
        return lambda message: say(f"{message} (clients: {who})")

    def _chat_template(
        self,
        tokenizer: CalibratedTokenizer,
        say: Callable[[str], None] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> ChatTemplate | str:
        """The server's chat template measured now (3 calls, never cached: a server may change
        its template and not its tokenizer), said in run.log, or why not (said once)."""
        found = measure_chat_template(tokenizer.client, tokenizer.calibration)
        if isinstance(found, str):
            (warn or self.log.warning)(
                f"server tokenizer: chat template not measured: {found}; the prompt_length "
                "check estimates it from the server's usage instead"
            )
        else:
            (say or self.log.info)(
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
        if runtime.max_errors is not None or runtime.max_error_rate is not None:
            settings.error_budget = ErrorBudget(
                runtime.max_errors, runtime.max_error_rate, runtime.error_rate_window
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


def _without_outputs(
    make: Callable[[int], SessionSpec], embeddings: list[bool]
) -> Callable[[int], SessionSpec]:
    """The session source ``make`` whose requests to an embeddings client (``embeddings``:
    per client index) ask for no output (``max_tokens`` 0: what their rows' requested output
    is, and what a dry run answers them with)."""

    def without_output(node: NodeSpec) -> NodeSpec:
        if node.kind == "llm" and embeddings[node.client] and node.max_tokens:
            return dataclasses.replace(node, max_tokens=0)
        return node

    return lambda index: map_nodes(make(index), without_output)
