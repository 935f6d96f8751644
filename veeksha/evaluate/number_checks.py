"""Health check of the server's own numbers: usage counts and timings veeksha did not take.

``server_numbers``: every measured request that reached the server (``stats.reached_server``:
sent, not a tool call, not refused a connection) has a ``server_numbers_rejected`` note list
(empty when each of its numbers was taken). A note is a
number out of range or not a number (a usage count outside [0, 2^31), ``1e400`` ...), a
``completion_tokens`` that disagrees with the chunks and the text the client received (the row
then holds veeksha's count), or a timing outside [0, e2e] (docs/metrics.md, "Server numbers";
``veeksha.record.numbers``). FAIL when any measured row has one: the server reported numbers that
cannot be true, and the rows that hold veeksha's figures instead say which.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.stats import from_numpy, reached_server, scalar
from veeksha.plural import counted
from veeksha.record import kernels as ak

__all__ = ["SERVER_NUMBERS"]

_EXAMPLES = 5
_FIELD = re.compile(r"(?:^|; )([^=;\s]+)=")


def _server_numbers(data: HealthInput) -> Outcome:
    measured = data.measured
    # (null: never sent; a refused connection or a tool call reached no server either)
    reached = from_numpy(reached_server(measured))
    notes = ak.filter_rows(measured.column("server_numbers_rejected"), reached)
    answered = len(notes) - notes.null_count
    if answered == 0:
        return Outcome(SKIP, "no measured request reached the server", {})
    noted = ak.fill_null(ak.not_equal(notes, scalar("")), scalar(False))
    rejected = [text for text in ak.filter_rows(notes, noted).to_pylist() if text]
    by_field = Counter(field for text in rejected for field in set(_FIELD.findall(text)))
    statistics: dict[str, Any] = {
        "requests": answered,
        "with_rejected_numbers": len(rejected),
        "by_field": dict(by_field.most_common()),
        "examples": rejected[:_EXAMPLES],
    }
    if not rejected:
        return Outcome(PASS, f"every number of {counted(answered, 'answer')} taken", statistics)
    fields = ", ".join(f"{field} {n}" for field, n in by_field.most_common(4))
    detail = (
        f"{len(rejected)} of {counted(answered, 'answer')} had server numbers veeksha did not take "
        f"({fields}): see server_numbers_rejected"
    )
    return Outcome(FAIL, detail, statistics)


SERVER_NUMBERS = HealthCheck(
    "server_numbers",
    "the server's usage counts and timings are numbers that fit what the client received",
    _server_numbers,
)
