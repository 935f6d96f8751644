"""What the traffic loop reports to the rest of the run: a request in flight (``InFlight``)
and the ``TrafficSink`` that hears of dispatches, results, cancellations and session ends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.schedule.session_state import SessionState

__all__ = ["SESSION_ABANDONED", "SESSION_FAILED", "InFlight", "TrafficSink", "run_stopped"]

#: error_message of a node never sent because another request of its session failed
#: (``cancel_session_on_failure: true``).
SESSION_FAILED = (
    "cancelled before it was sent: another request of its session failed "
    "(cancel_session_on_failure: true)"
)

#: error_message of a node never sent because its user abandoned another request of its session
#: (the scenario's ``abandonment``, with ``cancel_session_on_failure: true``).
SESSION_ABANDONED = (
    "cancelled before it was sent: its user abandoned another request of its session "
    "(cancel_session_on_failure: true)"
)


def run_stopped(stop_reason: str) -> str:
    """error_message of a node never sent because the run stopped (``stop_reason``: timeout,
    interrupted, ... as summary.json's ``run.stop_reason``)."""
    return f"cancelled before it was sent: the run stopped ({stop_reason})"


def cut_in_flight(stop_reason: str) -> str:
    """error_message of a request cancelled in flight because the run stopped (its grace ran
    out, or a second Ctrl-C): it had been sent; what it received is kept in its row."""
    return f"cancelled in flight: the run stopped ({stop_reason}) before it ended"


@dataclass(slots=True)
class InFlight:
    """A dispatched request awaiting its result."""

    session: SessionState
    node_id: int
    request_id: int
    ready_at_ns: int
    dispatched_at_ns: int
    worker_id: int
    history_tokens: int
    phase: str = "measured"  # the phase in force at its ready time (``TrafficLoop``)
    queue_wait_ns: int = 0  # ready → slot of its client (0: it never waited for one)
    attempt: int = 0  # 0: the node's first request; n: its n-th re-prompt
    valid: bool | None = None  # its answer passed the node's validation (None: none/no answer)


class TrafficSink(Protocol):
    """Where the loop reports what happened (the recorder, the trace, the progress display)."""

    def dispatched(self, request: InFlight, item: WorkItem) -> None:
        """Handed to the dispatcher; ``item.not_before_ns`` set: to be released then."""

    def request_done(self, request: InFlight, result: Result, processed_at_ns: int) -> None: ...

    def request_cancelled(
        self, session: SessionState, node_id: int, request_id: int, at_ns: int, reason: str
    ) -> None:
        """A node cancelled before it was sent; ``request_id`` may be that of a hand-over that
        was withdrawn (see ``dispatch_ahead_ns``), whose ``dispatched`` was already reported;
        ``reason``: why (``SESSION_FAILED``, ``SESSION_ABANDONED`` or ``run_stopped``), its
        row's error_message."""

    def session_done(self, session: SessionState) -> None: ...
