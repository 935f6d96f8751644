"""The traffic loop's nodes answered without a server: tool nodes (a fixed latency and result)
and re-prompts (a node's answer failed its validation: the note goes back as the next turn).

A mixin of ``veeksha.engine.loop.TrafficLoop``: it works on the loop's own state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.engine.traffic_sink import InFlight, TrafficSink
from veeksha.schedule.phases import PhaseTimeline
from veeksha.schedule.ready_queue import ReadyQueue
from veeksha.schedule.session_state import SessionState
from veeksha.timers import Timers

if TYPE_CHECKING:
    from veeksha.engine.loop import LoopCounters

__all__ = ["ToolNodes"]

_NS = 1_000_000_000


class ToolNodes:
    """Answers tool nodes in the loop itself, and queues a node's re-prompt."""

    phase_names: list[str]
    timeline: PhaseTimeline
    in_flight: dict[int, InFlight]
    counters: LoopCounters
    ready: ReadyQueue[tuple[SessionState, int]]
    _sink: TrafficSink
    _timers: Timers

    if TYPE_CHECKING:

        def on_results(self, results: list[Result]) -> None: ...

    def _call_tool(
        self, session: SessionState, node_id: int, request_id: int, ready_at: int, now: int
    ) -> None:
        """A tool node: no request; it ends ``latency_s`` after it starts (its ready time, or
        now if that is past) with its result (the node's ``prompt``), answered here."""
        node = session.spec.nodes[node_id]
        start = max(ready_at, now)
        end = start + round(node.latency_s * _NS)
        session.mark_dispatched(node_id)
        phase = self.phase_names[self.timeline.phase_at(ready_at)]
        request = InFlight(session, node_id, request_id, ready_at, start, -1, 0, phase)
        self.in_flight[request_id] = request
        self.counters.requests_dispatched += 1
        self._sink.dispatched(request, WorkItem(request_id, [], node.max_tokens, start))
        result = Result(
            request_id,
            -1,
            "ok",
            start,
            start,
            end,
            end,
            output_text=node.prompt,
            prompt_tokens=0,
            completion_tokens=node.max_tokens,
            last_byte_at_ns=end,
        )
        self._timers.call_at_ns(end, lambda: self.on_results([result]))

    def _reprompt(
        self,
        request: InFlight,
        result: Result,
        note: str,
        answer_tokens: int,
        conversation_tokens: int,
    ) -> None:
        """The answer failed the node's validation: the node asks again, with ``note``
        (``conversation_tokens``: the failed attempt's whole prompt)."""
        session = request.session
        ready_at = session.reprompt(
            request.node_id,
            result.output_text,
            note,
            answer_tokens,
            result.completed_at_ns,
            conversation_tokens,
        )
        self.ready.push(ready_at, (session, request.node_id))
