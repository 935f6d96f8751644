"""Per-client, per-agent and per-round sections of summary.json (several clients, agents).

``clients``: for each client (``Scenario.client_entries``; written when there are several or one
has ``max_in_flight``): its model (the one its requests named: the scenario's, else the target's
resolved one, e.g. the built-in simulator's ``veeksha-sim``), measured LLM requests (ok ones;
``failed``, its own requests that failed, error or timeout; ``cancelled``, those cancelled, most
never sent because another request of their session failed), output throughput over the
measured window, TTFC, E2E and queue-wait distributions (seconds), its cap and the cap's
utilisation (the mean of its requests in flight, from dispatch to the result's processing, from
the first dispatch to the last processed result, divided by the cap).
``agents`` and ``rounds`` (``agent_rounds`` graphs, and the replay of a recorded one, whose rows
name their agent and round though its scenario has no graph): per agent and per round, E2E and
TTFC distributions (LLM rows), re-prompts, failed and cancelled turns, and a tool's call time.
The agents are the graph's, in its order; in a replay, those the rows name, in the order the
recording's graph had them (each agent's first node), a tool the agent whose rows are tool rows,
and the rounds up to the last a row names.

Read from the rows' columns (``client``, ``agent``, ``round``, ``kind``, ``attempt``) with
numpy and Arrow only: no pandas.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import WARMUP, column, integers, percentiles, scalar, status_is
from veeksha.record import kernels as ak
from veeksha.scenario.clients import DEFAULT_CLIENT
from veeksha.scenario.models import AgentRoundsGraph, Scenario, SyntheticSessionGenerator

__all__ = ["group_sections"]

_KEYS = ("count", "mean", "p50", "p90", "p99", "max")


def resolved_models(target: object) -> dict[str, str]:
    """Each client's model as the run resolved it, by client name, from summary.json's
    ``run.target`` (the target's description as one JSON string: a single client's ``model``,
    or its ``clients``); {} when it is absent or not such a description."""
    try:
        described = json.loads(target) if isinstance(target, str) else None
    except ValueError:
        return {}
    if not isinstance(described, Mapping):
        return {}
    clients = described.get("clients")
    if isinstance(clients, list):
        return {
            str(c["name"]): str(c["model"])
            for c in clients
            if isinstance(c, Mapping) and c.get("name") is not None and c.get("model")
        }
    model = described.get("model")
    return {DEFAULT_CLIENT: str(model)} if model else {}


def group_sections(
    scenario: Scenario,
    requests: pa.Table | ColumnSource,
    target: object = None,
    every_row: pa.Table | ColumnSource | None = None,
) -> dict[str, Any]:
    """The ``clients``, ``agents`` and ``rounds`` sections (empty when none applies).

    ``target``: summary.json's ``run.target``, which names the model of a client whose scenario
    entry leaves it to the target (``resolved_models``). ``every_row``: the run's rows whose
    agents are listed when the scenario has no graph (default ``requests``; a phase's sections
    list the whole run's agents, as the graph's do)."""
    entries = scenario.client_entries()
    several = len(entries) > 1 or any(c.max_in_flight is not None for _, c in entries)
    names = set(requests.schema.names)
    if not {"client", "kind"} <= names:
        return {}
    agents_of, num_rounds = _agent_plan(scenario, requests if every_row is None else every_row)
    if not several and not agents_of:
        return {}
    measured = ~_is(requests, "phase", WARMUP)  # every phase but warmup (named phases too)
    llm = measured & ~_is(requests, "kind", "tool")
    ok = status_is(requests, "ok")
    failed = status_is(requests, "error") | status_is(requests, "timeout")
    cancelled = status_is(requests, "cancelled")
    sent, done = column(requests, "sent_at"), column(requests, "completed_at")
    ttfc, e2e = column(requests, "ttfc"), column(requests, "e2e")
    out: dict[str, Any] = {}
    if several:
        window = _window(sent[llm], done[llm])
        out["clients"] = {}
        queue = column(requests, "queue_wait")
        dispatched, processed = column(requests, "dispatched_at"), column(requests, "processed_at")
        tokens = column(requests, "output_tokens")
        models = resolved_models(target)
        for name, client in entries:
            rows = llm & _is(requests, "client", name)
            good = rows & ok
            held = np.nansum(processed[rows] - dispatched[rows])
            cap = client.max_in_flight
            span = _window(dispatched[llm], processed[llm])  # (the slots' own time line)
            out["clients"][name] = {
                "model": client.model or models.get(name),
                "requests": int(rows.sum()),
                "ok": int(good.sum()),
                "failed": int((rows & failed).sum()),
                "cancelled": int((rows & cancelled).sum()),
                "output_tokens_per_s": None
                if window is None
                else float(np.nansum(tokens[good])) / window,
                "ttfc_s": _stats(ttfc[good]),
                "e2e_s": _stats(e2e[good]),
                "queue_wait_s": _stats(queue[rows]),
                "max_in_flight": cap,
                "cap_utilisation": None
                if cap is None or span is None
                else float(held) / (span * cap),
            }
    if agents_of:
        attempt = integers(requests.column("attempt"))
        agents: dict[str, Any] = {}
        for agent_id, kind in agents_of:
            rows = measured & _is(requests, "agent", agent_id)
            good = rows & ok
            entry: dict[str, Any] = {
                "kind": kind,
                "turns": int((rows & (attempt == 0)).sum()),
            }
            if kind == "tool":
                entry["call_s"] = _stats(done[good] - sent[good])
            else:
                entry |= {
                    "reprompts": int((rows & (attempt > 0)).sum()),
                    "failed": int((rows & failed).sum()),
                    "cancelled": int((rows & cancelled).sum()),
                    "ttfc_s": _stats(ttfc[good]),
                    "e2e_s": _stats(e2e[good]),
                }
            agents[agent_id] = entry
        out["agents"] = agents
        rounds = column(requests, "round")  # (NaN: a row of no round)
        out["rounds"] = {
            str(r): {
                "requests": int((llm & (rounds == r)).sum()),
                "ttfc_s": _stats(ttfc[llm & ok & (rounds == r)]),
                "e2e_s": _stats(e2e[llm & ok & (rounds == r)]),
            }
            for r in range(num_rounds)
        }
    return out


def _agent_plan(
    scenario: Scenario, requests: pa.Table | ColumnSource
) -> tuple[list[tuple[str, str]], int]:
    """The agents, as (id, kind), and the number of rounds: the scenario's ``agent_rounds``
    graph's; else (a replay of a recorded agent run) those the rows name, each agent ordered by
    its first node (the graph's order within a round), a tool when its rows are tool rows, and
    the rounds up to the last a row names; ([], 0) when neither has agents."""
    generator = scenario.session_generator
    if isinstance(generator, SyntheticSessionGenerator) and isinstance(
        generator.session_graph, AgentRoundsGraph
    ):
        graph = generator.session_graph
        return [(agent.id, agent.kind) for agent in graph.agents], graph.rounds
    if not {"agent", "round", "node_id"} <= set(requests.schema.names):
        return [], 0
    ids = [a for a in ak.unique(requests.column("agent")).to_pylist() if a is not None]
    if not ids:
        return [], 0
    nodes, rounds = column(requests, "node_id"), column(requests, "round")
    tool = _is(requests, "kind", "tool")
    found = []
    for agent_id in ids:
        rows = _is(requests, "agent", agent_id)
        kind = "tool" if tool[rows].all() else "llm"
        found.append((float(np.nanmin(nodes[rows])), str(agent_id), kind))
    found.sort()
    named = rounds[~np.isnan(rounds)]
    return [(agent_id, kind) for _, agent_id, kind in found], int(
        named.max()
    ) + 1 if named.size else 0


def _is(table: pa.Table | ColumnSource, name: str, value: str) -> np.ndarray:
    col = table.column(name)
    mask = ak.and_kleene(ak.is_valid(col), ak.equal(col, scalar(value)))  # (null: False)
    return integers(mask) > 0


def _stats(values: np.ndarray) -> dict[str, float | int | None]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {"count": 0} | dict.fromkeys(_KEYS[1:])
    p50, p90, p99 = percentiles(values, [50, 90, 99]).tolist()
    return {
        "count": int(values.size),
        "mean": float(values.mean()),
        "p50": p50,
        "p90": p90,
        "p99": p99,
        "max": float(values.max()),
    }


def _window(sent: np.ndarray, done: np.ndarray) -> float | None:
    if sent.size == 0 or np.isnan(sent).all() or np.isnan(done).all():
        return None
    span = float(np.nanmax(done) - np.nanmin(sent))
    return span if span > 0 else None
