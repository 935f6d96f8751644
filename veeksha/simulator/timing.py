"""Real-time drivers of the engine model: they sleep until the model says a token is due.

Two timings, both behind ``max_num_seqs`` slots and a FIFO queue (``SlotQueue``):

- ``FixedDriver``: each running request gets its first token ``ttft_ms`` after it was scheduled
  and one more every ``itl_ms``, whatever the load (token c is due at
  ``scheduled + ttft + (c - 1) × itl``, an absolute schedule that never drifts). With both zero
  (the fast preset) the whole answer is produced synchronously, without any timer.
- ``EngineDriver``: continuous batching (``BatchEngine``), one timer per engine step.

A driver talks to its requests (``Sink``) through three calls: ``on_scheduled``,
``on_tokens(count)`` with the total tokens generated so far, and ``on_done``. A prefill-only
sequence (``target_tokens`` 0, an embedding's input) gets no ``on_tokens``: it is done when its
first token would have come (``fixed``: ``ttft_ms`` after it was scheduled; ``engine``: at the
end of the step that prefills it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from veeksha.simulator.engine import BatchEngine, PrefixCache, SeqState, SlotQueue, Step

__all__ = ["Driver", "EngineDriver", "FixedDriver", "NsTimer", "Sink"]

_EARLY_NS = 100_000  # uvloop's millisecond clock may fire a timer up to 1 ms early


class NsTimer:
    """A one-shot timer at an absolute ``time.monotonic_ns()`` deadline, never early."""

    __slots__ = ("_args", "_callback", "_due_ns", "_handle", "_loop")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        due_ns: int,
        callback: Callable[..., Any],
        *args: Any,
    ) -> None:
        self._loop = loop
        self._due_ns = due_ns
        self._callback = callback
        self._args = args
        self._handle = loop.call_later(max(due_ns - time.monotonic_ns(), 0) / 1e9, self._fire)

    def _fire(self) -> None:
        left = self._due_ns - time.monotonic_ns()
        if left > _EARLY_NS:
            self._handle = self._loop.call_later(left / 1e9, self._fire)
            return
        self._callback(*self._args)

    def cancel(self) -> None:
        """Never fire."""
        self._handle.cancel()


class Sink(Protocol):
    """A request as the drivers see it."""

    seq: SeqState
    timer: NsTimer | None

    def on_scheduled(self, now_ns: int) -> None: ...

    def on_tokens(self, count: int, now_ns: int) -> None: ...

    def on_done(self, now_ns: int) -> None: ...


class Driver(Protocol):
    """Runs requests through a timing model."""

    slots: SlotQueue

    def submit(self, sink: Sink) -> None: ...

    def abort(self, sink: Sink) -> None: ...


class FixedDriver:
    """Fixed TTFT and inter-token latency per request, behind the slots."""

    __slots__ = ("_loop", "itl_ns", "slots", "tokens_per_chunk", "ttft_ns")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        max_num_seqs: int,
        cache: PrefixCache | None,
        ttft_ms: float,
        itl_ms: float,
        tokens_per_chunk: int,
    ) -> None:
        self._loop = loop
        self.slots = SlotQueue(max_num_seqs, cache)
        self.ttft_ns = round(ttft_ms * 1e6)
        self.itl_ns = round(itl_ms * 1e6)
        self.tokens_per_chunk = tokens_per_chunk

    def submit(self, sink: Sink) -> None:
        self.slots.submit(sink.seq)
        self._admit()

    def abort(self, sink: Sink) -> None:
        if sink.timer is not None:
            sink.timer.cancel()
            sink.timer = None
        was_running = sink.seq.running
        self.slots.release(sink.seq, time.monotonic_ns())
        if was_running:
            self._admit()

    def _admit(self) -> None:
        while True:
            now = time.monotonic_ns()
            admitted = self.slots.admit(now)
            if not admitted:
                return
            for seq in admitted:
                sink: Sink = seq.owner
                sink.on_scheduled(now)
                self._advance(sink)

    def _advance(self, sink: Sink) -> None:
        sink.timer = None
        seq = sink.seq
        target = seq.target_tokens
        k = self.tokens_per_chunk
        while seq.running:
            first = seq.generated == 0
            count = target if self.itl_ns == 0 else min(seq.generated + k, target)
            due = seq.scheduled_ns + self.ttft_ns + max(count - 1, 0) * self.itl_ns
            now = time.monotonic_ns()
            if due > now:
                sink.timer = NsTimer(self._loop, due, self._advance, sink)
                return
            seq.generated = count
            if first and self.slots.cache is not None and seq.uses_prefix_cache:
                self.slots.cache.insert(seq.prompt_hashes, now)
            if count >= target:
                self.slots.release(seq, now)
                if count:
                    sink.on_tokens(count, now)
                sink.on_done(now)
                self._admit()
                return
            sink.on_tokens(count, now)


class EngineDriver:
    """Continuous batching: one timer per engine step."""

    __slots__ = ("_loop", "_step", "_timer", "engine", "slots")

    def __init__(self, loop: asyncio.AbstractEventLoop, engine: BatchEngine) -> None:
        self._loop = loop
        self.engine = engine
        self.slots = engine.slots
        self._step: Step | None = None
        self._timer: NsTimer | None = None

    def submit(self, sink: Sink) -> None:
        self.engine.submit(sink.seq)
        if self._step is None:
            self._begin()

    def abort(self, sink: Sink) -> None:
        self.engine.abort(sink.seq, time.monotonic_ns())

    def _begin(self, start_ns: int | None = None) -> None:
        """Start a step now (the engine was idle), or at ``start_ns``, the previous step's
        planned end: steps follow the model's own timeline, so the time spent writing a step's
        tokens (a batch of 128 streams: about 4 ms here) or a late timer is caught up at the
        next step instead of lengthening every step after it (docs/simulator.md)."""
        now = time.monotonic_ns()
        step = self.engine.begin_step(now if start_ns is None else start_ns)
        self._step = step
        if step is None:
            return
        for seq in step.prefill:
            seq.owner.on_scheduled(now)
        self._timer = NsTimer(self._loop, step.end_ns, self._end)

    def _end(self) -> None:
        step = self._step
        assert step is not None
        now = time.monotonic_ns()
        for seq in self.engine.end_step(step, now):
            sink: Sink = seq.owner
            if seq.generated:
                sink.on_tokens(seq.generated, now)
            if seq.finished:
                sink.on_done(now)
        self._begin(step.end_ns)
