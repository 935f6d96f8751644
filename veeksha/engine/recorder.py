"""The traffic loop's sink: turns loop events into Parquet rows, trace lines and live metrics.

Rows go straight into the writer's column batches (``veeksha.record.columnar``), under the
writer's lock: no dict per row. ``on_row`` (the streaming metrics) gets a small dict with
``status``, ``ttfc`` and ``e2e`` (seconds; None when undefined).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.engine.loop import InFlight
from veeksha.errors import RunAbortedError
from veeksha.generate.tokenizer import TokenizerLike
from veeksha.record.parquet import ResultWriter
from veeksha.record.trace import TraceWriter
from veeksha.schedule.session_state import NodeState, SessionState

__all__ = ["RunRecorder"]

_NS = 1e9
_TOOL = "tool"
_NO_CLIENT: tuple[None, None] = (None, None)  # a tool row's client and model: no request went
_OK, _FAILED, _CANCELLED = NodeState.OK, NodeState.FAILED, NodeState.CANCELLED


def _counting(
    tokenizer: TokenizerLike,
) -> tuple[bool, Callable[[str], int | None], Callable[[str], int | None] | None]:
    """How a client's rows are counted: whether its prompts count their target, its
    tokenizer's count (local: a server tokenizer is never called during a run), and its
    output counter (None: none)."""
    # Prompts built from a tokenizer's vocabulary (builtin, a calibrated server's) have
    # exactly their target length, one token a word: their count is the target, not redone.
    exact = getattr(tokenizer, "vocabulary", None) is not None
    count: Callable[[str], int | None] = tokenizer.count
    # A calibrated server tokenizer counts no text locally and the server is never called
    # here: an answer without usage is counted by its content chunks (record/numbers.py).
    counter = count if getattr(tokenizer, "counts_text", True) else None
    return exact, count, counter


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
        clients: list[tuple[str, str]] | None = None,
        tokenizers: list[TokenizerLike] | None = None,
    ) -> None:
        """``tokenizer`` counts every client's prompts unless ``tokenizers`` gives each
        client's (by the nodes' client index, as ``clients``)."""
        self.run_id = run_id
        self.model = model
        # (name, model) of each client, by the nodes' client index
        self._clients = clients or [("default", model)]
        self.t0_ns = t0_ns
        self._writer = writer
        self._trace = trace
        self._on_row = on_row
        # per client (by the nodes' client index): (exact, count, counter), made once here
        self._counting = [_counting(t) for t in tokenizers or [tokenizer] * len(self._clients)]

    def dispatched(self, request: InFlight, item: WorkItem) -> None:
        if self._trace is not None:
            session = request.session
            node = session.spec.nodes[request.node_id]
            self._trace.add(request.phase, session.session_id, node, item, request.attempt)

    def request_done(self, request: InFlight, result: Result, processed_at_ns: int) -> None:
        session = request.session
        node = session.spec.nodes[request.node_id]
        if node.validation is not None and self._trace is not None:
            self._trace.judged(request.request_id, request.valid)
        # veeksha's own count of the new prompt part (and of the output, lacking the server's),
        # in the tokenizer of the node's client
        exact, count, counter = self._counting[node.client]
        new_tokens = node.prompt_tokens if exact else count(node.prompt)
        if node.system is not None and new_tokens is not None and not exact:
            system_tokens = count(node.system)  # a dataset's system message is new too
            new_tokens = None if system_tokens is None else new_tokens + system_tokens
        output_tokens = (
            None
            if result.completion_tokens is not None or counter is None
            else counter(result.output_text)
        )
        writer = self._writer
        if writer.error is None:  # after a write error, rows are refused
            name, model = _NO_CLIENT if node.kind == _TOOL else self._clients[node.client]
            with writer.lock:  # the writer thread swaps the batch under this lock
                writer.requests.add_result(
                    self.run_id,
                    request.phase,
                    session.session_id,
                    request.request_id,
                    node,
                    model,
                    request.ready_at_ns,
                    request.dispatched_at_ns,
                    processed_at_ns,
                    result,
                    new_tokens,
                    None if new_tokens is None else request.history_tokens + new_tokens,
                    self.t0_ns,
                    output_tokens,
                    counter,  # (when the server's figure is doubtful)
                    name,
                    request.queue_wait_ns,
                    request.attempt,
                    request.valid,
                    None if node.not_before_s is None else session.not_before_ns(request.node_id),
                )
            try:  # noqa: SIM105 - hot path (``_added``, inlined: one call less per row)
                writer.row_added()
            except RunAbortedError:
                pass
        if self._on_row is not None:
            sent, first = result.sent_at_ns, result.first_chunk_at_ns
            ok = result.status == "ok"
            self._on_row(
                {
                    "status": result.status,
                    "ttfc": (first - sent) / _NS if ok and first is not None else None,
                    "e2e": (result.completed_at_ns - sent) / _NS if ok else None,
                }
            )

    def request_cancelled(
        self, session: SessionState, node_id: int, request_id: int, at_ns: int, reason: str
    ) -> None:
        node = session.spec.nodes[node_id]
        if node.validation is not None and self._trace is not None:
            self._trace.judged(request_id, None)  # (a withdrawn hand-over: no answer)
        writer = self._writer
        if writer.error is None:  # after a write error, rows are refused
            name, model = _NO_CLIENT if node.kind == _TOOL else self._clients[node.client]
            with writer.lock:
                writer.requests.add_cancelled(
                    self.run_id,
                    session.phase,
                    session.session_id,
                    request_id,
                    node,
                    model,
                    session.ready_at_ns[node_id],
                    at_ns,
                    None,
                    None,
                    reason,
                    self.t0_ns,
                    name,
                    session.attempts.get(node_id, 0) if session.attempts else 0,
                    None if node.not_before_s is None else session.not_before_ns(node_id),
                )
            self._added()
        if self._on_row is not None:
            self._on_row({"status": "cancelled"})

    def session_done(self, session: SessionState) -> None:
        nodes = session.spec.nodes
        states = session.states
        num_ok = states.count(_OK)
        num_error = states.count(_FAILED) - session.abandoned  # (abandoned: not an error)
        num_cancelled = states.count(_CANCELLED)  # never sent, or cancelled in flight
        if num_cancelled:
            dispatched = session.dispatched()
            num_requests = len(dispatched)
            think_time = sum([nodes[i].wait_after_ready_s for i in dispatched])
        else:  # every node was dispatched (and answered or failed)
            num_requests = num_ok + num_error + session.abandoned
            # (a list, not a generator: the same sum in the same order, without a generator
            # frame resumed per node)
            think_time = sum([node.wait_after_ready_s for node in nodes])
        if session.attempts:  # each re-prompt follows an answered (dispatched) attempt's row
            num_requests += sum(session.attempts.values())
        writer = self._writer
        if writer.error is None:  # after a write error, rows are refused
            with writer.lock:
                writer.sessions.add(
                    self.run_id,
                    session.phase,
                    session.session_id,
                    session.started_at_ns,
                    session.ended_at_ns,
                    len(nodes),
                    num_requests,
                    num_ok,
                    num_error,
                    num_cancelled,
                    think_time,
                    session.status,
                    self.t0_ns,
                )

    def _added(self) -> None:
        # After a write error the writer refuses rows. It has already reported the error through
        # its on_error callback, which stops the run; raising here, in the middle of the loop's
        # result handling, would leave a session half-updated and the run waiting for it forever.
        try:  # noqa: SIM105 - hot path: no context manager per row
            self._writer.row_added()
        except RunAbortedError:
            pass
