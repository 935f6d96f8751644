"""SessionGenerator: a scenario's sessions, deterministic per (seed, session index).

Sessions are generated in **blocks** of ``BLOCK_SESSIONS`` consecutive indices. Block ``b`` draws
every random quantity with vectorised numpy calls from its own sub-streams
``stream(name, "block", b)`` of the named streams (``graphs``, ``lengths``, ``outputs``,
``think_times``, ``content``), then assembles the ``SessionSpec`` objects. So:

* session ``i`` is a pure function of ``(scenario, i)``: ``session(i)`` gives the same result
  whatever was generated before (random access generates, and caches, ``i``'s block);
* each knob has its own stream: changing output lengths changes no graph, think time, body
  length or word; changing body lengths changes no graph, output length or think time;
* the hot path makes a handful of numpy calls per block and one ``NodeSpec`` per node.

``fixed_stair`` generators are stateful over the whole run (the k-th draw in session order gets
step k): their position at a block's start is remembered once known, and random access to a
later block first replays the blocks before it (only when a stair is configured).

Per request: ``prompt_tokens`` is the target token count of the new user message (the client
adds any "Generate at least N tokens." fallback), ``max_tokens`` the requested output length;
both are at least 1. ``wait_after_ready_s`` is 0 for roots, else a draw of the graph's
``request_wait_generator``.
"""

from __future__ import annotations

import gc
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

