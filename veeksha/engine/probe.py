"""A shard's state as its driver needs it to account for a lost shard: ``RunProbe``.

The driver (``veeksha.distributed``, through Ray) cannot read a run's files while it goes, and
a lost node takes its latest rows with it. So the shard actor asks the run, now and then, what
is in flight and how far the schedule got: ``RunProbe.snapshot()`` (from any thread) runs on
the run's event loop between two callbacks (a consistent view, no lock on the traffic path)
and returns a plain dict the actor forwards. Its ``in_flight`` entries are what
``veeksha.distributed.merge.ShardResult.in_flight`` takes; the sessions started are the
shard's own indexes below ``next_session`` (``veeksha.schedule.shards.owned_below``).

Cost: nothing unless asked; a snapshot is O(requests in flight).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veeksha.engine.loop import TrafficLoop

__all__ = ["RunProbe"]

_NS = 1e9


class RunProbe:
    """Pass one to ``run_scenario(probe=...)``; call ``snapshot()`` from another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._traffic: TrafficLoop | None = None
        self._t0_ns = 0
        self._t0_wall_ns: int | None = None
        self._clients: list[str] = []
        self._models: list[str | None] = []
        self._last: dict[str, Any] = {"state": "setting_up"}

    def attach(
        self,
        loop: asyncio.AbstractEventLoop,
        traffic: TrafficLoop,
        t0_ns: int,
        t0_wall_ns: int,
        clients: Sequence[tuple[str, str | None]],
    ) -> None:
        """The run begins (called by the engine on its loop, before t0)."""
        with self._lock:
            self._loop, self._traffic = loop, traffic
            self._t0_ns, self._t0_wall_ns = t0_ns, t0_wall_ns
            self._clients = [name for name, _ in clients]
            self._models = [model for _, model in clients]
            self._last = self._take("running")

    def detach(self) -> None:
        """The traffic is over (called by the engine on its loop): the last snapshot stays."""
        with self._lock:
            if self._traffic is not None:
                self._last = self._take("finished")
            self._loop = self._traffic = None

    def snapshot(self, timeout: float = 5.0) -> dict[str, Any]:
        """The run's state now: ``state`` (setting_up | running | finished), ``t0_wall_ns``,
        ``at`` (seconds since t0), ``next_session`` (the next global session index the shard
        would consider),
        ``sessions_started``/``sessions_done``/``requests_done`` and ``in_flight`` (dicts with
        session_id, node_id, request_id, attempt, phase, ready_at and dispatched_at in seconds
        since t0, client, model, worker_id). Blocks until the loop answers; after the traffic,
        or when the loop does not answer within ``timeout``, the last snapshot taken."""
        with self._lock:
            loop = self._loop
            if loop is None or loop.is_closed():
                return dict(self._last)
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def take() -> None:
            with self._lock:
                if self._traffic is None:
                    future.set_result(dict(self._last))
                    return
                self._last = self._take("running")
                future.set_result(dict(self._last))

        try:
            loop.call_soon_threadsafe(take)
            return future.result(timeout)
        except (RuntimeError, concurrent.futures.TimeoutError):
            with self._lock:
                return dict(self._last)

    def _take(self, state: str) -> dict[str, Any]:
        traffic = self._traffic
        assert traffic is not None
        t0 = self._t0_ns
        in_flight = []
        for request in traffic.in_flight.values():
            node = request.session.spec.nodes[request.node_id]
            tool = node.kind == "tool"
            in_flight.append(
                {
                    "session_id": request.session.session_id,
                    "node_id": request.node_id,
                    "request_id": request.request_id,
                    "attempt": request.attempt,
                    "phase": request.phase,
                    "ready_at": (request.ready_at_ns - t0) / _NS,
                    "dispatched_at": (max(request.dispatched_at_ns, request.ready_at_ns) - t0)
                    / _NS,
                    "client": None if tool else self._clients[node.client],
                    "model": None if tool else self._models[node.client],
                    "worker_id": request.worker_id,
                }
            )
        counters = traffic.counters
        return {
            "state": state,
            "at": (time.monotonic_ns() - t0) / _NS,
            "t0_wall_ns": self._t0_wall_ns,
            "next_session": traffic.next_session,
            "sessions_started": counters.sessions_started,
            "sessions_done": counters.sessions_done,
            "requests_done": counters.requests_done,
            "in_flight": in_flight,
        }
