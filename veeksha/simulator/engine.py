"""The simulated inference engine: slots, a FIFO queue, a prefix cache and the step timing.

Pure state machines: every method takes the time as an argument and does no I/O; the server
(veeksha/simulator/server.py) feeds them events and sleeps between steps. Vocabulary:

- a *sequence* is one request inside the engine: ``prompt_tokens`` in, ``target_tokens`` out;
- a *slot* is one of ``max_num_seqs`` running places; more sequences wait in a FIFO queue;
- a *step* (engine timing) is one forward pass of the whole running batch; every sequence in it
  emits one token, sequences admitted in that step first prefill their uncached tokens:

      step_ms = decode_step_ms + decode_step_ms_per_seq × batch
                + 1000 × uncached_prompt_tokens_of_newly_admitted / prefill_tokens_per_s

- a *prefill-only* sequence (``target_tokens`` 0: one input of an embedding request) holds a
  slot for the one step that prefills it and finishes at that step's end without a token; it
  adds its prompt to the step's prefill but is not in ``batch``, which counts the sequences
  that decode;

- a *block* is ``block_size`` consecutive tokens; the prefix cache keys full blocks by a chained
  hash (a block's key depends on every token before it), so a prompt hits the cache on its
  longest cached run of leading blocks.

Worked example (engine timing, decode_step_ms=5, per_seq=1, prefill 1000 tok/s, 2 slots):
A (100 prompt tokens, 2 out) and B (50, 1) arrive at t=0 and C at t=1 ms. Step 1 at t=0 admits
A and B: 5 + 1×2 + 150 = 157 ms; at 157 ms A and B have their first token and B is done. Step 2
admits C (queue wait 156 ms) next to A: 5 + 1×2 + 100 = 107 ms; at 264 ms A ends and C has its
first token (TTFT 263 ms).
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veeksha.simulator.gpus import BusyClock

__all__ = [
    "BatchEngine",
    "EngineParams",
    "PrefixCache",
    "SeqState",
    "SlotQueue",
    "Step",
    "chain_hashes",
]

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def chain_hashes(
    tokens: SequenceOf[Any], block_size: int, start_block: int = 0, prev: int = 0
) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` from block ``start_block`` on.

    ``prev`` is the hash of block ``start_block - 1`` (0 for the first block), so hashes can be
    extended when tokens are appended without rehashing the beginning.
    """
    out: list[int] = []
    h = prev
    for i in range(start_block * block_size, len(tokens) - block_size + 1, block_size):
        h = hash((h, *tokens[i : i + block_size]))
        out.append(h)
    return out


class PrefixCache:
    """LRU cache of token blocks with a capacity in tokens and an optional idle lifetime.

    >>> cache = PrefixCache(capacity_tokens=64, block_size=16)
    >>> blocks = chain_hashes(list(range(40)), 16)
    >>> cache.match(blocks, now_ns=0)
    0
    >>> cache.insert(blocks, now_ns=0)
    >>> cache.match(blocks, now_ns=1)
    2
    """

    __slots__ = ("_blocks", "block_size", "capacity_blocks", "hit_tokens", "query_tokens", "ttl_ns")

    def __init__(self, capacity_tokens: int, block_size: int, ttl_ns: int | None = None) -> None:
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self.ttl_ns = ttl_ns
        self._blocks: OrderedDict[int, int] = OrderedDict()  # hash -> last use, LRU first
        self.query_tokens = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def _expire(self, now_ns: int) -> None:
        if self.ttl_ns is None:
            return
        blocks = self._blocks
        limit = now_ns - self.ttl_ns
        while blocks:
            key, used = next(iter(blocks.items()))
            if used > limit:
                break
            del blocks[key]

    def match(self, hashes: SequenceOf[int], now_ns: int) -> int:
        """Number of leading blocks of ``hashes`` in the cache; touches them (LRU)."""
        if not self.capacity_blocks:
            return 0
        self._expire(now_ns)
        blocks = self._blocks
        n = 0
        for h in hashes:
            if h not in blocks:
                break
            blocks[h] = now_ns
            blocks.move_to_end(h)
            n += 1
        return n

    def clear(self) -> None:
        """Forget every block (a server's cache reset); the hit and query counts go on."""
        self._blocks.clear()

    def insert(self, hashes: SequenceOf[int], now_ns: int) -> None:
        """Add (or touch) blocks, evicting the least recently used beyond the capacity."""
        if not self.capacity_blocks:
            return
        blocks = self._blocks
        for h in hashes:
            blocks[h] = now_ns
            blocks.move_to_end(h)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)

    def lookup(self, prompt_hashes: SequenceOf[int], prompt_tokens: int, now_ns: int) -> int:
        """Cached tokens of a prompt; at least one prompt token is always computed."""
        usable = (prompt_tokens - 1) // self.block_size
        cached = self.match(prompt_hashes[:usable], now_ns) * self.block_size
        self.query_tokens += prompt_tokens
        self.hit_tokens += cached
        return cached


