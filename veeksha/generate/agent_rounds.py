"""Sessions of an ``agent_rounds`` graph: rounds of agents, each speaking once per round.

Layout of one session (the same for every session; lengths, content and think times vary):

* node ids go round by round; within a round, agents in an order where everyone comes after
  the agents it speaks after (declaration order breaks ties);
* the node of agent ``a`` in round ``r`` waits for the nodes of round ``r`` of the agents in
  ``a``'s ``speak_after_within_round``, and for every node of round ``r − 1`` (a round starts
  when the previous one has ended);
* its **transcript** (what it sees) is every node of the earlier rounds and the nodes of its
  own round it (transitively) speaks after, in node-id order. The messages sent are those
  turns' answers, the agent's own as ``assistant`` and the others' as ``user`` messages
  ``"<agent id>: <answer>"`` (a tool's result as ``"<tool id>: <result>"``), then the node's
  own prompt as ``user`` (``schedule/session_state.py``, ``SessionState.outgoing``).

Random streams: each agent's prompt and output lengths come from the ``lengths`` and
``outputs`` streams keyed by block and agent; content, think times and clients as for other
synthetic sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from veeksha.errors import ConfigurationError
from veeksha.generate.content import ClientPrompts
from veeksha.generate.distributions import (
    LengthSampler,
    make_interval_sampler,
    make_length_sampler,
)
from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import NodeSpec, SessionSpec
from veeksha.generate.validation import AnswerCheck
from veeksha.scenario.crosscheck import unknown_client
from veeksha.scenario.models import Agent, AgentRoundsGraph, FixedInterval, LengthGenerator

__all__ = ["AgentLayout", "AgentRoundsSessions", "agent_order", "agent_rounds_layout"]


@dataclass(frozen=True, slots=True)
class AgentLayout:
    """One node of every session: which agent, which round, parents and transcript."""

    agent: int  # index into the graph's agents
    round: int
    parents: tuple[int, ...]
    transcript: tuple[int, ...]


def agent_order(agents: list[Agent]) -> list[int]:
    """Agent indices in speaking order: each after those it speaks after (Kahn's algorithm,
    declaration order first). The scenario checks exclude circles (``scenario/crosscheck``)."""
    index = {agent.id: i for i, agent in enumerate(agents)}
    waits = [{index[other] for other in agent.speak_after_within_round} for agent in agents]
    order: list[int] = []
    placed: set[int] = set()
    while len(order) < len(agents):
        for i in range(len(agents)):
            if i not in placed and waits[i] <= placed:
                order.append(i)
                placed.add(i)
                break
        else:
            raise ValueError("the agents wait on each other in a circle")
    return order


def agent_rounds_layout(graph: AgentRoundsGraph) -> list[AgentLayout]:
    """The node layout of one session of ``graph`` (see the module docstring)."""
    agents = graph.agents
    order = agent_order(agents)
    index = {agent.id: i for i, agent in enumerate(agents)}
    position = {agent: k for k, agent in enumerate(order)}
    per_round = len(agents)
    # what each agent sees of its own round: everyone it speaks after, transitively
    sees: list[set[int]] = [set() for _ in agents]
    for agent in order:
        for other in agents[agent].speak_after_within_round:
            j = index[other]
            sees[agent] |= {j} | sees[j]
    layout: list[AgentLayout] = []
    for r in range(graph.rounds):
        first = r * per_round
        earlier = tuple(range(first))
        previous = tuple(range(first - per_round, first)) if r else ()
        for agent in order:
            same = sorted(first + position[j] for j in sees[agent])
            direct = sorted(
                first + position[index[o]] for o in agents[agent].speak_after_within_round
            )
            layout.append(AgentLayout(agent, r, (*previous, *direct), (*earlier, *same)))
    return layout


class AgentRoundsSessions:
    """Makes the sessions of an ``agent_rounds`` graph, a block at a time."""

    def __init__(
        self,
        graph: AgentRoundsGraph,
        prompts: ClientPrompts,
        bodies: LengthGenerator,
        outputs: LengthGenerator,
        client_index: dict[str, int],
        streams: RandomStreams,
    ) -> None:
        self.graph = graph
        names = list(client_index)
        chosen = [a.client or graph.role_clients.get(a.role) for a in graph.agents]
        for agent, client in zip(graph.agents, chosen, strict=True):
            # (a loaded scenario was checked: scenario/crosscheck.py)
            if client is not None and client not in client_index:
                raise ConfigurationError(f"agent {agent.id!r}: {unknown_client(client, names)}")
        try:
            self.layout = agent_rounds_layout(graph)
        except (KeyError, ValueError) as exc:
            raise ConfigurationError(
                f"session_graph.agents: {exc} (check speak_after_within_round)"
            ) from None
        self._prompts = prompts
        self._streams = streams
        agents = graph.agents
        self._bodies: list[LengthSampler] = []
        self._outputs: list[LengthSampler] = []
        for agent in agents:
            if agent.kind == "tool":
                body: LengthGenerator = _one_token()  # a tool sends nothing
                out = agent.result_length_generator or outputs
            else:
                body = agent.prompt_length_generator or bodies
                out = agent.output_length_generator or outputs
            self._bodies.append(make_length_sampler(body))
            self._outputs.append(make_length_sampler(out))
        self._latency = [
            make_interval_sampler(agent.latency_generator) if agent.latency_generator else None
            for agent in agents
        ]
        self._clients = [0 if c is None else client_index[c] for c in chosen]
        self._checks = [
            None if a.validation is None else AnswerCheck.of(a.validation) for a in agents
        ]
        self._waits = make_interval_sampler(graph.request_wait_generator)
        self._fixed_zero_wait = (
            isinstance(graph.request_wait_generator, FixedInterval)
            and graph.request_wait_generator.interval == 0
        )

    def block(self, block: int, first_session: int, count: int) -> list[SessionSpec]:
        """Sessions ``first_session … first_session + count − 1`` (block ``block``)."""
        layout = self.layout
        agents = self.graph.agents
        per_session = len(layout)
        total = per_session * count
        streams = self._streams
        by_agent = np.array([node.agent for node in layout] * count, dtype=np.int64)
        bodies = np.ones(total, dtype=np.int64)
        outputs = np.ones(total, dtype=np.int64)
        latencies = np.zeros(total)
        for a in range(len(agents)):
            where = np.flatnonzero(by_agent == a)
            sampler = self._bodies[a]
            sampler.rng = streams.stream("lengths", "block", block, "agent", a)
            bodies[where] = np.maximum(sampler.sample(where.size), 1)
            sampler = self._outputs[a]
            sampler.rng = streams.stream("outputs", "block", block, "agent", a)
            outputs[where] = np.maximum(sampler.sample(where.size), 1)
            latency = self._latency[a]
            if latency is not None:
                latency.rng = streams.stream("tool_latency", "block", block, "agent", a)
                latencies[where] = latency.sample(where.size)
        roots = np.array([not node.parents for node in layout] * count, dtype=np.bool_)
        waits = np.zeros(total)
        if not self._fixed_zero_wait:
            self._waits.rng = streams.stream("think_times", "block", block)
            waits[~roots] = self._waits.sample(int((~roots).sum()))
        # a tool's "prompt" is its result: text of its result length
        is_tool = np.array([agents[n.agent].kind == "tool" for n in layout] * count)
        targets = np.where(is_tool, outputs, bodies)
        clients = None
        if not self._prompts.single:  # (each node's prompt in its agent's client's tokens)
            clients = np.array([self._clients[n.agent] for n in layout] * count, dtype=np.int64)
        texts, shared = self._prompts.build(
            targets, roots, streams.stream("content", "block", block), clients
        )
        sessions = []
        k = 0
        waits_list, bodies_list, outputs_list = waits.tolist(), targets.tolist(), outputs.tolist()
        latency_list = latencies.tolist()
        for s in range(count):
            nodes = []
            for node_id, node in enumerate(layout):
                agent = agents[node.agent]
                tool = agent.kind == "tool"
                nodes.append(
                    NodeSpec(
                        node_id,
                        node.parents,
                        None,
                        waits_list[k] if node.parents else 0.0,
                        texts[k],
                        bodies_list[k],
                        outputs_list[k],
                        0 if tool else shared[k],
                        client=self._clients[node.agent],
                        priority=agent.priority,
                        round=node.round,
                        agent=agent.id,
                        transcript=node.transcript,
                        kind=agent.kind,
                        latency_s=latency_list[k] if tool else 0.0,
                        validation=self._checks[node.agent],
                        max_reprompts=agent.max_reprompts,
                    )
                )
                k += 1
            sessions.append(SessionSpec(first_session + s, nodes))
        return sessions


def _one_token() -> LengthGenerator:
    from veeksha.scenario.models import FixedLength

    return FixedLength(type="fixed", value=1)
