"""TraceSessions: a prepared trace's sessions as SessionSpecs, in blocks, with wrap; and the
trace's own arrival timeline.

Vocabulary:

* **window**: the sessions ``[lo, hi)`` replayed (all of them, or those starting within
  ``traffic_scheduler.start_offset`` / ``max_duration`` of the trace's first arrival);
* **pass**: one replay of the window. Pass 0 is the trace in order; with ``wrap_mode`` pass
  ``p ≥ 1`` replays it again, reshuffled: its **pieces** (runs of ``PIECE`` consecutive trace
  sessions) in a seeded random order, and the sessions of each piece in a seeded random order.
  Shuffling pieces, not sessions, keeps the work per session O(1) and the memory bounded at any
  trace size;
* session ``i`` of the run is pass ``i // A``, position ``i % A`` (``A`` sessions per pass); its
  ``session_id`` is ``i``, so wrapped sessions get fresh ids;
* **warm-ups** (rag's document warm-ups: the first ``warmup`` sessions of the window) are in pass
  0 only: passes ``p ≥ 1`` replay ``[lo + warmup, hi)``, so a wrapped run never measures them.

**Turn timing** (``traffic_scheduler.turn_timing: timestamps``, ``turn_scale`` = 1 / speedup):
each node's ``not_before_s`` is ``(its row's ts − its session's start) × turn_scale``, the same
mapping as the session's own arrival (so a node is never ready before its row's time); a row
without a timestamp has none. Otherwise (``after_answer``) nodes have none.

Every session is a pure function of (prepared trace, window, seed, i): prompts are built by the
text channel's ``PromptBuilder`` (exact token counts with the builtin tokenizer) from the
``content`` stream keyed by (pass, piece), so wrapped passes send fresh prompt text. With
``clients:`` each row's prompt is built in its own client's tokenizer (``ClientPrompts``: one
builder per distinct tokenizer, each node's draws the same whichever it is; a trace's own
content, its text, replies and hash-id blocks, by one ``TraceContent`` per distinct tokenizer),
so one tokenizer for every client replays exactly as one client does.

Arrival timeline (``TraceTimeline``): session ``k`` of pass 0 arrives ``(start_k − start_0) /
speedup`` after t0; pass ``p`` repeats the same slots (without the warm-ups'), one mean gap after
the previous pass's last arrival.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from veeksha.generate.content import ClientPrompts
from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.generate.tokenizer import TokenizerLike
from veeksha.generate.traces.content import ContentRows, TraceContent
from veeksha.generate.traces.table import SessionRows, TraceTable
from veeksha.generate.validation import NodeChecks, ReplayedReprompts
from veeksha.scenario.models import TextChannel

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["PIECE", "TraceSessions", "TraceTimeline", "empty_window", "window"]

PIECE = 256
_CACHED_PIECES = 4
_NEVER_S = 1e6  # gap after the last session of a trace that does not wrap (~12 days)


def window(
    table: TraceTable, start_offset: float, max_duration: float | None
) -> tuple[int, int, float, float]:
    """Sessions ``[lo, hi)`` starting within ``[t + start_offset, t + start_offset +
    max_duration)`` of the first start ``t`` (trace seconds), and the first and last of their
    starts. Reads the start column once when a window is asked for (not otherwise)."""
    prepared = table.prepared
    first_all = prepared.first_start or 0.0
    if start_offset <= 0 and max_duration is None:
        return 0, table.sessions, first_all, prepared.last_start or first_all
    begin = first_all + start_offset
    end = np.inf if max_duration is None else begin + max_duration
    lo = hi = None
    first = last = begin
    for group in range(table.num_groups):
        offset, starts = table.starts(group)
        inside = np.flatnonzero((starts >= begin) & (starts < end))
        if inside.size:
            if lo is None:
                lo, first = offset + int(inside[0]), float(starts[inside[0]])
            hi, last = offset + int(inside[-1]) + 1, float(starts[inside[-1]])
        elif lo is not None and starts.size and starts[0] >= end:
            break
    if lo is None or hi is None:
        return 0, 0, begin, begin
    return lo, hi, first, last


def empty_window(table: TraceTable, start_offset: float, max_duration: float | None) -> str:
    """Why ``window`` found no session, and what to change: ``start_offset`` is past the last
    arrival, or ``max_duration`` ends before the next one (trace seconds from the first)."""
    prepared = table.prepared
    first = prepared.first_start or 0.0
    last = (prepared.last_start or first) - first
    if start_offset > last:  # (bounds in ms, rounded the way that keeps them true)
        return (
            f"traffic_scheduler.start_offset {start_offset:g} s is past the trace's last session"
            f" arrival ({last:.3f} s after its first); lower start_offset to"
            f" {math.floor(last * 1000) / 1000:g} or less"
        )
    following: float | None = None
    for group in range(table.num_groups):  # (a sorted trace: the first start found is next)
        _, starts = table.starts(group)
        later = starts[starts >= first + start_offset]
        if later.size:
            following = float(later[0]) - first
            break
    duration = "all" if max_duration is None else f"{max_duration:g} s"
    text = (
        f"no session arrives within traffic_scheduler.start_offset {start_offset:g} s and"
        f" max_duration {duration} of the trace's first arrival"
    )
    if following is None or max_duration is None:  # (not reached: the window holds the last)
        return text + "; lower start_offset"
    return (
        f"{text} (the next arrives {following:.3f} s after it); raise max_duration above"
        f" {math.ceil((following - start_offset) * 1000) / 1000:g} or move start_offset"
    )


class TraceTimeline:
    """Gaps between consecutive session arrivals, in seconds, for ``RateArrivals`` (whose first
    session arrives at t0 without a gap)."""

    def __init__(
        self,
        table: TraceTable,
        lo: int,
        hi: int,
        span_s: float,
        speedup: float,
        wrap: bool,
        warmup: int = 0,
    ) -> None:
        self._table = table
        self.lo, self.hi = lo, hi
        self.warmup = warmup
        self.span_s = span_s
        self.speedup = speedup
        self._scale = 1.0 / speedup
        self._wrap = wrap
        span = span_s
        count = hi - lo
        self.pass_gap_s = (span / (count - 1) if count > 1 and span > 0 else 1.0) * self._scale
        self._chunks = self._gap_chunks()
        self._buffer: NDArray[np.float64] = np.empty(0)

    def _pass_starts(self, lo: int) -> Iterator[NDArray[np.float64]]:
        table = self._table
        firsts = table.prepared.group_sessions
        group = max(0, bisect_right(firsts, lo) - 1)
        while group < table.num_groups and firsts[group] < self.hi:
            first, starts = table.starts(group)
            a = max(0, lo - first)
            b = min(len(starts), self.hi - first)
            yield np.asarray(starts[a:b], dtype=np.float64)
            group += 1

    def _gap_chunks(self) -> Iterator[NDArray[np.float64]]:
        lo = self.lo
        while True:
            prev: float | None = None
            for chunk in self._pass_starts(lo):
                if not chunk.size:
                    continue
                gaps = np.diff(chunk) if prev is None else np.diff(chunk, prepend=prev)
                prev = float(chunk[-1])
                yield gaps * self._scale
            if not self._wrap:
                while True:
                    yield np.full(1024, _NEVER_S)
            yield np.array([self.pass_gap_s])
            lo = self.lo + self.warmup  # later passes: no warm-ups

    def sample(self, n: int) -> NDArray[np.float64]:
        """The next ``n`` gaps."""
        parts = []
        need = n
        while need > 0:
            if not self._buffer.size:
                self._buffer = next(self._chunks)
                continue
            take = self._buffer[:need]
            self._buffer = self._buffer[need:]
            parts.append(take)
            need -= take.size
        return np.concatenate(parts) if parts else np.empty(0)

    def offsets(self, n: int) -> NDArray[np.float64]:
        """Planned arrival offsets (s after t0) of the first ``n`` sessions (a fresh copy)."""
        if n <= 0:
            return np.empty(0)
        fresh = TraceTimeline(
            self._table, self.lo, self.hi, self.span_s, self.speedup, self._wrap, self.warmup
        )
        return np.concatenate([[0.0], np.cumsum(fresh.sample(n - 1))])


class TraceSessions:
    """The sessions of a prepared trace (see module doc). Specs are shared with a small cache:
    treat them as read-only."""

    def __init__(
        self,
        table: TraceTable,
        lo: int,
        hi: int,
        wrap: bool,
        seed: int,
        tokenizer: TokenizerLike,
        warmup: int = 0,
        clients: dict[str, int] | None = None,
        checks: NodeChecks | None = None,
        turn_scale: float | None = None,
        tokenizers: Sequence[TokenizerLike] | None = None,
    ) -> None:
        """``tokenizer`` builds every row's prompt unless ``tokenizers`` gives each client's
        (by client index, as ``clients``)."""
        self.table = table
        #: 1 / speedup with ``turn_timing: timestamps`` (nodes get ``not_before_s``); else None
        self._turn_scale = turn_scale
        #: client name → index (``Scenario.client_entries``) for rows that name their client
        self._clients = clients or {}
        self._checks = checks  # the trace generator's validation, on a share of the nodes
        self.lo, self.hi = lo, hi
        self.first_pass = hi - lo
        self.warmup = warmup
        self.per_pass = hi - lo - warmup  # each later pass
        self.wrap = wrap and self.per_pass > 0
        self.limit: int | None = None if self.wrap else self.first_pass
        self._streams = RandomStreams(seed)
        every = list(tokenizers) if tokenizers else [tokenizer]
        self._prompts = ClientPrompts(TextChannel(), every, seed)
        # each client's content builder (by client index), one per distinct tokenizer
        contents: dict[int, TraceContent] = {}
        for t in every:
            if id(t) not in contents:
                contents[id(t)] = TraceContent(seed, t, table.prepared.block_size)
        self._contents = [contents[id(t)] for t in every]
        self._content = self._contents[0]
        self._sizes = _piece_sizes(self.first_pass)
        self._later_sizes = _piece_sizes(self.per_pass)
        self._pass: tuple[int, NDArray[np.int64], list[int]] | None = None
        self._cache: OrderedDict[tuple[int, int], _Piece] = OrderedDict()

    def session(self, index: int) -> SessionSpec:
        """Session ``index`` of the run (``IndexError`` past the end of a trace that does not
        wrap)."""
        if index < 0 or (self.limit is not None and index >= self.limit) or not self.first_pass:
            raise IndexError(f"session {index} is past the end of the trace")
        if index < self.first_pass:
            p, pos = 0, index
        else:
            p, pos = divmod(index - self.first_pass, self.per_pass)
            p += 1
        order, offsets = self._order(p)
        k = bisect_right(offsets, pos) - 1
        j = pos - offsets[k]
        piece = self._cache.get((p, k))
        if piece is None:
            piece = self._piece(p, k, int(order[k]), index - j)
            self._cache[(p, k)] = piece
            while len(self._cache) > _CACHED_PIECES:
                self._cache.popitem(last=False)
        spec = piece.specs[j]
        blocks = piece.blocks.pop(j, None)
        if blocks:  # (its hash-id prompts, made now: a piece's at once held the loop ~50 ms)
            contents = self._contents
            for node, hash_ids, text in blocks:  # (each in its client's tokenizer)
                contents[node.client].blocks_prompt(node, piece.blocks_pass, hash_ids, text)
        return spec

    def _order(self, p: int) -> tuple[NDArray[np.int64], list[int]]:
        if self._pass is None or self._pass[0] != p:
            sizes = self._sizes if p == 0 else self._later_sizes
            count = len(sizes)
            if p == 0:
                order = np.arange(count, dtype=np.int64)
            else:
                order = self._streams.stream("trace_wrap", p).permutation(count)
            offsets = np.concatenate([[0], np.cumsum(sizes[order])]).tolist()
            self._pass = (p, order, offsets)
        return self._pass[1], self._pass[2]

    def _piece(self, p: int, k: int, source: int, first_index: int) -> _Piece:
        lo = self.lo + (0 if p == 0 else self.warmup) + source * PIECE
        hi = min(lo + PIECE, self.hi)
        rows = _merge(self.table.rows(lo, hi))
        count = hi - lo
        if rows.parents is None:
            roots = np.ones(len(rows.prompt_tokens), dtype=np.bool_)
        else:
            roots = np.fromiter((not ps for ps in rows.parents), np.bool_, len(rows.parents))
        index = self._clients
        clients = [index[c] if c else 0 for c in rows.client] if rows.client else None
        of_row = None if clients is None else np.asarray(clients, dtype=np.int64)
        texts, _ = self._prompts.build(
            self._content.corpus_targets(rows.content, rows.prompt_tokens),
            roots,
            self._streams.stream("content", "trace", p, k),
            of_row,
        )
        prompt_tokens = rows.prompt_tokens.tolist()
        output_tokens = rows.output_tokens.tolist()
        # a trace with warm-ups (rag's documents) keeps its blocks in every pass: the documents
        # warmed up once are the same documents later passes ask about
        blocks_pass = 0 if self.warmup else p
        systems, block_rows = self._apply(rows.content, texts, prompt_tokens, output_tokens, of_row)
        waits = rows.wait.tolist()
        bounds = rows.bounds.tolist()
        priorities = rows.priority
        abandons = rows.abandon_after
        not_before = self._not_before(rows)
        order = (
            range(count)
            if p == 0
            else self._streams.stream("trace_wrap", p, "piece", k).permutation(count).tolist()
        )
        specs = []
        for j, s in enumerate(order):
            r0, r1 = bounds[s], bounds[s + 1]
            nodes = [
                NodeSpec(
                    r - r0,
                    () if rows.parents is None else rows.parents[r],
                    None if rows.history is None else rows.history[r],
                    waits[r],
                    texts[r],
                    prompt_tokens[r],
                    output_tokens[r],
                    system=systems[r],
                    client=0 if clients is None else clients[r],
                    priority=(0 if priorities is None else priorities[r]) or 0,
                    not_before_s=None if not_before is None else not_before[r],
                    abandon_after_s=None if abandons is None else abandons[r],
                )
                for r in range(r0, r1)
            ]
            if (
                rows.tool_latency is not None
                or rows.reprompts is not None
                or rows.valid is not None
            ):
                _recorded_kinds(nodes, rows, r0)
            if rows.agent is not None or rows.round is not None or rows.transcript is not None:
                _recorded_agents(nodes, rows, r0)
            spec = SessionSpec(first_index + j, nodes)
            if rows.images is not None:
                spec.images = _recorded_images(nodes, rows.images, r0)
            specs.append(spec)
        # the hash-id prompts are made session by session, when asked for (``session``)
        block_nodes: dict[int, list[tuple[NodeSpec, list[int], str | None]]] = {}
        if block_rows and rows.content is not None:
            position = {s: j for j, s in enumerate(order)}
            of_row = np.searchsorted(rows.bounds, block_rows, side="right") - 1
            for r, s in zip(block_rows, of_row.tolist(), strict=True):
                node = specs[position[s]].nodes[r - bounds[s]]
                hash_ids = rows.content.hash_ids[r] or []
                block_nodes.setdefault(position[s], []).append(
                    (node, hash_ids, rows.content.text[r])
                )
        if self._checks is not None:
            every = [node for spec in specs for node in spec.nodes]
            self._checks.apply(every, self._streams.stream("validation", "trace", p, k))
        return _Piece(specs, block_nodes, blocks_pass)

    def _apply(
        self,
        content: ContentRows | None,
        texts: list[str],
        prompt_tokens: list[int],
        output_tokens: list[int],
        clients: NDArray[np.int64] | None,
    ) -> tuple[list[str | None], list[int]]:
        """``TraceContent.apply`` of each row in its client's content builder (``clients``:
        each row's client index; None: every row is the first client's)."""
        contents = self._contents
        if clients is None or all(c is contents[0] for c in contents):
            return contents[0].apply(content, texts, prompt_tokens, output_tokens)
        systems: list[str | None] = [None] * len(texts)
        blocks: list[int] = []
        done: set[int] = set()
        for own in contents:
            if id(own) in done:
                continue
            done.add(id(own))
            users = [i for i, c in enumerate(contents) if c is own]
            rows = np.flatnonzero(np.isin(clients, users)).tolist()
            if rows:
                systems, found = own.apply(content, texts, prompt_tokens, output_tokens, rows=rows)
                blocks += found
        return systems, sorted(blocks)

    def _not_before(self, rows: SessionRows) -> list[float | None] | None:
        """Each row's ``not_before_s`` (see the module doc), or None without turn timing."""
        scale = self._turn_scale
        if scale is None:
            return None
        if rows.ts is None:  # one-request sessions: each row's time is its session's start
            return [0.0] * len(rows.start)
        offsets = (rows.ts - rows.start) * scale
        return [None if math.isnan(x) else x for x in offsets.tolist()]


