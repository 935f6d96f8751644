"""Session graph generators: the request DAG of one session.

A session graph is a DAG of requests. Vocabulary:

* **node**: one request; node ids are topological indices (every parent id < its child's id).
* **root**: a node without parents; it is ready when its session starts.
* **parents**: the nodes that must complete before a node becomes ready (all of them).
* **history parent**: the one parent whose conversation the node continues (``None``: the node
  sends only its own prompt).
* **layer** (branching graphs): nodes at the same depth; edges only go forward (to later layers).

Generators return a :class:`GraphShape` (plain lists, no networkx on the hot path);
``GraphShape.to_networkx()`` and ``GraphShape.validate()`` exist for checks and tests. Think times
are not part of the shape: the session generator draws them from the graph's
``request_wait_generator`` on the ``think_times`` stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from veeksha.generate.distributions import IntervalConfig, LengthSampler, make_length_sampler
from veeksha.scenario.models import BranchingGraph, LinearGraph, SingleRequestGraph

if TYPE_CHECKING:  # networkx (~0.1 s to import) is only for checks and tests, never a run
    import networkx as nx

__all__ = [
    "BranchingGraphGenerator",
    "GraphGenerator",
    "GraphShape",
    "LinearGraphGenerator",
    "SingleRequestGraphGenerator",
    "branching_graph",
    "chain_tables",
    "linear_graph",
    "make_graph_generator",
    "single_request_graph",
]

GraphConfig = SingleRequestGraph | LinearGraph | BranchingGraph


@dataclass(slots=True)
class GraphShape:
    """The structure of one session: ``parents[v]`` and ``history_parents[v]`` per node ``v``.

    ``layers`` (branching graphs only) gives each node's layer; ``chain`` marks a linear chain.
    """

    parents: list[tuple[int, ...]]
    history_parents: list[int | None]
    chain: bool = field(default=False, repr=False)
    layers: list[int] | None = field(default=None, repr=False)

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @property
    def roots(self) -> list[int]:
        return [v for v, ps in enumerate(self.parents) if not ps]

    def children(self) -> list[list[int]]:
        """Fresh child lists, one per node, in increasing id order."""
        n = len(self.parents)
        if self.chain:
            out = [[v + 1] for v in range(n - 1)]
            out.append([])
            return out
        kids: list[list[int]] = [[] for _ in range(n)]
        for v, ps in enumerate(self.parents):
            for p in ps:
                kids[p].append(v)
        return kids

    def to_networkx(self) -> nx.DiGraph:
        """The DAG as a networkx graph; edge ``(p, v)`` has ``history=True`` for a history edge."""
        import networkx as nx  # lazily: see the TYPE_CHECKING import

        g = nx.DiGraph()
        g.add_nodes_from(range(len(self.parents)))
        for v, ps in enumerate(self.parents):
            for p in ps:
                g.add_edge(p, v, history=self.history_parents[v] == p)
        return g

    def validate(self) -> None:
        """Raise ``ValueError`` unless the shape is a well-formed session DAG (see module doc)."""
        n = len(self.parents)
        if n == 0 or len(self.history_parents) != n:
            raise ValueError("a graph needs at least one node and one history entry per node")
        for v, ps in enumerate(self.parents):
            if len(set(ps)) != len(ps) or any(not 0 <= p < v for p in ps):
                raise ValueError(f"node {v}: parents {ps} are not distinct earlier nodes")
            hp = self.history_parents[v]
            if hp is not None and hp not in ps:
                raise ValueError(f"node {v}: history parent {hp} is not one of its parents")
        import networkx as nx  # lazily: see the TYPE_CHECKING import

        g = self.to_networkx()
        if not nx.is_directed_acyclic_graph(g):
            raise ValueError("graph has a cycle")
        reached: set[int] = set()
        for r in self.roots:
            reached |= nx.descendants(g, r) | {r}
        if len(reached) != n:
            raise ValueError("some nodes are not reachable from a root")


# ---------------------------------------------------------------------------- single and linear

_CHAIN_PARENTS: list[tuple[int, ...]] = [()]
_CHAIN_HISTORY: list[int | None] = [None]
_NO_HISTORY: list[int | None] = [None]


def chain_tables(
    longest: int, inherit_history: bool
) -> tuple[list[tuple[int, ...]], list[int | None]]:
    """Per-position parents and history parents of chain nodes, for ``longest`` positions at
    least (shared tables: index them, never mutate them)."""
    if len(_CHAIN_PARENTS) < longest:
        _grow_chain_cache(longest)
    return _CHAIN_PARENTS, _CHAIN_HISTORY if inherit_history else _NO_HISTORY


def _grow_chain_cache(n: int) -> None:
    while len(_CHAIN_PARENTS) < n:
        k = len(_CHAIN_PARENTS)
        _CHAIN_PARENTS.append((k - 1,))
        _CHAIN_HISTORY.append(k - 1)
        _NO_HISTORY.append(None)


def single_request_graph() -> GraphShape:
    """One root, no edges."""
    return GraphShape([()], [None], chain=True)


def linear_graph(num_turns: int, inherit_history: bool = True) -> GraphShape:
    """A chain ``0 → 1 → … → n-1``; with ``inherit_history`` each turn's history parent is the
    previous turn (a multi-turn chat), else turns only wait for each other. ``num_turns`` < 1
    counts as 1.

    >>> linear_graph(3).parents, linear_graph(3).history_parents
    ([(), (0,), (1,)], [None, 0, 1])
    """
    n = max(1, num_turns)
    if len(_CHAIN_PARENTS) < n:
        _grow_chain_cache(n)
    history = _CHAIN_HISTORY if inherit_history else _NO_HISTORY
    return GraphShape(_CHAIN_PARENTS[:n], history[:n], chain=True)


# ------------------------------------------------------------------------------------ branching


def branching_graph(
    rng: np.random.Generator,
    *,
    num_layers: LengthSampler,
    layer_width: LengthSampler,
    fan_out: LengthSampler,
    fan_in: LengthSampler,
    connection_dist: LengthSampler,
    single_root: bool = True,
    inherit_history: bool = True,
) -> GraphShape:
    """A layered DAG, as an agentic workflow with fan-out, fan-in and skip connections.

    Algorithm (draws in this order; the samplers and ``rng`` should share one stream):

    1. ``L = max(1, num_layers)`` layers; width ``w_l = max(1, layer_width)`` drawn per layer,
       ``w_0 = 1`` with ``single_root``. Nodes are numbered layer by layer, so ids are
       topological.
    2. **Fan-out**: each node of a layer ``l < L-1`` tries ``fan_out`` forward edges; each edge
       draws a skip distance ``d = max(1, connection_dist)``, goes to layer ``min(l + d, L-1)``
       (capped at the last layer) and to a uniformly chosen node there. Duplicate edges collapse.
    3. **Fan-in**: each node of a layer ``l ≥ 1`` draws a minimum parent count
       ``max(1, fan_in)`` capped at ``w_{l-1}``; while it has fewer parents, it gains one from
       layer ``l-1`` chosen uniformly among those not yet its parents. So every non-root node
       has a parent in an earlier layer and is reachable from layer 0 (the roots).
    4. **History**: with ``inherit_history`` each non-root node takes one of its parents,
       chosen uniformly, as its history parent.

    Worked example: widths ``[1, 2, 1]`` give nodes ``0 | 1 2 | 3``. Node 0 tries 2 edges, to
    1 and 1 (they collapse to one edge 0→1); node 1 tries one edge with skip distance 2 → 3; node
    2 tries one edge → 3. Fan-in: node 2 has no parent, draws a minimum of 2, capped at
    ``w_0 = 1``, and gains 0→2; node 3 already has parents {1, 2}. Parents are
    ``[(), (0,), (0,), (1, 2)]``; the history parents might be ``[None, 0, 0, 2]``.
    """
    n_layers = max(1, int(num_layers.sample_one()))
    widths = np.maximum(layer_width.sample(n_layers), 1)
    if single_root:
        widths[0] = 1
    starts = np.zeros(n_layers + 1, dtype=np.int64)
    np.cumsum(widths, out=starts[1:])
    n = int(starts[-1])
    start_l = starts.tolist()
    width_l = widths.tolist()
    parent_sets: list[set[int]] = [set() for _ in range(n)]

    # 2. fan-out: every node before the last layer tries forward edges
    senders = int(starts[n_layers - 1])
    if senders:
        outs = np.maximum(fan_out.sample(senders), 0)
        total = int(outs.sum())
        if total:
            src = np.repeat(np.arange(senders), outs)
            src_layer = np.searchsorted(starts, src, side="right") - 1
            dist = np.maximum(connection_dist.sample(total), 1)
            dst_layer = np.minimum(src_layer + dist, n_layers - 1)
            dst = starts[dst_layer] + (rng.random(total) * widths[dst_layer]).astype(np.int64)
            for s, d in zip(src.tolist(), dst.tolist(), strict=True):
                parent_sets[d].add(s)

    # 3. fan-in: top up each non-root node from the previous layer
    if n_layers > 1:
        first = start_l[1]
        needs = np.maximum(fan_in.sample(n - first), 1).tolist()
        layer = 1
        for v in range(first, n):
            while v >= start_l[layer + 1]:
                layer += 1
            lo, width = start_l[layer - 1], width_l[layer - 1]
            have = parent_sets[v]
            need = min(needs[v - first], width) - len(have)
            if need > 0:
                free = [p for p in range(lo, lo + width) if p not in have]
                pick = rng.choice(len(free), size=need, replace=False)
                have.update(free[i] for i in pick.tolist())

    parents = [tuple(sorted(ps)) for ps in parent_sets]
    history: list[int | None] = [None] * n
    if inherit_history and n > start_l[1]:
        picks = rng.random(n - start_l[1]).tolist()
        for v in range(start_l[1], n):
            ps = parents[v]
            history[v] = ps[int(picks[v - start_l[1]] * len(ps))]
    layers = np.repeat(np.arange(n_layers), widths).tolist()
    return GraphShape(parents, history, layers=layers)


# ------------------------------------------------------------------------------------ generators


class GraphGenerator:
    """Draws the shapes of a block of sessions from one ``graphs`` generator.

    ``samplers`` lists the length samplers it draws from (so a caller can save and restore the
    position of stateful ones); ``wait_config`` is the graph's ``request_wait_generator``.
    Chain generators (``chain = True``: single request, linear) also offer ``chain_sizes``, the
    node counts alone, which lets a caller skip per-session shape objects.
    """

    wait_config: IntervalConfig | None = None
    chain = False
    inherit_history = True

    def chain_sizes(self, n_sessions: int, rng: np.random.Generator) -> np.ndarray:
        """Node counts of ``n_sessions`` chain sessions (chain generators only)."""
        raise NotImplementedError

    def __init__(self) -> None:
        self.samplers: list[LengthSampler] = []

    def block(self, n_sessions: int, rng: np.random.Generator) -> list[GraphShape]:
        """Shapes of ``n_sessions`` consecutive sessions."""
        raise NotImplementedError


class SingleRequestGraphGenerator(GraphGenerator):
    """Every session is one request."""

    chain = True

    def chain_sizes(self, n_sessions: int, rng: np.random.Generator) -> np.ndarray:
        return np.ones(n_sessions, dtype=np.int64)

    def block(self, n_sessions: int, rng: np.random.Generator) -> list[GraphShape]:
        return [single_request_graph() for _ in range(n_sessions)]


class LinearGraphGenerator(GraphGenerator):
    """Chains of ``num_request_generator`` turns (one vectorised draw per block)."""

    def __init__(self, cfg: LinearGraph) -> None:
        super().__init__()
        self.cfg = cfg
        self.wait_config = cfg.request_wait_generator
        self.turns = make_length_sampler(cfg.num_request_generator)
        self.samplers = [self.turns]
        self.inherit_history = cfg.inherit_history

    chain = True

    def chain_sizes(self, n_sessions: int, rng: np.random.Generator) -> np.ndarray:
        self.turns.rng = rng
        return np.maximum(self.turns.sample(n_sessions), 1)

    def block(self, n_sessions: int, rng: np.random.Generator) -> list[GraphShape]:
        turns = self.chain_sizes(n_sessions, rng)
        return [linear_graph(n, self.inherit_history) for n in turns.tolist()]


class BranchingGraphGenerator(GraphGenerator):
    """Layered DAGs (see :func:`branching_graph`), one session after another."""

    def __init__(self, cfg: BranchingGraph) -> None:
        super().__init__()
        self.cfg = cfg
        self.wait_config = cfg.request_wait_generator
        self.layers = make_length_sampler(cfg.num_layers_generator)
        self.width = make_length_sampler(cfg.layer_width_generator)
        self.fan_out = make_length_sampler(cfg.fan_out_generator)
        self.fan_in = make_length_sampler(cfg.fan_in_generator)
        self.dist = make_length_sampler(cfg.connection_dist_generator)
        self.samplers = [self.layers, self.width, self.fan_out, self.fan_in, self.dist]

    def block(self, n_sessions: int, rng: np.random.Generator) -> list[GraphShape]:
        for s in self.samplers:
            s.rng = rng
        cfg = self.cfg
        return [
            branching_graph(
                rng,
                num_layers=self.layers,
                layer_width=self.width,
                fan_out=self.fan_out,
                fan_in=self.fan_in,
                connection_dist=self.dist,
                single_root=cfg.single_root,
                inherit_history=cfg.inherit_history,
            )
            for _ in range(n_sessions)
        ]


def make_graph_generator(cfg: GraphConfig) -> GraphGenerator:
    """The generator of a ``session_graph`` config."""
    if isinstance(cfg, LinearGraph):
        return LinearGraphGenerator(cfg)
    if isinstance(cfg, BranchingGraph):
        return BranchingGraphGenerator(cfg)
    return SingleRequestGraphGenerator()
