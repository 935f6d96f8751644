"""``InProcessPool``: the dry run's dispatcher, answering every request inside the main process.

A dry run sends nothing, so the worker processes and the IPC hop only add cost to what a dry run
is for: measuring generation and scheduling, and checking a scenario's shape in seconds. This
pool has ``WorkerPool``'s surface (``start``, ``submit``, ``stop``, ``in_flight``, ``error``,
``worker_pids``) and its contract: exactly one ``Result`` per submitted ``WorkItem``, delivered
through ``on_results`` from a loop callback, never from inside ``submit``.

Timing: every item submitted during one event-loop pass is answered on the next pass, in one
batch, with one clock reading ``now`` for the whole batch: ``received_at = sent_at =
completed_at = last_byte_at = now`` and ``max_tokens`` synthetic chunks all at ``now`` (the same
``Result`` a dry-run worker returns; see ``dry_result``). ``processed_at − dispatched_at`` is
therefore the loop's own turnaround, the one latency a dry run has.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from veeksha.dispatch.messages import Result, WorkItem
from veeksha.errors import RunAbortedError, VeekshaError

__all__ = ["DRY_WORD", "InProcessPool", "dry_result"]

DRY_WORD = "token"  # every word of a dry-run answer
_WORKER_ID = 0
_answers: dict[int, str] = {}  # max_tokens -> answer text (a few distinct lengths per run)


def dry_result(
    item: WorkItem, worker_id: int, now: int, chunks: dict[int, list[int]] | None = None
) -> Result:
    """The answer of a dry run: ``max_tokens`` words, all chunks at ``now``, usage reported.

    ``chunks`` (max_tokens -> chunk times), kept by the caller for one ``now``, lets the results
    of a batch share their chunk-time lists (read-only) instead of building one each.
    """
    n = max(0, item.max_tokens)
    text = _answers.get(n)
    if text is None:
        text = _answers[n] = " ".join([DRY_WORD] * n)
    times = None if chunks is None else chunks.get(n)
    if times is None:
        times = [now] * n
        if chunks is not None:
            chunks[n] = times
    return Result(
        request_id=item.request_id,
        worker_id=worker_id,
        status="ok",
        received_at_ns=now,
        sent_at_ns=now,
        completed_at_ns=now,
        first_chunk_at_ns=now if n else None,
        chunk_times_ns=times,
        output_text=text,
        completion_tokens=n,
        last_byte_at_ns=now,
    )


class InProcessPool:
    """Answers submitted items on the next loop pass, in batches; no process, no IPC."""

    def __init__(self, on_results: Callable[[list[Result]], None]) -> None:
        self._on_results = on_results
        self._pending: list[WorkItem] = []
        self._scheduled = False
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.error: VeekshaError | None = None

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet answered."""
        return len(self._pending)

    @property
    def worker_pids(self) -> dict[int, int]:
        """No worker process: an empty mapping."""
        return {}

    def in_flight_by_worker(self) -> dict[int, int]:
        """Everything in flight is on the one pseudo-worker (id 0)."""
        return {_WORKER_ID: len(self._pending)}

    async def start(self, timeout: float = 0.0) -> None:  # noqa: ASYNC109 - pool surface
        """Bind to the running loop (nothing to spawn)."""
        self._loop = asyncio.get_running_loop()

    def submit(self, item: WorkItem, *, flush: bool = True) -> int:
        """Queue ``item`` for the next loop pass; returns the pseudo-worker's id (0)."""
        if self._stopping:
            raise RunAbortedError("the dry-run pool is stopping")
        self._pending.append(item)
        if not self._scheduled:
            assert self._loop is not None, "InProcessPool.start was not awaited"
            self._scheduled = True
            self._loop.call_soon(self._answer)
        return _WORKER_ID

    def flush(self) -> None:
        """Nothing to send: answers are batched per loop pass anyway."""

    async def stop(self, grace_s: float = 0.0) -> None:
        """Answer what is queued now; later submits raise. Idempotent."""
        self._stopping = True
        self._answer()

    def _answer(self) -> None:
        self._scheduled = False
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        now = time.monotonic_ns()
        chunks: dict[int, list[int]] = {}  # one shared (read-only) list per answer length
        self._on_results([dry_result(item, _WORKER_ID, now, chunks) for item in batch])