@dataclass(slots=True)
class _Piece:
    """A piece's sessions; the nodes whose prompts are hash-id blocks, by session (their
    position in the piece), are given them when their session is first asked for."""

    specs: list[SessionSpec]
    blocks: dict[int, list[tuple[NodeSpec, list[int], str | None]]]
    blocks_pass: int


def _recorded_kinds(nodes: list[NodeSpec], rows: SessionRows, r0: int) -> None:
    """Make the session's tool rows tool nodes and give re-prompted or checked rows their
    recorded attempts (a check that fails that many answers, then passes, or fails too when the
    last recorded answer was invalid)."""
    latency, reprompts, valid = rows.tool_latency, rows.reprompts, rows.valid
    for node in nodes:
        r = r0 + node.node_id
        seconds = None if latency is None else latency[r]
        count = (None if reprompts is None else reprompts[r]) or 0
        last = None if valid is None else valid[r]
        if seconds is not None:
            node.kind = "tool"
            node.latency_s = seconds
        elif count or last is not None:
            node.validation = ReplayedReprompts(count, last is not False)
            node.max_reprompts = count


def _recorded_agents(nodes: list[NodeSpec], rows: SessionRows, r0: int) -> None:
    """Give the session's rows their recorded agent, round and transcript (an
    ``agent_rounds`` node's messages merge its transcript's turns, as when recorded)."""
    agents, rounds, transcripts = rows.agent, rows.round, rows.transcript
    for node in nodes:
        r = r0 + node.node_id
        if agents is not None:
            node.agent = agents[r]
        number = None if rounds is None else rounds[r]
        if number is not None:
            node.round = number
        transcript = None if transcripts is None else transcripts[r]
        if transcript is not None:
            node.transcript = tuple(transcript)


