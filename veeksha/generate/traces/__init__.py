"""Trace replay: sessions from a file instead of a graph generator (docs/traces.md).

The package is one module per concept, and one per flavor:

* ``reader.py``: the file (CSV, JSONL, JSON array) in typed batches, with line numbers;
* ``flavor.py``: the flavor interface (rows → staged rows → linked session DAGs);
* ``request_log.py``, ``timed_session.py``, ``prompts.py`` and the others: the flavors;
* ``prepare.py``: validation, grouping and the canonical Parquet cache beside the trace;
* ``table.py``: random access to the cache, a row group at a time;
* ``sessions.py``: SessionSpecs in pieces, wrap, and the trace's own arrival timeline.

:func:`open_trace` is the one entry point for the engine (and for ``veeksha run``'s check before
the run folder exists): everything after it sees ``SessionSpec`` objects, as from the synthetic
generator.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from veeksha.generate.clients import TraceClients
from veeksha.generate.tokenizer import TokenizerLike
from veeksha.generate.traces.conversations import ConversationFlavor
from veeksha.generate.traces.detect import detect_flavor
from veeksha.generate.traces.fit import ContextLimit
from veeksha.generate.traces.flavor import TraceFlavor
from veeksha.generate.traces.prepare import PreparedTrace, prepare_file, read_meta
from veeksha.generate.traces.prompts import PromptsFlavor
from veeksha.generate.traces.public import AzureLlmFlavor, BurstGptFlavor
from veeksha.generate.traces.rag import RagFlavor
from veeksha.generate.traces.reader import TraceFileError
from veeksha.generate.traces.request_log import RequestLogFlavor
from veeksha.generate.traces.sessions import TraceSessions, TraceTimeline, empty_window, window
from veeksha.generate.traces.shared_prefix import MooncakeFlavor, SharedPrefixFlavor
from veeksha.generate.traces.table import TraceTable
from veeksha.generate.traces.timed_session import TimedSessionFlavor
from veeksha.generate.validation import NodeChecks
from veeksha.scenario import models

__all__ = [
    "OpenTrace",
    "PreparedTrace",
    "TraceFileError",
    "TraceFlavor",
    "make_flavor",
    "open_trace",
    "trace_client_selection",
    "trace_context_key",
    "trace_context_limit",
    "trace_context_window",
]

#: flavor settings model → its implementation (the one place a flavor is added)
FLAVORS: dict[type, type[TraceFlavor]] = {
    models.RequestLogFlavor: RequestLogFlavor,
    models.TimedSyntheticSessionFlavor: TimedSessionFlavor,
    models.UntimedContentMultiTurnFlavor: ConversationFlavor,
    models.PromptsFlavor: PromptsFlavor,
    models.SharedPrefixFlavor: SharedPrefixFlavor,
    models.MooncakeFlavor: MooncakeFlavor,
    models.RagFlavor: RagFlavor,
    models.AzureLlmFlavor: AzureLlmFlavor,
    models.BurstGptFlavor: BurstGptFlavor,
}


def make_flavor(settings: object, path: Path) -> TraceFlavor:
    """The flavor implementation of a ``session_generator.flavor`` model."""
    detected = isinstance(settings, models.AutoFlavor)
    if detected:
        settings = detect_flavor(path)
    cls = FLAVORS.get(type(settings))
    if cls is None:
        raise TraceFileError(path, None, f"flavor {settings!r} is not supported yet")
    flavor = cls(path, settings)
    flavor.detected = detected
    return flavor


#: what a flavor's timestamps are, said in run.log (others: seconds)
_TIME_UNITS = {"mooncake": "milliseconds", "azure_llm": "dates and times"}


@dataclass
class OpenTrace:
    """A prepared trace and the window of it a scenario replays."""

    prepared: PreparedTrace
    table: TraceTable
    lo: int
    hi: int
    wrap: bool
    speedup: float | None  # set when the arrivals come from the trace
    span_s: float = 0.0  # trace seconds from the window's first start to its last
    #: client.max_model_len, or each client's by name (``trace_context_window``)
    max_model_len: int | dict[str, int | None] | None = None
    #: session_generator.oversized, the policy the rows were checked with; None without
    #: client.max_model_len (nothing was checked)
    oversized: str | None = None
    #: client name → index (``Scenario.client_entries``), for rows that name their client
    clients: dict[str, int] | None = None
    checks: NodeChecks | None = None  # session_generator.validation
    #: traffic_scheduler.turn_timing (``timestamps``: later requests wait for their rows' times)
    turn_timing: str = "after_answer"
    #: the key of ``max_model_len`` as messages name it (``trace_context_key``)
    window_key: str = "client.max_model_len"

    def warnings(self) -> list[str]:
        """run.log's lines of the rows not replayed as the trace has them."""
        return self.prepared.warnings(self.window_key)

    @property
    def warmup(self) -> int:
        """Warm-up sessions (rag's) in the window: its first ones, replayed in pass 0 only."""
        return max(0, min(self.prepared.warmup_sessions, self.hi) - self.lo)

    def sessions(
        self,
        seed: int,
        tokenizer: TokenizerLike,
        tokenizers: Sequence[TokenizerLike] | None = None,
    ) -> TraceSessions:
        """The replayed sessions, every row's prompt built in ``tokenizer``, or with
        ``tokenizers`` (each client's, ``client_entries`` order) in its own client's."""
        return TraceSessions(
            self.table,
            self.lo,
            self.hi,
            self.wrap,
            seed,
            tokenizer,
            warmup=self.warmup,
            clients=self.clients,
            checks=self.checks,
            turn_scale=(
                1.0 / self.speedup
                if self.turn_timing == "timestamps" and self.speedup is not None
                else None
            ),
            tokenizers=tokenizers,
        )

    def timeline(self) -> TraceTimeline:
        assert self.speedup is not None
        return TraceTimeline(
            self.table,
            self.lo,
            self.hi,
            self.span_s,
            self.speedup,
            self.wrap,
            warmup=self.warmup,
        )

    def summary(self) -> dict[str, object]:
        """What summary.json says of the trace."""
        p = self.prepared
        return {
            "file": p.source,
            "flavor": p.flavor,
            "sessions": p.sessions,
            "rows": p.rows,
            "warmup_sessions": p.warmup_sessions,
            "window": [self.lo, self.hi],
            "wrap_mode": self.wrap,
            "speedup": self.speedup,
            "turn_timing": self.turn_timing if self.speedup is not None else None,
            "unservable_rows": p.unservable_rows,
            "unservable_sessions": p.unservable_sessions,
            "unservable_lines": p.unservable_lines,
            "max_model_len": self.max_model_len,
            "oversized": self.oversized,
            "oversized_sessions": p.oversized_sessions,
            "oversized_lines": p.oversized_lines,
            "not_replayed": p.not_replayed(),
        }

    def describe(self) -> str:
        where = ""
        if (self.lo, self.hi) != (0, self.prepared.sessions):
            where += f"; replaying sessions {self.lo} to {self.hi - 1}"
        if self.speedup is not None:  # (a unit mismatch shows: a trace of ms read as s...)
            unit = _TIME_UNITS.get(self.prepared.flavor, "seconds")
            where += (
                f"; arrivals over {self.span_s:.3f} s of the trace (its timestamps read as"
                f" {unit}): {self.span_s / self.speedup:.3f} s at speedup {self.speedup:g}"
            )
        if self.prepared.reused:
            where += f" (from the cache {self.prepared.cache})"
        return self.prepared.describe(where)


