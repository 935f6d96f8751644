"""Checks that span sections of a scenario (a name defined in one place, used in another).

Each problem is a key path and a message; the loader turns the path into the file and line of
that key (``veeksha.scenario.loader``), so a node naming an unknown client is reported where it
is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veeksha.scenario.models import Scenario

__all__ = ["Problem", "agent_cycle", "scenario_problems", "unknown_client"]

Problem = tuple[tuple[str | int, ...], str]


def scenario_problems(scenario: Scenario) -> list[Problem]:
    """Every cross-section mistake of ``scenario`` (empty: none)."""
    problems: list[Problem] = []
    if scenario.clients is not None and "client" in scenario.model_fields_set:
        problems.append(
            (
                ("clients",),
                "give either client: (one target) or clients: (several, each with a name), "
                "not both: move the client section into clients as an item with a name",
            )
        )
    names = [name for name, _ in scenario.client_entries()]
    seen: set[str] = set()
    for index, name in enumerate(names):
        if name in seen:
            problems.append(
                (("clients", index, "name"), f"client name {name!r} is used twice: rename one")
            )
        seen.add(name)
    if (
        scenario.server is not None
        and scenario.clients
        and all(client.api_base is not None for client in scenario.clients)
    ):
        problems.append(
            (
                ("server",),
                "every client has its api_base, so no request would go to the managed server:"
                " remove server, or the api_base of the clients it should serve",
            )
        )
    if scenario.server_profile.enabled and scenario.runtime.distributed is not None:
        problems.append(
            (
                ("server_profile", "enabled"),
                "not with runtime.distributed (each shard would start and stop the server's "
                "profiler on its own): profile a run on one host",
            )
        )
    problems += _selection_problems(scenario, names)
    problems += _agent_problems(scenario, names)
    problems += _channel_problems(scenario)
    return problems


def _channel_problems(scenario: Scenario) -> list[Problem]:
    """One text channel and at most one image channel; images go in chat messages, so every
    client is a chat client; an agent_rounds graph takes no images (yet)."""
    from veeksha.scenario.models import AgentRoundsGraph, SyntheticSessionGenerator

    generator = scenario.session_generator
    if not isinstance(generator, SyntheticSessionGenerator):
        return []
    problems: list[Problem] = []
    path = ("session_generator", "channels")
    kinds = [channel.type for channel in generator.channels]
    for kind in ("text", "image"):
        if kinds.count(kind) > 1:
            second = [i for i, k in enumerate(kinds) if k == kind][1]
            problems.append(((*path, second, "type"), f"a second {kind} channel: give one"))
    if "text" not in kinds:
        problems.append(((*path,), "no text channel: add one (- type: text)"))
    if "image" not in kinds:
        return problems
    at = (*path, kinds.index("image"), "type")
    for index, (name, client) in enumerate(scenario.client_entries()):
        if client.type != "openai_chat_completions":
            where = f"clients[{index}] ({name})" if scenario.clients else "client"
            problems.append(
                (
                    at,
                    f"images go in chat messages, and {where} is an {client.type} client:"
                    " make it openai_chat_completions, or remove the image channel",
                )
            )
    if isinstance(generator.session_graph, AgentRoundsGraph):
        problems.append(
            (at, "an agent_rounds graph takes no images: remove the image channel or the graph")
        )
    return problems


def unknown_client(name: str, names: list[str]) -> str:
    """The message for a reference to a client that does not exist."""
    return f"unknown client {name!r}; the clients are: {', '.join(repr(n) for n in names)}"


def _selection_problems(scenario: Scenario, names: list[str]) -> list[Problem]:
    from veeksha.scenario.models import (
        SyntheticSessionGenerator,
        TraceSessionGenerator,
        WeightedClients,
    )

    generator = scenario.session_generator
    if not isinstance(generator, SyntheticSessionGenerator | TraceSessionGenerator):
        return []
    selection = generator.client_selection
    if not isinstance(selection, WeightedClients):
        return []
    path = ("session_generator", "client_selection", "weights")
    return [
        ((*path, name), unknown_client(name, names))
        for name in selection.weights
        if name not in names
    ]


def _agent_problems(scenario: Scenario, names: list[str]) -> list[Problem]:
    from veeksha.scenario.models import AgentRoundsGraph, SyntheticSessionGenerator

    generator = scenario.session_generator
    if not isinstance(generator, SyntheticSessionGenerator):
        return []
    graph = generator.session_graph
    if not isinstance(graph, AgentRoundsGraph):
        return []
    path = ("session_generator", "session_graph", "agents")
    problems: list[Problem] = []
    embedders = [name for name, c in scenario.client_entries() if c.type == "openai_embeddings"]
    if embedders:
        problems.append(
            (
                ("session_generator", "session_graph", "type"),
                f"agents speak, and {', '.join(embedders)} only embeds (openai_embeddings):"
                " give the agents generating clients",
            )
        )
    ids = [agent.id for agent in graph.agents]
    problems += [
        (("session_generator", "session_graph", "role_clients", role), unknown_client(name, names))
        for role, name in graph.role_clients.items()
        if name not in names
    ]
    for i, agent in enumerate(graph.agents):
        if ids.index(agent.id) != i:
            problems.append(((*path, i, "id"), f"agent id {agent.id!r} is used twice"))
        if agent.client is not None and agent.client not in names:
            problems.append(((*path, i, "client"), unknown_client(agent.client, names)))
        for j, other in enumerate(agent.speak_after_within_round):
            where = (*path, i, "speak_after_within_round", j)
            if other == agent.id:
                problems.append((where, f"agent {agent.id!r} waits on itself"))
            elif other not in ids:
                known = ", ".join(repr(n) for n in ids)
                problems.append((where, f"unknown agent {other!r}; the agents are: {known}"))
    if not problems:
        cycle = agent_cycle({a.id: a.speak_after_within_round for a in graph.agents})
        if cycle:
            first = ids.index(cycle[0])
            problems.append(
                (
                    (*path, first, "speak_after_within_round"),
                    "the agents wait on each other in a circle within a round: "
                    + " -> ".join([*cycle, cycle[0]]),
                )
            )
    return problems


def agent_cycle(after: dict[str, list[str]]) -> list[str]:
    """A circle of agents each waiting on the next (empty: none), found by depth-first search
    in declaration order (so the report is deterministic)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(agent: str) -> list[str]:
        state[agent] = 1
        stack.append(agent)
        for other in after.get(agent, ()):
            if state.get(other) == 1:
                return stack[stack.index(other) :]
            if other not in state:
                found = visit(other)
                if found:
                    return found
        stack.pop()
        state[agent] = 2
        return []

    for agent in after:
        if agent not in state:
            found = visit(agent)
            if found:
                return found
    return []