@dataclass(frozen=True, slots=True)
class EngineParams:
    """Effective timing and capacity numbers (no presets, no None)."""

    max_num_seqs: int
    prefill_tokens_per_s: float = 0.0
    decode_step_ms: float = 0.0
    decode_step_ms_per_seq: float = 0.0

    def step_ns(self, batch: int, prefill_tokens: int) -> int:
        """Duration of one step of ``batch`` sequences that prefills ``prefill_tokens`` tokens."""
        ms = self.decode_step_ms + self.decode_step_ms_per_seq * batch
        ns = ms * NS_PER_MS
        if prefill_tokens and self.prefill_tokens_per_s > 0:
            ns += prefill_tokens * NS_PER_S / self.prefill_tokens_per_s
        return round(ns)


@dataclass(slots=True, eq=False)
class SeqState:
    """One request inside the engine. ``owner`` is the server's object for it (opaque here)."""

    prompt_tokens: int
    target_tokens: int
    prompt_hashes: list[int]
    arrival_ns: int
    owner: Any = None
    uses_prefix_cache: bool = True  # (False: looked up in no cache, counted in no hit rate)
    scheduled_ns: int = 0
    cached_tokens: int = 0
    generated: int = 0
    running: bool = False
    finished: bool = False


class SlotQueue:
    """``max_num_seqs`` running slots and a FIFO queue of waiting sequences.

    ``busy``: told when sequences take running slots and leave them (the simulated GPUs' busy
    time, shared by every queue of a process: ``veeksha.simulator.gpus``); None: nobody is.
    """

    __slots__ = ("busy", "cache", "max_num_seqs", "running", "waiting")

    def __init__(
        self, max_num_seqs: int, cache: PrefixCache | None, busy: BusyClock | None = None
    ) -> None:
        self.max_num_seqs = max_num_seqs
        self.cache = cache
        self.busy = busy
        self.running: list[SeqState] = []
        self.waiting: deque[SeqState] = deque()

    def submit(self, seq: SeqState) -> None:
        """Queue a sequence (it runs once ``admit`` finds a slot for it)."""
        self.waiting.append(seq)

    def admit(self, now_ns: int, arrived_by: int | None = None) -> list[SeqState]:
        """Move waiting sequences into free slots, in arrival order; look up their cache hits.

        ``arrived_by``: admit no sequence that arrived after it (an engine step that begins at
        the previous one's planned end leaves a request that arrived since to the next step).
        """
        admitted: list[SeqState] = []
        waiting = self.waiting
        while waiting and len(self.running) < self.max_num_seqs:
            if arrived_by is not None and waiting[0].arrival_ns > arrived_by:
                break
            seq = waiting.popleft()
            seq.scheduled_ns = now_ns
            seq.running = True
            if self.cache is not None and seq.uses_prefix_cache:
                seq.cached_tokens = self.cache.lookup(seq.prompt_hashes, seq.prompt_tokens, now_ns)
            self.running.append(seq)
            admitted.append(seq)
        if admitted and self.busy is not None:
            self.busy.started(len(admitted), now_ns)
        return admitted

    def release(self, seq: SeqState, now_ns: int | None = None) -> None:
        """Free the slot of a finished or aborted sequence (or drop it from the queue);
        ``now_ns`` (None: the present) is the time ``busy`` is told."""
        if seq.running:
            seq.running = False
            self.running.remove(seq)
            if self.busy is not None:
                self.busy.stopped(time.monotonic_ns() if now_ns is None else now_ns)
        elif not seq.finished:
            with contextlib.suppress(ValueError):
                self.waiting.remove(seq)
        seq.finished = True


