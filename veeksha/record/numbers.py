"""The server's numbers judged against what the client saw, before they become columns.

The worker has already bounded them (``veeksha.dispatch.numbers``: a usage count is an int in
[0, 2^31) or null with a note). Here, once per row, in the main process:

**Output tokens.** The server's ``completion_tokens`` s is taken when it is plausible for the
answer the client received: c non-empty content chunks (a server sends a token or more a
chunk) and r requested tokens::

    (1 - TOLERANCE) * c - SLACK  <=  s  <=  (1 + TOLERANCE) * max(r, c) + SLACK

(TOLERANCE 0.25, SLACK 2 tokens). Otherwise veeksha counts the text it received with its own
tokenizer (k, the client's figure; c without a tokenizer) and still takes s when it is within a
factor ``FACTOR`` (2) of k, give or take SLACK: tokenizers differ, a proxy may split tokens
across chunks, a server may ignore ``max_tokens``. Beyond that the row's ``output_tokens`` is k
(so ``tpot``, ``normalized_e2e`` and ``output_throughput`` are built on what the client saw),
``server_output_tokens`` keeps s, ``usage_reported`` is false, and a note says why. Example:
14 chunks of text, s = 1, k = 14: 1 < 0.75 * 14 - 2 = 8.5, and 1 < 14 / 2 - 2 = 5, so
output_tokens = 14.

**Server timings.** A ``timings`` value veeksha reads (``SERVER_TIMING_COLUMNS``, after its
unit's scale) is a duration of the server's inside the client's request, so it must be a number
in ``[0, e2e * (1 + TIMING_TOLERANCE) + TIMING_SLACK_S]`` with e2e = completed_at - sent_at (the
whole time the client waited; 5 % and 10 ms for clocks and rounding). Anything else (negative,
1e300, a duration in ms under a seconds key, text, ``true``) is null, with a note.

A note is ``field=raw (why)``; a row's notes are joined with ``; `` in its
``server_numbers_rejected`` column (empty when every number was taken), and the health check
``server_numbers`` counts those rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from veeksha.dispatch.numbers import raw_text
from veeksha.record.columns import SERVER_TIMING_COLUMNS

__all__ = [
    "FACTOR",
    "SLACK",
    "TIMING_SLACK_S",
    "TIMING_TOLERANCE",
    "TOLERANCE",
    "join_notes",
    "output_plausible",
    "output_tokens",
    "server_timings",
]

TOLERANCE = 0.25
SLACK = 2
FACTOR = 2
TIMING_TOLERANCE = 0.05
TIMING_SLACK_S = 0.01
_NS = 1e9

_SERVER_INDEX = {name: i for i, name in enumerate(SERVER_TIMING_COLUMNS)}
# timings key → (index among the server columns, scale to seconds)
_TIMING_KEYS: dict[str, tuple[int, float]] = {
    key + suffix: (_SERVER_INDEX[column], scale)
    for column, keys in SERVER_TIMING_COLUMNS.items()
    for key in keys
    for suffix, scale in (("", 1.0), ("_s", 1.0), ("_ms", 1e-3), ("_ns", 1e-9))
}
_TTFT = _SERVER_INDEX["server_ttft"]


def output_plausible(server: int, chunks: int, requested: int) -> bool:
    """Whether ``server`` output tokens fit ``chunks`` content chunks and ``requested`` tokens
    (the first test of the module docstring)."""
    high = requested if requested > chunks else chunks
    return (1 - TOLERANCE) * chunks - SLACK <= server <= (1 + TOLERANCE) * high + SLACK


def output_tokens(
    server: int | None,
    chunks: int,
    requested: int,
    text: str,
    counted: int | None,
    count_tokens: Callable[[str], int | None] | None,
    thinking: int = 0,
) -> tuple[int | None, bool, str]:
    """(output_tokens, whether it is the server's figure, note) of one answer.

    ``server``: the usage's completion_tokens (None: not reported or rejected by the worker);
    ``counted``: veeksha's count of the answer's text if already known, else
    ``count_tokens(text)`` is called when needed (without either, or if it fails, the chunk
    count stands for the client's figure). ``thinking``: a reasoning model's chunks of thinking,
    whose text is not the answer's: one token each in veeksha's count.
    """
    if server is not None and output_plausible(server, chunks, requested):
        return server, True, ""
    if counted is None and count_tokens is not None:
        try:
            counted = count_tokens(text)
        except Exception:  # noqa: BLE001 - a text the tokenizer fails on costs its count only
            counted = None
    if counted is not None:
        counted += thinking
    if server is None:
        return counted, False, ""
    # (not max(counted, chunks): a proxy that splits tokens across chunks sends more chunks)
    client = chunks if counted is None else counted
    if client / FACTOR - SLACK <= server <= client * FACTOR + SLACK:
        return server, True, ""
    seen = f"{chunks} content chunks" if counted is None else f"{chunks} chunks, {counted} counted"
    return client, False, f"completion_tokens={server} (disagrees: {seen})"


def server_timings(timings: Mapping[str, Any], e2e_s: float) -> tuple[list[float | None], str]:
    """The server_* columns (in SERVER_TIMING_COLUMNS order) of a ``timings`` object, and the
    notes of the values read but not taken (see the module docstring; ``e2e_s`` in seconds)."""
    out: list[float | None] = [None] * len(SERVER_TIMING_COLUMNS)
    notes = ""
    limit = e2e_s * (1 + TIMING_TOLERANCE) + TIMING_SLACK_S
    for key, value in timings.items():
        hit = _TIMING_KEYS.get(key)
        if hit is None or value is None:
            continue
        kind = type(value)
        seconds: float | None = None
        if kind is float or kind is int:  # (not a bool)
            try:
                seconds = value * hit[1]
            except OverflowError:  # an int beyond a float
                pass
            else:  # (NaN and the infinities fail the comparison too)
                if 0.0 <= seconds <= limit:
                    out[hit[0]] = seconds
                    continue
        out[hit[0]] = None
        notes = join_notes(notes, _timing_note(key, value, seconds, e2e_s))
    if out[_TTFT] is None:  # the built-in simulator gives the instants instead
        arrival, first = timings.get("arrival_ns"), timings.get("first_token_ns")
        if type(arrival) is int and type(first) is int:
            seconds = (first - arrival) / _NS
            if 0.0 <= seconds <= limit:
                out[_TTFT] = seconds
            else:
                name = "first_token_ns-arrival_ns"
                notes = join_notes(notes, _timing_note(name, first - arrival, seconds, e2e_s))
    return out, notes


def _timing_note(key: str, value: Any, seconds: float | None, e2e_s: float) -> str:
    raw = value if type(value) is str else raw_text(value)
    if len(raw) > 40:
        raw = raw[:39] + "…"
    if seconds is None or math.isnan(seconds):
        why = "not a number"
    elif seconds < 0:
        why = "negative"
    else:
        why = f"{seconds:.6g} s, longer than the request's e2e {e2e_s:.6g} s"
    return f"timings.{key[:40]}={raw} ({why})"


def join_notes(a: str, b: str) -> str:
    """Two ``; ``-joined note lists as one."""
    if not a:
        return b
    return f"{a}; {b}" if b else a