from veeksha.errors import ConfigurationError
from veeksha.generate.agent_rounds import AgentRoundsSessions
from veeksha.generate.clients import ClientPicker
from veeksha.generate.content import ClientPrompts
from veeksha.generate.distributions import (
    ChoiceLengthSampler,
    FixedStairSampler,
    IntervalSampler,
    make_interval_sampler,
    make_length_sampler,
)
from veeksha.generate.graphs import GraphShape, chain_tables, make_graph_generator
from veeksha.generate.image_channel import ImageSampler
from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.generate.tokenizer import TokenizerLike
from veeksha.generate.validation import NodeChecks
from veeksha.scenario.models import (
    AgentRoundsGraph,
    BranchingGraph,
    ImageChannel,
    Scenario,
    SingleRequestGraph,
    TextChannel,
    TraceSessionGenerator,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["BLOCK_SESSIONS", "SessionGenerator"]

BLOCK_SESSIONS = 256
_CACHED_BLOCKS = 2
_IDS: list[int] = list(range(64))


_CHAIN_CHILDREN: dict[int, list[list[int]]] = {}


def _chain_children(n: int) -> list[list[int]]:
    """Children of a chain of n nodes, shared by every such session (specs are read-only)."""
    children = _CHAIN_CHILDREN.get(n)
    if children is None:
        children = _CHAIN_CHILDREN[n] = [[v + 1] for v in range(n - 1)] + [[]]
    return children


def _ids(n: int) -> list[int]:
    if len(_IDS) < n:
        _IDS.extend(range(len(_IDS), 2 * n))
    return _IDS


class SessionGenerator:
    """The sessions of a scenario, generated lazily and deterministically.

    >>> from veeksha.generate.tokenizer import BuiltinTokenizer
    >>> gen = SessionGenerator(Scenario(seed=0), BuiltinTokenizer())
    >>> gen.session(3) == SessionGenerator(Scenario(seed=0), BuiltinTokenizer()).session(3)
    True

    Returned specs are shared with a small cache of recent blocks: treat them as read-only.
    """

    def __init__(
        self,
        scenario: Scenario,
        tokenizer: TokenizerLike,
        tokenizers: Sequence[TokenizerLike] | None = None,
    ) -> None:
        """``tokenizer`` counts every client's prompts unless ``tokenizers`` gives each
        client's (``Scenario.client_entries`` order; the engine's, ``RunSetup._tokenizers``):
        a node's prompt is then sized in the tokenizer of the client it goes to."""
        generator = scenario.session_generator
        if isinstance(generator, TraceSessionGenerator):
            raise ConfigurationError(
                "SessionGenerator makes synthetic sessions; traces are veeksha.generate.traces"
            )
        channel = next(c for c in generator.channels if isinstance(c, TextChannel))
        pictures = [c for c in generator.channels if isinstance(c, ImageChannel)]
        self._images = None if not pictures else ImageSampler(pictures[0])
        self.scenario = scenario
        self.streams = RandomStreams(scenario.seed)
        names = [name for name, _ in scenario.client_entries()]
        if tokenizers is None:
            tokenizers = [tokenizer] * len(names)
        if len(tokenizers) != len(names):
            raise ConfigurationError(
                f"{len(tokenizers)} tokenizers given for {len(names)} clients: give one a client"
            )
        prompts = ClientPrompts(channel, tokenizers, scenario.seed)
        self._agents: AgentRoundsSessions | None = None
        graph = generator.session_graph
        if isinstance(graph, AgentRoundsGraph):
            self._agents = AgentRoundsSessions(
                graph,
                prompts,
                channel.body_length_generator,
                generator.output_spec.text.output_length_generator,
                {name: i for i, name in enumerate(names)},
                self.streams,
            )
            graph = SingleRequestGraph()  # (the samplers below are not used)
        self._graphs = make_graph_generator(graph)
        self._checks = NodeChecks.of(graph)
        self._tools: tuple[float, IntervalSampler] | None = None
        if isinstance(graph, BranchingGraph) and graph.tool_probability > 0:
            latency = make_interval_sampler(graph.tool_latency_generator)
            self._tools = (graph.tool_probability, latency)
        self._bodies = make_length_sampler(channel.body_length_generator)
        self._outputs = make_length_sampler(generator.output_spec.text.output_length_generator)
        # length_pairs: (inputs, outputs) and a sampler of their indices, by weight
        self._pairs: tuple[NDArray[np.int64], NDArray[np.int64], ChoiceLengthSampler] | None = None
        if generator.length_pairs is not None:
            pairs = generator.length_pairs
            self._pairs = (
                np.array([pair.input for pair in pairs], dtype=np.int64),
                np.array([pair.output for pair in pairs], dtype=np.int64),
                ChoiceLengthSampler(list(range(len(pairs))), [pair.weight for pair in pairs]),
            )
        wait = self._graphs.wait_config
        self._waits = make_interval_sampler(wait) if wait is not None else None
        self._prompts = prompts
        self._clients = ClientPicker(generator.client_selection, names)
        samplers = [*self._graphs.samplers, self._bodies, self._outputs]
        if self._images is not None:
            samplers += self._images.samplers
        self._stairs = [s for s in samplers if isinstance(s, FixedStairSampler)]
        self._positions: dict[int, tuple[int, ...]] = {0: tuple(0 for _ in self._stairs)}
        self._cache: OrderedDict[int, list[SessionSpec]] = OrderedDict()

    # ------------------------------------------------------------------------------ public API

    def session(self, index: int) -> SessionSpec:
        """Session ``index`` (≥ 0); the same for a given scenario whatever was asked before."""
        if index < 0:
            raise ValueError(f"session index must be >= 0 (got {index})")
        block, offset = divmod(index, BLOCK_SESSIONS)
        sessions = self._cache.get(block)
        if sessions is None:
            sessions = self.block(block)
            self._cache[block] = sessions
            while len(self._cache) > _CACHED_BLOCKS:
                self._cache.popitem(last=False)
        return sessions[offset]

    def iter_sessions(self, start: int = 0) -> Iterator[SessionSpec]:
        """Sessions ``start, start + 1, …`` without end (bounded memory: one block at a time)."""
        block, offset = divmod(start, BLOCK_SESSIONS)
        while True:
            sessions = self._cache.get(block) or self.block(block)
            yield from sessions[offset:] if offset else sessions
            offset = 0
            block += 1

    def block(self, block: int) -> list[SessionSpec]:
        """Sessions ``block·BLOCK_SESSIONS`` to ``(block+1)·BLOCK_SESSIONS - 1`` (uncached)."""
        if self._stairs:
            self._seek(block)
        # No reference cycles are made here: pausing the cyclic GC while thousands of specs are
        # built avoids repeated young-generation scans (measured: ~1.5x faster), and is undone
        # at once.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            if self._agents is not None:
                first = block * BLOCK_SESSIONS
                sessions = self._agents.block(block, first, BLOCK_SESSIONS)
            else:
                sessions = self._generate(block)
        finally:
            if gc_was_enabled:
                gc.enable()
        if self._stairs:
            self._positions[block + 1] = tuple(s.position for s in self._stairs)
        return sessions

    # ------------------------------------------------------------------------------- internals

    def _seek(self, block: int) -> None:
        """Put every stair sampler at its position at the start of ``block``."""
        known = max(b for b in self._positions if b <= block)
        while known < block:  # replay earlier blocks to learn where the stairs stand
            self.block(known)
            known += 1
        for sampler, position in zip(self._stairs, self._positions[block], strict=True):
            sampler.position = position

    def _mix_tools(self, nodes: list[NodeSpec], roots: NDArray[np.bool_], block: int) -> None:
        """Make a share of the non-root nodes tool calls (their own ``tools`` stream)."""
        assert self._tools is not None
        probability, latency = self._tools
        rng = self.streams.stream("tools", "block", block)
        picks = np.flatnonzero((rng.random(len(nodes)) < probability) & ~roots).tolist()
        latency.rng = self.streams.stream("tool_latency", "block", block)
        for k, seconds in zip(picks, latency.sample(len(picks)).tolist(), strict=True):
            node = nodes[k]
            node.kind = "tool"
            node.latency_s = seconds
            node.max_tokens = node.prompt_tokens  # its result: the node's text
            node.shared_prefix_tokens = 0

    def _generate(self, block: int) -> list[SessionSpec]:
        streams = self.streams
        graphs = self._graphs
        rng_graphs = streams.stream("graphs", "block", block)
        shapes: list[GraphShape] = []
        if graphs.chain:  # no per-session shape objects: index shared per-position tables
            sizes = graphs.chain_sizes(BLOCK_SESSIONS, rng_graphs)
            total = int(sizes.sum())
            firsts = np.cumsum(sizes) - sizes
            node_ids = (np.arange(total) - np.repeat(firsts, sizes)).tolist()
            parent_table, history_table = chain_tables(int(sizes.max()), graphs.inherit_history)
            parents = list(map(parent_table.__getitem__, node_ids))
            history = list(map(history_table.__getitem__, node_ids))
            roots = np.zeros(total, dtype=np.bool_)
            roots[firsts] = True
        else:
            shapes = graphs.block(BLOCK_SESSIONS, rng_graphs)
            sizes = np.fromiter((len(s.parents) for s in shapes), np.int64, len(shapes))
            total = int(sizes.sum())
            ids = _ids(int(sizes.max()))
            node_ids = list(chain.from_iterable(ids[:n] for n in sizes.tolist()))
            parents = list(chain.from_iterable(s.parents for s in shapes))
            history = list(chain.from_iterable(s.history_parents for s in shapes))
            roots = np.fromiter((not p for p in parents), np.bool_, total)

        if self._pairs is None:
            self._bodies.rng = streams.stream("lengths", "block", block)
            bodies = np.maximum(self._bodies.sample(total), 1)
            self._outputs.rng = streams.stream("outputs", "block", block)
            outputs = np.maximum(self._outputs.sample(total), 1)
        else:  # (one draw a node: its body and output lengths together)
            inputs, answers, chooser = self._pairs
            chooser.rng = streams.stream("lengths", "block", block)
            drawn = chooser.sample(total)
            bodies, outputs = np.maximum(inputs[drawn], 1), answers[drawn]
        waits = np.zeros(total)
        if self._waits is not None:
            non_roots = ~roots
            self._waits.rng = streams.stream("think_times", "block", block)
            waits[non_roots] = self._waits.sample(total - int(roots.sum()))
        first = block * BLOCK_SESSIONS
        # each node's client, known now: its prompt is sized in that client's tokenizer
        picks = (
            None
            if self._clients.single
            else self._clients.picks(total, first, sizes.tolist(), streams, block)
        )
        texts, shared = self._prompts.build(
            bodies,
            roots,
            streams.stream("content", "block", block),
            None if picks is None or self._prompts.single else np.array(picks, dtype=np.int64),
        )

        nodes = list(
            map(
                NodeSpec,
                node_ids,
                parents,
                history,
                waits.tolist(),
                texts,
                bodies.tolist(),
                outputs.tolist(),
                shared,
            )
        )
        if self._tools is not None:
            self._mix_tools(nodes, roots, block)
        if self._checks is not None:
            self._checks.apply(nodes, streams.stream("validation", "block", block))
        if picks is not None:
            for node, pick in zip(nodes, picks, strict=True):
                node.client = pick
        ends = np.cumsum(sizes).tolist()
        starts = [0, *ends[:-1]]
        if graphs.chain:
            sessions = [
                SessionSpec(first + k, nodes[lo:hi], _chain_children(hi - lo))
                for k, (lo, hi) in enumerate(zip(starts, ends, strict=True))
            ]
        else:
            sessions = [
                SessionSpec(first + k, nodes[lo:hi], shape.children())
                for k, (lo, hi, shape) in enumerate(zip(starts, ends, shapes, strict=True))
            ]
        if self._images is not None:
            self._images.add(sessions, streams.stream("images", "block", block))
        return sessions
