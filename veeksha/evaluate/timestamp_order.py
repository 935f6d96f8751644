"""The documented order of a request's timestamps, audited from the rows.

Every recorded request must satisfy, wherever both sides were recorded (a null is not a
violation: a cancelled request was never sent, a failed one may have no first chunk)::

    ready_at ≤ dispatched_at ≤ received_at ≤ sent_at ≤ first_chunk_at ≤ completed_at ≤ processed_at

and ``sent_at ≤ completed_at`` for requests without a first chunk. ``order_violations`` counts
the rows that break each inequality; the ``lifecycle_delays`` health check fails on any. (The
order *between* requests, a child dispatched no sooner than its parents' completion plus its
think time, is the ``dependencies`` check's.) Times are recorded in integer nanoseconds and
stored as seconds since t0, so two equal instants compare equal; ``TOLERANCE_S`` (half a
nanosecond) only absorbs the float conversion.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from veeksha.evaluate.source import ColumnSource
from veeksha.evaluate.stats import column

__all__ = ["ORDER", "TOLERANCE_S", "order_violations"]

#: (earlier, later) column pairs that every row must keep in this order.
ORDER: tuple[tuple[str, str], ...] = (
    ("ready_at", "dispatched_at"),
    ("dispatched_at", "received_at"),
    ("received_at", "sent_at"),
    ("sent_at", "first_chunk_at"),
    ("first_chunk_at", "completed_at"),
    ("sent_at", "completed_at"),
    ("completed_at", "processed_at"),
)
TOLERANCE_S = 0.5e-9


def order_violations(requests: pa.Table | ColumnSource) -> dict[str, int]:
    """Rows breaking each pair of ``ORDER``, by ``"earlier<=later"``; two columns in memory."""
    counts: dict[str, int] = {}
    for earlier, later in ORDER:
        before = column(requests, earlier)
        before -= column(requests, later)  # NaN where either side is null: never counted
        counts[f"{earlier}<={later}"] = int(np.count_nonzero(before > TOLERANCE_S))
    return counts
