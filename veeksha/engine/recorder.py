"""The traffic loop's sink: turns loop events into Parquet rows, trace lines and live metrics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.engine.loop import InFlight
from veeksha.errors import RunAbortedError
from veeksha.generate.tokenizer import TokenizerLike
from veeksha.record.parquet import ResultWriter
from veeksha.record.rows import RequestRecord, SessionRecord, request_row, session_row
from veeksha.record.trace import TraceWriter
from veeksha.schedule.session_state import NodeState, SessionState

__all__ = ["RunRecorder"]


class RunRecorder:
    """Implements ``TrafficSink``: one row per request (every outcome) and per session."""

    def __init__(
        self,
        run_id: str,
        model: str,
        t0_ns: int,
        writer: ResultWriter,
        tokenizer: TokenizerLike,
        trace: TraceWriter | None = None,
        on_row: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.model = model
        self.t0_ns = t0_ns
        self._writer = writer
        self._tokenizer = tokenizer
        self._trace = trace
        self._on_row = on_row
        # veeksha's own count of each dispatched request's new prompt part, by request id
        self._new_tokens: dict[int, int] = {}

    def dispatched(self, request: InFlight, item: WorkItem) -> None:
        session = request.session
        node = session.spec.nodes[request.node_id]
        self._new_tokens[request.request_id] = self._tokenizer.count(node.prompt)
        if self._trace is not None:
            self._trace.add(session.phase, session.session_id, node, item)

    def request_done(self, request: InFlight, result: Result, processed_at_ns: int) -> None:
        session = request.session
        node = session.spec.nodes[request.node_id]
        new_tokens = self._new_tokens.pop(request.request_id, node.prompt_tokens)
        record = RequestRecord(
            run_id=self.run_id,
            phase=session.phase,
            session_id=session.session_id,
            request_id=request.request_id,
            node=node,
            model=self.model,
            ready_at_ns=request.ready_at_ns,
            dispatched_at_ns=request.dispatched_at_ns,
            processed_at_ns=processed_at_ns,
            result=result,
            prompt_tokens_new=new_tokens,
            prompt_tokens_total=request.history_tokens + new_tokens,
        )
        self._add(request_row(record, self.t0_ns, self._tokenizer.count))

    def request_cancelled(
        self, session: SessionState, node_id: int, request_id: int, at_ns: int
    ) -> None:
        self._new_tokens.pop(request_id, None)  # (a hand-over withdrawn before its release)
        node = session.spec.nodes[node_id]
        record = RequestRecord(
            run_id=self.run_id,
            phase=session.phase,
            session_id=session.session_id,
            request_id=request_id,
            node=node,
            model=self.model,
            ready_at_ns=session.ready_at_ns[node_id],
            processed_at_ns=at_ns,
            cancel_reason="cancelled before it was sent",
        )
        self._add(request_row(record, self.t0_ns))

    def session_done(self, session: SessionState) -> None:
        spec = session.spec
        states = session.states
        num_ok = states.count(NodeState.OK)
        num_error = states.count(NodeState.FAILED)
        record = SessionRecord(
            run_id=self.run_id,
            phase=session.phase,
            session_id=session.session_id,
            started_at_ns=session.started_at_ns,
            ended_at_ns=session.ended_at_ns,
            num_nodes=len(spec.nodes),
            num_requests=num_ok + num_error,
            num_ok=num_ok,
            num_error=num_error,
            num_cancelled=states.count(NodeState.CANCELLED),
            think_time_total_s=sum(node.wait_after_ready_s for node in spec.nodes),
            status=session.status,
        )
        try:  # noqa: SIM105 - see _add
            self._writer.add_session(session_row(record, self.t0_ns))
        except RunAbortedError:
            pass

    def _add(self, row: dict[str, Any]) -> None:
        # After a write error the writer refuses rows. It has already reported the error through
        # its on_error callback, which stops the run; raising here, in the middle of the loop's
        # result handling, would leave a session half-updated and the run waiting for it forever.
        try:  # noqa: SIM105 - hot path: no context manager per row
            self._writer.add_request(row)
        except RunAbortedError:
            pass
        if self._on_row is not None:
            self._on_row(row)
