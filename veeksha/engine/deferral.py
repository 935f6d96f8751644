"""Which requests nobody waits for: their successful Results may reach the main process late.

In an open-loop run, the success of a request whose node has no child (a leaf), whose client
has no in-flight cap and whose answer is not checked (no ``validation``) changes nothing in
the run but its own row and its session's bookkeeping: no request is released by it, no slot
freed, no session started, no phase ended. Such a request is handed over with
``WorkItem.deferrable`` set; its worker sends its successful Result on the bulk link, which the
main process reads when it is awake anyway (``dispatch.pool``), at most
``BULK_READ_INTERVAL_S`` later. A failure still comes at once (``cancel_on_failure`` may cancel
its siblings). Dispatch, release and completion times are the worker's, as for any request;
only the row's ``processed_at`` (when the main process took the Result) may be later.

Nothing is deferrable when a completion drives the run: a closed loop (an ended session starts
the next), a run-wide ``max_in_flight``, or a phase that drains (the next phase begins once every
session has ended). Nor once the last session has started (``TrafficLoop._dispatch``: no arrival
timer is armed any more): what is left is the run's drain, whose end would otherwise wait up to
``BULK_READ_INTERVAL_S`` for the last Results.
"""

from __future__ import annotations

from veeksha.engine.loop_settings import LoopSettings, default_phases
from veeksha.generate.spec import SessionSpec

__all__ = ["loop_defers", "node_defers"]


def loop_defers(settings: LoopSettings) -> bool:
    """Whether any request of a loop with ``settings`` may be deferrable (see the module doc)."""
    if settings.rate_gaps is None or settings.concurrency is not None:
        return False
    if settings.max_in_flight is not None:
        return False
    phases = settings.phases or default_phases(settings)
    return not any(phase.drain for phase in phases)


def node_defers(spec: SessionSpec, node_id: int, caps: list[int | None] | None) -> bool:
    """Whether node ``node_id``'s success is waited for by nobody, in a loop that defers: a
    leaf, not checked, of a client without a cap (``caps``: per client, None: none capped)."""
    if spec.children[node_id]:
        return False
    node = spec.nodes[node_id]
    if node.validation is not None or node.kind != "llm":
        return False
    return caps is None or caps[node.client] is None
