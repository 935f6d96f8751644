"""The three pools of each client, for the live status line (and its log).

*pending*: nodes waiting for their parents or their think time; *waiting*: ready nodes waiting
for a slot of their capped client (the pre-departure pool, ``schedule/slots.py``); *in flight*:
dispatched and not yet done. Counted by a scan of the live sessions at each status tick, never
per request.
"""

from __future__ import annotations

from veeksha.engine.loop import TrafficLoop
from veeksha.schedule.session_state import NodeState

__all__ = ["client_pools", "format_pools"]

_PENDING, _READY, _IN_FLIGHT = NodeState.PENDING, NodeState.READY, NodeState.IN_FLIGHT


def client_pools(traffic: TrafficLoop, names: list[str]) -> dict[str, int]:
    """``{name}.pending``, ``{name}.waiting`` and ``{name}.in_flight`` for every client."""
    n = len(names)
    pending, ready, flying = [0] * n, [0] * n, [0] * n
    for session in traffic.sessions.values():
        nodes = session.spec.nodes
        for node_id, state in enumerate(session.states):
            if state == _PENDING:
                pending[nodes[node_id].client] += 1
            elif state == _READY:
                ready[nodes[node_id].client] += 1
            elif state == _IN_FLIGHT:
                flying[nodes[node_id].client] += 1
    slots = traffic.slots
    out: dict[str, int] = {}
    for c, name in enumerate(names):
        waiting = 0 if slots is None or not slots.capped(c) else min(slots.waiting(c), ready[c])
        out[f"{name}.pending"] = pending[c] + ready[c] - waiting  # (ready but not yet due)
        out[f"{name}.waiting"] = waiting
        out[f"{name}.in_flight"] = flying[c]
    return out


def format_pools(values: dict[str, float | int]) -> str:
    """`` | name pending P waiting W in flight F`` per client found in ``values``."""
    names = [key[: -len(".pending")] for key in values if key.endswith(".pending")]
    return "".join(
        f" | {name} pending {values[name + '.pending']} waiting {values[name + '.waiting']}"
        f" in flight {values[name + '.in_flight']}"
        for name in names
    )
