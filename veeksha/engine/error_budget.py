"""When a run stops for its failures (``runtime.max_errors``, ``runtime.max_error_rate``).

A server that died, or that fails most of what it is sent, is not worth benchmarking for the
rest of the run: its requests would fail for as long as the run lasts. The traffic loop tells
the budget each request that ended; the budget says when the run must stop, and why.
"""

from __future__ import annotations

from collections import deque

__all__ = ["ErrorBudget"]


class ErrorBudget:
    """The failures a run accepts: at most ``max_errors`` in all, and at most a share
    ``max_error_rate`` of the last ``window`` requests that ended (judged once ``window`` have
    ended). ``ended`` returns why the run must stop, once, or None."""

    __slots__ = ("_failed", "_max_errors", "_max_rate", "_recent", "_recent_failed", "spent")

    def __init__(self, max_errors: int | None, max_rate: float | None, window: int) -> None:
        self._max_errors = max_errors
        self._max_rate = max_rate
        self._failed = 0
        self._recent: deque[bool] | None = None if max_rate is None else deque(maxlen=window)
        self._recent_failed = 0
        self.spent = False  # (said once: the loop stops at the first reason)

    def ended(self, failed: bool) -> str | None:
        """A request ended, ``failed`` (error or timeout) or answered: why the run must stop
        now (the first time a limit is passed), else None."""
        if self.spent:
            return None
        recent = self._recent
        if recent is not None:
            if len(recent) == recent.maxlen and recent[0]:
                self._recent_failed -= 1
            recent.append(failed)
            self._recent_failed += failed
        if not failed:
            return None
        self._failed += 1
        reason = None
        if self._max_errors is not None and self._failed >= self._max_errors:
            reason = f"{self._failed} requests failed (runtime.max_errors: {self._max_errors})"
        elif (
            recent is not None
            and self._max_rate is not None
            and len(recent) == recent.maxlen
            and self._recent_failed > self._max_rate * len(recent)
        ):
            reason = (
                f"{self._recent_failed} of the last {len(recent)} requests failed"
                f" (runtime.max_error_rate: {self._max_rate:g})"
            )
        self.spent = reason is not None
        return reason