@dataclass(slots=True)
class Step:
    """One engine step: who is in the batch, who prefills in it, when it ends."""

    start_ns: int
    end_ns: int
    batch: list[SeqState]
    prefill: list[SeqState] = field(default_factory=list)


class BatchEngine:
    """Continuous batching: each step admits waiting sequences and advances every running one.

    Drive it with ``begin_step(now)`` (None when idle), then ``end_step(step, now)`` at
    ``step.end_ns``: it returns the sequences that emitted a token (or, prefill-only, are
    done), finished ones already freed.
    """

    __slots__ = ("params", "slots")

    def __init__(self, params: EngineParams, cache: PrefixCache | None) -> None:
        self.params = params
        self.slots = SlotQueue(params.max_num_seqs, cache)

    def submit(self, seq: SeqState) -> None:
        """A new request arrived."""
        self.slots.submit(seq)

    def abort(self, seq: SeqState, now_ns: int | None = None) -> None:
        """The client went away (at ``now_ns``; None: the present): free the sequence's slot
        or queue place."""
        self.slots.release(seq, now_ns)

    @property
    def idle(self) -> bool:
        """No sequence is running or waiting."""
        return not self.slots.running and not self.slots.waiting

    def begin_step(self, now_ns: int) -> Step | None:
        """Plan the next step from ``now_ns``; None when there is nothing to do.

        ``now_ns`` is the engine's own time: the previous step's planned end when steps run
        back to back (so the time the server takes to write a step's tokens, or a late timer,
        never adds up over the steps), the present when the engine was idle. Only requests
        that had arrived by then join; an idle engine whose waiting requests all arrived later
        starts at the first one's arrival.
        """
        slots = self.slots
        admitted = slots.admit(now_ns, arrived_by=now_ns)
        if not slots.running and slots.waiting:
            now_ns = max(now_ns, slots.waiting[0].arrival_ns)
            admitted = slots.admit(now_ns, arrived_by=now_ns)
        batch = list(slots.running)
        if not batch:
            return None
        prefill_tokens = sum(s.prompt_tokens - s.cached_tokens for s in admitted)
        # (a prefill-only sequence runs in the step that admits it only, and decodes nothing)
        decoding = len(batch) - sum(1 for s in admitted if not s.target_tokens)
        duration = self.params.step_ns(decoding, prefill_tokens)
        return Step(now_ns, now_ns + duration, batch, admitted)

    def end_step(self, step: Step, now_ns: int) -> list[SeqState]:
        """Every sequence of the step still running emits one token (a prefill-only one none);
        finished ones are freed. Returns the sequences that advanced, in batch order."""
        cache = self.slots.cache
        if cache is not None:
            for seq in step.prefill:
                if seq.running and seq.uses_prefix_cache:
                    cache.insert(seq.prompt_hashes, now_ns)
        advanced: list[SeqState] = []
        for seq in step.batch:
            if not seq.running:
                continue  # aborted during the step
            if seq.target_tokens:
                seq.generated += 1
            advanced.append(seq)
            if seq.generated >= seq.target_tokens:
                self.slots.release(seq, now_ns)
        return advanced
