"""SessionGenerator: determinism, stream independence, spec contents."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from veeksha.errors import ConfigurationError
from veeksha.generate.distributions import make_interval_sampler
from veeksha.generate.graphs import GraphShape
from veeksha.generate.sessions import BLOCK_SESSIONS, SessionGenerator
from veeksha.generate.spec import SessionSpec
from veeksha.generate.tokenizer import BuiltinTokenizer
from veeksha.scenario.models import Scenario

TOK = BuiltinTokenizer()


def scenario(seed: int = 42, **generator: Any) -> Scenario:
    data: dict[str, Any] = {"seed": seed, "session_generator": {"type": "synthetic", **generator}}
    return Scenario.model_validate(data)


def sessions(scn: Scenario, n: int = 40, start: int = 0) -> list[SessionSpec]:
    it = SessionGenerator(scn, TOK).iter_sessions(start)
    return [next(it) for _ in range(n)]


def structure(s: SessionSpec) -> list[tuple[Any, ...]]:
    return [(n.parents, n.history_parent, n.wait_after_ready_s) for n in s.nodes]


def test_same_seed_identical_different_seed_different() -> None:
    a, b = sessions(scenario(7)), sessions(scenario(7))
    assert a == b
    assert sessions(scenario(0)) != a


def test_session_is_independent_of_generation_order() -> None:
    scn = scenario(3)
    ordered = sessions(scn, BLOCK_SESSIONS + 20)
    gen = SessionGenerator(scn, TOK)
    for i in (BLOCK_SESSIONS + 5, 3, BLOCK_SESSIONS + 19, 0, 200):
        assert gen.session(i) == ordered[i]
    assert sessions(scn, 10, start=BLOCK_SESSIONS - 3) == ordered[BLOCK_SESSIONS - 3 :][:10]
    assert [s.session_id for s in ordered] == list(range(len(ordered)))


def test_output_lengths_change_nothing_else() -> None:
    base = sessions(scenario(5))
    other = sessions(
        scenario(5, output_spec={"text": {"output_length_generator": {"type": "fixed"}}})
    )
    assert [structure(s) for s in base] == [structure(s) for s in other]
    assert [[n.prompt for n in s.nodes] for s in base] == [
        [n.prompt for n in s.nodes] for s in other
    ]
    assert {n.max_tokens for s in other for n in s.nodes} == {8}
    # the scheduler's arrival stream does not depend on the session generator at all
    gaps = []
    for scn in (scenario(5), scenario(5, channels=[{"type": "text", "shared_prefix_ratio": 0.5}])):
        stream = SessionGenerator(scn, TOK).streams.stream("arrivals")
        interval = scn.traffic_scheduler.interval_generator
        gaps.append(make_interval_sampler(interval, stream).sample(5).tolist())
    assert gaps[0] == gaps[1]


def test_body_lengths_change_neither_graphs_nor_outputs() -> None:
    base = sessions(scenario(5))
    body = {"type": "uniform", "min": 50, "max": 60}
    other = sessions(scenario(5, channels=[{"type": "text", "body_length_generator": body}]))
    assert [structure(s) for s in base] == [structure(s) for s in other]
    assert [[n.max_tokens for n in s.nodes] for s in base] == [
        [n.max_tokens for n in s.nodes] for s in other
    ]
    assert all(50 <= n.prompt_tokens <= 60 for s in other for n in s.nodes)


def test_linear_spec_contents() -> None:
    graph = {
        "type": "linear",
        "num_request_generator": {"type": "uniform", "min": 2, "max": 4},
        "request_wait_generator": {"type": "fixed", "interval": 1.5},
    }
    out = {"text": {"output_length_generator": {"type": "uniform", "min": 100, "max": 500}}}
    for s in sessions(scenario(1, session_graph=graph, output_spec=out), 60):
        assert 2 <= len(s.nodes) <= 4
        assert s.roots == [0]
        for node in s.nodes:
            assert TOK.count(node.prompt) == node.prompt_tokens
            assert 6 <= node.prompt_tokens <= 12
            assert 100 <= node.max_tokens <= 500
            assert node.shared_prefix_tokens == 0
            if node.node_id == 0:
                assert node.wait_after_ready_s == 0.0
                assert node.history_parent is None
            else:
                assert node.wait_after_ready_s == 1.5
                assert node.parents == (node.node_id - 1,)
                assert node.history_parent == node.node_id - 1
        assert s.children == [[v + 1] for v in range(len(s.nodes) - 1)] + [[]]


def test_no_history_linear_and_single_request() -> None:
    graph = {"type": "linear", "inherit_history": False}
    for s in sessions(scenario(1, session_graph=graph), 10):
        assert all(n.history_parent is None for n in s.nodes)
    singles = sessions(scenario(1, session_graph={"type": "single_request"}), 10)
    assert all(len(s.nodes) == 1 and s.nodes[0].wait_after_ready_s == 0 for s in singles)


def test_poisson_think_times_are_positive_for_non_roots() -> None:
    waits = [n.wait_after_ready_s for s in sessions(scenario(2), 100) for n in s.nodes if n.parents]
    assert min(waits) > 0
    assert sum(waits) / len(waits) == pytest.approx(1.0, rel=0.1)


def test_branching_sessions_are_valid_dags() -> None:
    for s in sessions(scenario(9, session_graph={"type": "branching"}), 60):
        shape = GraphShape([n.parents for n in s.nodes], [n.history_parent for n in s.nodes])
        shape.validate()
        assert s.children == shape.children()
        assert all((n.wait_after_ready_s > 0) == bool(n.parents) for n in s.nodes)
        assert all(n.history_parent is not None for n in s.nodes if n.parents)


def test_shared_prefix_only_on_roots() -> None:
    channel = {"type": "text", "shared_prefix_ratio": 0.5}
    out = sessions(scenario(4, channels=[channel]), 20)
    for s in out:
        for n in s.nodes:
            assert n.shared_prefix_tokens == (n.prompt_tokens // 2 if not n.parents else 0)
    prefix_words = out[0].nodes[0].prompt.split()[: out[0].nodes[0].shared_prefix_tokens]
    for s in out:
        k = s.nodes[0].shared_prefix_tokens
        assert s.nodes[0].prompt.split()[:k] == prefix_words[:k]


def test_fixed_stair_is_global_and_order_independent() -> None:
    stair = {"type": "fixed_stair", "values": [10, 20, 30], "repeat_each": 2}
    scn = scenario(1, output_spec={"text": {"output_length_generator": stair}})
    ordered = sessions(scn, 2 * BLOCK_SESSIONS + 3)
    flat = [n.max_tokens for s in ordered for n in s.nodes]
    assert flat == [(10, 10, 20, 20, 30, 30)[k % 6] for k in range(len(flat))]
    late = SessionGenerator(scn, TOK).session(2 * BLOCK_SESSIONS + 1)  # random access first
    assert late == ordered[2 * BLOCK_SESSIONS + 1]


def test_a_trace_and_a_negative_index_are_rejected() -> None:
    """(Two text channels, or none, are the scenario's problems: tests/unit/scenario.)"""
    trace = Scenario.model_validate({"session_generator": {"type": "trace", "trace_file": "x"}})
    with pytest.raises(ConfigurationError, match=r"veeksha\.generate\.traces"):
        SessionGenerator(trace, TOK)
    with pytest.raises(ValueError, match=">= 0"):
        SessionGenerator(scenario(), TOK).session(-1)


def test_generate_imports_nothing_from_the_runtime() -> None:
    runtime = ("schedule", "dispatch", "record", "engine", "simulator", "evaluate", "cli")
    package = Path(__file__).parents[3] / "veeksha" / "generate"
    for path in package.rglob("*.py"):  # traces/ included
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                assert not (parts[0] == "veeksha" and parts[1:2] and parts[1] in runtime), (
                    f"{path.name} imports {name}"
                )


def test_length_pairs_draw_each_nodes_body_and_output_together() -> None:
    """AIPerf's sequence distribution: every node is one of the pairs, by weight; the graphs
    are the ones drawn without pairs, and the same seed draws the same pairs."""
    from scipy import stats

    pairs = [
        {"input": 100, "output": 5, "weight": 60},
        {"input": 700, "output": 50, "weight": 30},
        {"input": 3000, "output": 9, "weight": 10},
    ]
    scn = scenario(5, length_pairs=pairs)
    made = sessions(scn, 600)
    drawn = [(n.prompt_tokens, n.max_tokens) for s in made for n in s.nodes]
    assert set(drawn) == {(100, 5), (700, 50), (3000, 9)}
    counts = [drawn.count((p["input"], p["output"])) for p in pairs]
    shares = [p["weight"] / 100 * len(drawn) for p in pairs]
    assert stats.chisquare(counts, shares).pvalue > 0.001
    assert [structure(s) for s in made] == [structure(s) for s in sessions(scenario(5), 600)]
    assert made == sessions(scenario(5, length_pairs=pairs), 600)
    for s in made[:20]:  # each prompt as long as its pair says (the builtin tokenizer's words)
        for n in s.nodes:
            assert TOK.count(n.prompt) == n.prompt_tokens
