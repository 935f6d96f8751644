"""What a generated session is: a DAG of request nodes with their content and timing.

These plain types are the contract between the generators (``veeksha.generate``), the schedulers
(``veeksha.schedule``) and the engine. Node ids are indices into ``SessionSpec.nodes``, which is in
topological order (every parent id is smaller than its child's id).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

__all__ = ["NodeSpec", "SessionSpec", "map_nodes"]


@dataclass(slots=True)
class NodeSpec:
    """One request of a session.

    ``wait_after_ready_s`` is the think time: the node becomes ready this long after its last
    parent completes (roots: after the session starts, with no wait). ``history_parent`` is the
    one parent whose conversation (its history, prompt and received answer) precedes ``prompt``.
    ``prompt_tokens`` counts ``system`` too when there is one. ``not_before_s`` (trace replay
    with ``turn_timing: timestamps``): the node is never ready before this many seconds after
    its session's start (its row's own timestamp, mapped as the session's start is); None: no
    such bound.
    """

    node_id: int
    parents: tuple[int, ...]
    history_parent: int | None
    wait_after_ready_s: float
    prompt: str
    prompt_tokens: int
    max_tokens: int
    shared_prefix_tokens: int = 0
    system: str | None = None  # a system message before a root's prompt (dataset replay)
    client: int = 0  # index into the scenario's clients (``Scenario.client_entries``)
    priority: int = 0  # runtime.priority: node: higher first
    round: int = -1  # agent round (agent_rounds graphs); -1: the node's depth in the graph
    agent: str | None = None  # the speaking agent (agent_rounds graphs)
    # agent_rounds: the earlier nodes whose answers precede the prompt (see
    # generate/agent_rounds.py); None: the history parent's conversation instead
    transcript: tuple[int, ...] | None = None
    kind: str = "llm"  # llm | tool (no request: latency_s, then ``prompt`` is its result)
    latency_s: float = 0.0
    # a check of the answer (None: none): returns None when it passes, else the re-prompt's
    # note; a failing answer is re-sent up to max_reprompts times
    validation: Callable[[str], str | None] | None = None
    max_reprompts: int = 0
    not_before_s: float | None = None
    # the images of its user message (the image channel): (width, height, seed) each, sent
    # as data: URLs (``veeksha.generate.images``); a history child re-sends them
    images: tuple[tuple[int, int, int], ...] = ()
    # seconds after its request is sent that its user abandons it (the scenario's
    # ``abandonment``: the connection is dropped then); None: never
    abandon_after_s: float | None = None


@dataclass(slots=True)
class SessionSpec:
    """One session (a conversation or agent workflow): nodes in topological order."""

    session_id: int
    nodes: list[NodeSpec]
    children: list[list[int]] = field(default_factory=list)
    images: bool = False  # some node has images (the dispatch then sends them)

    def __post_init__(self) -> None:
        if not self.children:
            self.children = [[] for _ in self.nodes]
            for node in self.nodes:
                for parent in node.parents:
                    self.children[parent].append(node.node_id)

    @property
    def roots(self) -> list[int]:
        return [node.node_id for node in self.nodes if not node.parents]


def map_nodes(spec: SessionSpec, change: Callable[[NodeSpec], NodeSpec]) -> SessionSpec:
    """``spec`` with each node passed through ``change``: a new spec when a node changed (a
    source may hand out one spec more than once: it is never modified), else ``spec`` itself."""
    nodes = [change(node) for node in spec.nodes]
    if all(new is old for new, old in zip(nodes, spec.nodes, strict=True)):
        return spec
    return replace(spec, nodes=nodes)
