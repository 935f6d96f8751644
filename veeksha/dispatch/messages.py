"""Typed IPC messages between the main process and the HTTP worker processes (msgspec).

main → worker: ``WorkItem`` (one request to send) and ``Stop``.
worker → main: ``WorkerReady`` once at start-up, then exactly one ``Result`` per ``WorkItem``,
errors included, and ``WorkerStats`` once as it stops. All timestamps are integer nanoseconds
of CLOCK_MONOTONIC.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "CLIENT_LIMIT",
    "ERROR_KINDS",
    "SHARD_LOST",
    "STATUSES",
    "UNREACHED_ERROR_KINDS",
    "WORKER_LOST",
    "FromWorker",
    "Result",
    "Stop",
    "ToWorker",
    "WorkItem",
    "WorkerReady",
    "WorkerStats",
]

# Request outcomes recorded in requests.parquet's ``status`` column.
STATUSES = ("ok", "error", "timeout", "cancelled", "abandoned")

# Values of ``error_kind`` (empty string when status is ok).
ERROR_KINDS = (
    "http_4xx",  # the server answered 4xx (429 included: see http_status)
    "http_5xx",  # the server answered 5xx
    "connection_refused",  # nothing listening / connect failed
    "client_limit",  # never sent: this machine refused a connection (open files, local ports)
    "connection_reset",  # the connection broke before or during the response
    "timeout",  # request_timeout elapsed (status "timeout")
    "malformed_response",  # bytes that break HTTP/1.1, SSE, UTF-8 or JSON, or no answer (204, 3xx)
    "worker_lost",  # the worker process died with the request in flight
    "cancelled",  # never sent: cancelled by its session or by the run's end (status "cancelled")
    "abandoned",  # its user gave up on it: the scenario's abandonment (status "abandoned")
    "client_error",  # anything else raised inside the worker
)

#: The ``error_kind`` of a request that never reached the server: no connection could be opened,
#: for the server's want or this machine's (its ``retries``, answers of 429/503 before it, did
#: reach it). The others may have reached it:
#: a reset, a timeout or a lost worker may come after the request was written, and a
#: ``cancelled`` Result may be a request in flight (one never sent has no Result: no ``sent_at``).
UNREACHED_ERROR_KINDS = ("connection_refused", "client_limit")

#: The ``error_kind`` of a request this machine refused a connection (no open file or local port
#: left: ``veeksha.open_files``): the load generator's failure, which ``generator_saturation``
#: fails on.
CLIENT_LIMIT = "client_limit"

#: The ``error_kind`` of a request a distributed run's shard had in flight when the shard was
#: lost (``veeksha.distributed.lost``): its outcome is unknown, not a failure, and the SLOs
#: treat it as cut off in flight (``veeksha.evaluate.slo``).
SHARD_LOST = "shard_lost"
#: The ``error_kind`` of a request whose worker process died with it in flight: lost by
#: veeksha, not failed by the server; the SLOs treat it as cut off in flight too.
WORKER_LOST = "worker_lost"


class WorkItem(msgspec.Struct, tag="work", array_like=True, gc=False):
    """One request for a worker to send.

    ``messages`` is the whole conversation as (role, content) pairs, inherited history included;
    completions clients flatten it into one prompt. An item handed over ahead of its ready time
    carries it in ``not_before_ns``: the worker holds it until then (a precise timer) and
    releases it, reporting that moment as ``Result.released_at_ns``; 0 means send at once.

    ``session`` is the id of the request's session (``session_id`` of its rows), which a
    client's ``session_header`` sends.

    ``deferrable``: nothing in the main process waits for this request's success (an open-loop
    leaf of an uncapped client, see ``engine.deferral``), so its successful Result may travel
    on the worker's bulk link, which the main process reads on its own cadence (``WorkerPool``).
    """

    request_id: int
    messages: list[tuple[str, str]]
    max_tokens: int
    dispatched_at_ns: int
    not_before_ns: int = 0
    client: int = 0  # which of the run's clients sends it (the worker's route)
    deferrable: bool = False  # an ok Result may go on the bulk link (see above)
    session: int = 0  # its session's id (the run's, in a distributed run too): session_header
    # the images of its messages (the image channel): (message index, width, height, seed)
    images: list[tuple[int, int, int, int]] = []
    # its user abandons it this long after it is sent (the scenario's ``abandonment``): the
    # worker drops the connection then if the answer has not ended; -1: never
    abandon_after_ns: int = -1


class Stop(msgspec.Struct, tag="stop", array_like=True):
    """Tell a worker to finish: cancel what is in flight (after ``grace_s``) and exit."""

    grace_s: float = 0.0


class WorkerReady(msgspec.Struct, tag="ready", array_like=True):
    """A worker is up, pinned and connected; sent once.

    A worker that cannot start sends it with ``error`` set (why, in words) and exits non-zero.
    """

    worker_id: int
    pid: int
    cpus: list[int]
    error: str = ""


class WorkerStats(msgspec.Struct, tag="stats", array_like=True):
    """A worker's account of its release timers' wake-ups (``veeksha.timers.WakeUps``), sent
    once as it stops, before its link closes; none without a wake-up lead."""

    worker_id: int
    count: int
    late: int
    max_ns: int
    lead_max_ns: int
    histogram: dict[int, int]


class Result(msgspec.Struct, tag="result", array_like=True, gc=False):
    """The outcome of one ``WorkItem``: every timestamp the worker took, and what came back.

    ``completed_at_ns`` is when the request ended: an answer's last byte, or the moment a
    failure was seen (a timeout's timer, a cancellation, a reset, the end of an error body).
    ``last_byte_at_ns`` is the last read that carried response bytes (head or body), 0 when
    none came; on a request that failed after a stall, the two are far apart.

    ``connect_ns`` is the set-up of the new connection its request waited for before it was
    first written (``sent_at_ns``): from the start of opening it (name resolution, TCP connect,
    for https the TLS handshake) to the worker holding it usable; 0 when it went out on a
    kept-alive connection, or none was opened. A later attempt's connection (a stale keep-alive
    re-send, a 429/503 retry) is opened after ``sent_at_ns``, inside the request's latencies: not
    counted here.
    """

    request_id: int
    worker_id: int
    status: str
    received_at_ns: int
    sent_at_ns: int
    completed_at_ns: int
    first_chunk_at_ns: int | None = None
    chunk_times_ns: list[int] = []
    output_text: str = ""
    http_status: int = 0
    error_kind: str = ""
    error_message: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    retries: int = 0
    server_timings: dict[str, Any] | None = None
    released_at_ns: int = 0  # a held item's release (its timer fired); 0 if not held
    last_byte_at_ns: int = 0  # the last read with response bytes; 0 if none came
    # the server's numbers not taken (out of range, not a count): ``field=raw (why); ...``
    server_numbers_rejected: str = ""
    # reads whose kernel stamp fell outside [sent_at, the read's time] and was clamped into it
    chunk_stamps_clamped: int = 0
    # the new connection's set-up before the request was first written (ns); 0: none opened
    connect_ns: int = 0
    # a reasoning model's chunks of thinking (among chunk_times_ns), and the read of its first
    # answer chunk after them (0: it did not think, or never answered)
    reasoning_chunks: int = 0
    first_answer_at_ns: int = 0
    # usage.completion_tokens_details.reasoning_tokens, when the server gave it
    reasoning_tokens: int | None = None


ToWorker = WorkItem | Stop
FromWorker = Result | WorkerReady | WorkerStats