def _recorded_images(nodes: list[NodeSpec], images: list[list[int] | None], r0: int) -> bool:
    """Give the session's request rows their recorded images (a recorded image channel's:
    each row's own message's, flat ``width, height, seed``); whether any has some."""
    some = False
    for node in nodes:
        flat = images[r0 + node.node_id]
        if flat and node.kind != "tool":
            node.images = tuple((flat[k], flat[k + 1], flat[k + 2]) for k in range(0, len(flat), 3))
            some = True
    return some


def _piece_sizes(count: int) -> NDArray[np.int64]:
    pieces = -(-count // PIECE)
    sizes = np.full(pieces, PIECE, dtype=np.int64)
    if pieces:
        sizes[-1] = count - PIECE * (pieces - 1)
    return sizes


def _merge(pieces: list[SessionRows]) -> SessionRows:
    if len(pieces) == 1:
        return pieces[0]
    offsets = np.cumsum([0] + [int(p.bounds[-1]) for p in pieces])
    bounds = np.concatenate(
        [pieces[0].bounds[:1]] + [p.bounds[1:] + offsets[i] for i, p in enumerate(pieces)]
    )
    linked = any(p.parents is not None for p in pieces)

    parents: list[tuple[int, ...]] = []
    history: list[int | None] = []
    for p in pieces:
        n = int(p.bounds[-1])
        parents.extend(p.parents if p.parents is not None else [()] * n)
        history.extend(p.history if p.history is not None else [None] * n)

    return SessionRows(
        pieces[0].first,
        bounds,
        np.concatenate([p.start for p in pieces]),
        np.concatenate([p.prompt_tokens for p in pieces]),
        np.concatenate([p.output_tokens for p in pieces]),
        parents if linked else None,
        history if linked else None,
        np.concatenate([p.wait for p in pieces]),
        ContentRows.merge([p.content for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.client for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.priority for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.tool_latency for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.reprompts for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.valid for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.agent for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.round for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.transcript for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        None
        if all(p.ts is None for p in pieces)
        else np.concatenate([p.start if p.ts is None else p.ts for p in pieces]),
        _merged([p.images for p in pieces], [int(p.bounds[-1]) for p in pieces]),
        _merged([p.abandon_after for p in pieces], [int(p.bounds[-1]) for p in pieces]),
    )


def _merged(parts: list[list[Any] | None], sizes: list[int]) -> list[Any] | None:
    """Consecutive pieces' optional column as one (pieces without it give Nones)."""
    if all(part is None for part in parts):
        return None
    out: list[Any] = []
    for part, size in zip(parts, sizes, strict=True):
        out.extend([None] * size if part is None else part)
    return out
