"""Session graphs: property tests (hypothesis) of shape, bounds and history."""

from __future__ import annotations

from collections import Counter

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veeksha.generate.graphs import (
    GraphShape,
    linear_graph,
    make_graph_generator,
    single_request_graph,
)
from veeksha.scenario.models import (
    BranchingGraph,
    FixedLength,
    LinearGraph,
    SingleRequestGraph,
    UniformLength,
)


@st.composite
def ranges(draw: st.DrawFn, lo: int, hi: int) -> tuple[int, int]:
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    return a, b


def uniform(bounds: tuple[int, int]) -> UniformLength:
    return UniformLength(min=bounds[0], max=bounds[1])


def check_dag(shape: GraphShape) -> None:
    shape.validate()  # distinct earlier parents, history parent among parents, acyclic, reachable
    g = shape.to_networkx()
    assert nx.is_directed_acyclic_graph(g)
    assert list(nx.topological_sort(g)) is not None
    for v, ps in enumerate(shape.parents):
        assert all(p < v for p in ps)


@settings(max_examples=60, deadline=None)
@given(
    layers=ranges(1, 6),
    width=ranges(1, 4),
    fan_out=ranges(0, 3),
    fan_in=ranges(1, 4),
    dist=ranges(1, 3),
    single_root=st.booleans(),
    inherit=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_branching_properties(
    layers: tuple[int, int],
    width: tuple[int, int],
    fan_out: tuple[int, int],
    fan_in: tuple[int, int],
    dist: tuple[int, int],
    single_root: bool,
    inherit: bool,
    seed: int,
) -> None:
    cfg = BranchingGraph(
        num_layers_generator=uniform(layers),
        layer_width_generator=uniform(width),
        fan_out_generator=uniform(fan_out),
        fan_in_generator=uniform(fan_in),
        connection_dist_generator=uniform(dist),
        single_root=single_root,
        inherit_history=inherit,
    )
    for shape in make_graph_generator(cfg).block(4, np.random.default_rng(seed)):
        check_dag(shape)
        assert shape.layers is not None
        widths = Counter(shape.layers)
        n_layers = max(shape.layers) + 1
        assert layers[0] <= n_layers <= layers[1]
        assert sorted(widths) == list(range(n_layers))
        for layer, w in widths.items():
            if layer == 0 and single_root:
                assert w == 1
            else:
                assert width[0] <= w <= width[1]
        # the roots are exactly layer 0
        assert shape.roots == [v for v, layer in enumerate(shape.layers) if layer == 0]
        for v, ps in enumerate(shape.parents):
            layer = shape.layers[v]
            if layer == 0:
                assert ps == ()
                assert shape.history_parents[v] is None
                continue
            # fan-in: at least min(fan_in, previous layer's width) parents
            assert len(ps) >= min(fan_in[0], widths[layer - 1])
            # edges go forward, at most max(connection distance) layers
            assert all(0 < layer - shape.layers[p] <= dist[1] for p in ps)
            if inherit:
                assert shape.history_parents[v] in ps
            else:
                assert shape.history_parents[v] is None


def test_branching_worked_shape_is_deterministic_per_rng() -> None:
    gen = make_graph_generator(BranchingGraph())
    a = gen.block(20, np.random.default_rng(4))
    b = gen.block(20, np.random.default_rng(4))
    assert [s.parents for s in a] == [s.parents for s in b]
    assert [s.history_parents for s in a] == [s.history_parents for s in b]


def test_skip_connections_occur_and_are_capped_at_the_last_layer() -> None:
    cfg = BranchingGraph(
        num_layers_generator=FixedLength(value=4),
        layer_width_generator=FixedLength(value=2),
        fan_out_generator=FixedLength(value=2),
        connection_dist_generator=FixedLength(value=9),
        single_root=False,
    )
    for shape in make_graph_generator(cfg).block(10, np.random.default_rng(0)):
        assert shape.layers is not None
        jumps = {
            shape.layers[v] - shape.layers[p] for v, ps in enumerate(shape.parents) for p in ps
        }
        assert max(jumps) == 3  # from layer 0 to the last layer (3), never beyond


@settings(max_examples=40, deadline=None)
@given(turns=ranges(0, 30), inherit=st.booleans(), seed=st.integers(0, 2**32))
def test_linear_properties(turns: tuple[int, int], inherit: bool, seed: int) -> None:
    cfg = LinearGraph(num_request_generator=uniform(turns), inherit_history=inherit)
    for shape in make_graph_generator(cfg).block(8, np.random.default_rng(seed)):
        check_dag(shape)
        n = shape.num_nodes
        assert max(1, turns[0]) <= n <= max(1, turns[1])
        assert shape.parents == [()] + [(v - 1,) for v in range(1, n)]
        expected = [None, *list(range(n - 1))] if inherit else [None] * n
        assert shape.history_parents == expected
        assert shape.children() == [[v + 1] for v in range(n - 1)] + [[]]


def test_linear_and_single_request_shapes() -> None:
    assert linear_graph(0).parents == [()]
    assert linear_graph(3, inherit_history=False).history_parents == [None, None, None]
    one = single_request_graph()
    assert one.parents == [()]
    assert one.roots == [0]
    assert one.children() == [[]]
    shapes = make_graph_generator(SingleRequestGraph()).block(3, np.random.default_rng(0))
    assert all(s.num_nodes == 1 for s in shapes)


def test_validate_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="earlier"):
        GraphShape([(), (1,)], [None, None]).validate()
    with pytest.raises(ValueError, match="history parent"):
        GraphShape([(), (0,)], [None, 5]).validate()
    with pytest.raises(ValueError, match="at least one node"):
        GraphShape([], []).validate()


def test_to_networkx_marks_history_edges() -> None:
    g = linear_graph(3).to_networkx()
    assert all(data["history"] for _, _, data in g.edges(data=True))