@functools.lru_cache(maxsize=4)
def _window(
    cache: str, start_offset: float, max_duration: float | None
) -> tuple[int, int, float, float]:
    """``window`` of a prepared trace, kept: ``veeksha run`` opens the trace twice (the check
    before the run folder, then the run), and a window reads every start time."""
    return window(TraceTable(read_meta(cache)), start_offset, max_duration)


def trace_context_window(scenario: models.Scenario) -> int | dict[str, int | None] | None:
    """The context window a trace's requests are held to: the ``max_model_len`` of the one
    client, or with several clients each one's by name (a client without one: None, its rows
    not checked); None when no client gives one (nothing is checked)."""
    entries = scenario.client_entries()
    if all(client.max_model_len is None for _, client in entries):
        return None
    if len(entries) == 1:
        return entries[0][1].max_model_len
    return {name: client.max_model_len for name, client in entries}


def trace_context_key(scenario: models.Scenario) -> str:
    """The key of a window as messages name it: the one client's ``client.max_model_len``, or
    the smallest client's ``clients[i].max_model_len`` (the rows' own clients' keys are the
    prepared trace's, ``PreparedTrace.windows``)."""
    if not scenario.clients:
        return "client.max_model_len"
    windows = [
        (client.max_model_len, index)
        for index, client in enumerate(scenario.clients)
        if client.max_model_len is not None
    ]
    return f"clients[{min(windows)[1] if windows else 0}].max_model_len"


