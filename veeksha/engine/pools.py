"""The live status line's numbers (and its log's): the run's counters, and the three pools of
each client.

*pending*: nodes waiting for their parents or their think time; *waiting*: ready nodes waiting
for a slot of their capped client (the pre-departure pool, ``schedule/slots.py``); *in flight*:
dispatched and not yet done. Counted by a scan of the live sessions at each status tick, never
per request.
"""

from __future__ import annotations

from veeksha.engine.loop import TrafficLoop
from veeksha.schedule.session_state import NodeState

__all__ = ["client_pools", "format_pools", "status_snapshot"]

_PENDING, _READY, _IN_FLIGHT = NodeState.PENDING, NodeState.READY, NodeState.IN_FLIGHT
_NS = 1_000_000_000


def status_snapshot(
    traffic: TrafficLoop, client_names: list[str] | None, now_ns: int
) -> dict[str, float | int]:
    """What the status line shows at ``now_ns``: elapsed seconds, sessions, the pools (each
    client's too, given ``client_names``), requests done, failed, cancelled, the last lag."""
    c = traffic.counters
    pools = {} if client_names is None else client_pools(traffic, client_names)
    return pools | {
        "elapsed": (now_ns - traffic.t0_ns) / _NS,
        "sessions_started": c.sessions_started,
        "sessions_done": c.sessions_done,
        "pending": sum(s.count(_PENDING) for s in traffic.sessions.values()),
        "ready": len(traffic.ready),
        "in_flight": len(traffic.in_flight),
        "done": c.requests_done,
        "failed": c.requests_failed,
        "cancelled": c.requests_cancelled,
        "lag_ms": c.last_dispatch_lag_ns / 1e6,
    }


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