def trace_context_limit(scenario: models.Scenario) -> ContextLimit | None:
    """The limit a trace's rows are fitted to as it is prepared (``fit.py``): the one client's
    window, or with several clients each row's own client's (``ContextLimit.clients``); None
    without a window or with ``oversized: send`` (nothing is checked)."""
    generator = scenario.session_generator
    assert isinstance(generator, models.TraceSessionGenerator)
    entries = scenario.client_entries()
    given = [client.max_model_len for _, client in entries if client.max_model_len is not None]
    if not given or generator.oversized == "send":
        return None
    truncate = generator.oversized == "truncate"
    key = trace_context_key(scenario)
    if len(entries) == 1:
        return ContextLimit(given[0], truncate, key)
    clients = tuple(
        (name, client.max_model_len, f"clients[{index}].max_model_len")
        for index, (name, client) in enumerate(entries)
    )
    return ContextLimit(min(given), truncate, key, clients)


def trace_client_selection(scenario: models.Scenario) -> TraceClients | None:
    """``session_generator.client_selection`` of a trace replay of several clients (the
    clients of the rows that name none, chosen as the trace's cache is built); None without
    one (those rows are the first client's, as ever) or with one client (it serves them all)."""
    generator = scenario.session_generator
    assert isinstance(generator, models.TraceSessionGenerator)
    names = [name for name, _ in scenario.client_entries()]
    if generator.client_selection is None or len(names) < 2:
        return None
    return TraceClients(generator.client_selection, names, scenario.seed)


def open_trace(scenario: models.Scenario) -> OpenTrace:
    """Prepare (or reuse) the scenario's trace and choose the replayed window.

    Raises :class:`TraceFileError` (exit 2) for anything that would stop the replay.
    """
    generator = scenario.session_generator
    assert isinstance(generator, models.TraceSessionGenerator)
    path = Path(generator.trace_file)
    flavor = make_flavor(generator.flavor, path)
    max_model_len = trace_context_window(scenario)
    limit = trace_context_limit(scenario)
    selection = trace_client_selection(scenario)
    prepared = prepare_file(path, flavor, generator.flavor.model_dump_json(), limit, selection)
    clients = {name: i for i, (name, _) in enumerate(scenario.client_entries())}
    for name, line in sorted(prepared.clients.items(), key=lambda item: item[1]):
        if name not in clients:
            raise TraceFileError(
                path,
                line,
                f"client {name!r} is not a client of the scenario (they are:"
                f" {', '.join(repr(n) for n in clients)}); name one of them or add it to"
                " clients:",
            )
    if prepared.images_line is not None:
        for index, (name, client) in enumerate(scenario.client_entries()):
            if client.type != "openai_chat_completions":
                where = f"clients[{index}] ({name})" if scenario.clients else "client"
                raise TraceFileError(
                    path,
                    prepared.images_line,
                    f"this row has images, which go in chat messages, and {where} is an"
                    f" {client.type} client; make it openai_chat_completions",
                )
    table = TraceTable(prepared)
    scheduler = scenario.traffic_scheduler
    speedup = None
    turn_timing = "after_answer"
    lo, hi, span = 0, prepared.sessions, 0.0
    if isinstance(scheduler, models.TraceScheduler):
        if not prepared.has_timestamps:
            raise TraceFileError(
                path,
                1,
                "traffic_scheduler type 'trace' needs arrival times, and this trace has none;"
                " add a timestamp column (docs/traces.md) or use type 'rate'",
            )
        if prepared.untimed_line is not None:
            raise TraceFileError(
                path,
                prepared.untimed_line,
                "this session has no timestamp, and traffic_scheduler type 'trace' needs one"
                " for every session; give every row a timestamp (or use type 'rate')",
            )
        if prepared.unsorted_line is not None:
            raise TraceFileError(
                path,
                prepared.unsorted_line,
                "this row arrives before the row above it; sort the trace by its timestamps",
            )
        speedup = scheduler.speedup
        turn_timing = scheduler.turn_timing
        lo, hi, first, last = _window(
            prepared.cache, scheduler.start_offset, scheduler.max_duration
        )
        span = last - first
        if hi <= lo:
            raise TraceFileError(
                path, None, empty_window(table, scheduler.start_offset, scheduler.max_duration)
            )
    return OpenTrace(
        prepared,
        table,
        lo,
        hi,
        generator.wrap_mode,
        speedup,
        span,
        max_model_len,
        None if max_model_len is None else generator.oversized,
        clients,
        NodeChecks.of(generator),
        turn_timing,
        trace_context_key(scenario),
    )
