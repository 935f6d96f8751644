"""Numbers from the server are untrusted input: bounded at the edge, never able to fail a request.

A server's ``usage`` counts and ``timings`` values reach the worker as JSON, where nothing stops
``18446744073709551617``, ``-5``, ``1e400`` or ``"fast"``. Left as they were, one such value
made the worker's Result batch unencodable (msgpack takes integers in [-2^63, 2^64)), or
overflowed the results writer, or wrapped around in an int32 column. Here, once per response:

- ``Rejections.count(name, value)``: a usage count is an ``int`` in ``[0, MAX_COUNT)`` (it fits
  the int32 token columns) or it is rejected: None, and a note ``name=raw (why)`` naming the
  field and its raw text (``completion_tokens=-5 (negative)``). ``veeksha.dispatch.openai``
  takes the usual usage inline and calls this only for the rest.
- ``raw_value(raw)``: a JSON value msgspec cannot represent (``1e400``, an integer of thousands
  of digits) as its raw text (``RawText``), for the lenient second decode of a chunk whose first
  decode failed on its usage, timings or error (``ResponseAccumulator._lenient``): such a number
  costs its field, not the response.
- ``sendable_timings(timings)``: the ``timings`` object with each value the link cannot carry
  (an integer beyond 64 bits anywhere in it, a ``RawText``) replaced by its raw text. Timings
  travel as the server sent them; only a Result that fails to encode is repaired with this
  (``veeksha.dispatch.worker.sendable``), so the common path pays nothing. The main process
  rejects such a text if it reads that key (``veeksha.record.numbers``).

The notes travel in ``Result.server_numbers_rejected`` (``; ``-separated) to the row's
``server_numbers_rejected`` column.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["MAX_COUNT", "MAX_RAW_CHARS", "Rejections", "raw_text", "raw_value", "sendable_timings"]

MAX_COUNT = 2**31  # exclusive bound of a token count (the int32 columns)
MAX_RAW_CHARS = 40  # of a rejected value's raw text kept in the note

_encode = msgspec.msgpack.Encoder().encode
_json = msgspec.json.encode
_decode_any = msgspec.json.Decoder().decode


class Rejections:
    """The notes of one response's rejected numbers (``field=raw (why)``), in order, by field.

    A field rejected twice (a usage object in every chunk) keeps its latest note.
    """

    __slots__ = ("notes",)

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}

    def count(self, name: str, value: Any) -> int | None:
        """``value`` if it is a token count in ``[0, MAX_COUNT)``; else None (noted unless
        None: a count that is absent is not rejected)."""
        if type(value) is int and 0 <= value < MAX_COUNT:
            return value
        if value is not None:
            if type(value) is int:
                why = "negative" if value < 0 else "out of range"
            elif type(value) is RawText:  # a number beyond what msgspec holds
                why = "out of range"
            else:
                why = "not an integer"
            self.add(name, raw_text(value), why)
        return None

    def add(self, name: str, raw: str, why: str) -> None:
        self.notes[name] = f"{name}={raw} ({why})"

    def text(self) -> str:
        """The notes joined with ``; `` (empty when none)."""
        return "; ".join(self.notes.values())


def raw_text(value: Any) -> str:
    """A short JSON text of ``value`` (a ``RawText`` as it is), at most ``MAX_RAW_CHARS``."""
    if type(value) is RawText:
        text = value.text
    else:
        try:
            text = _json(value).decode()
        except (TypeError, ValueError, OverflowError):  # (an int past str's digit limit)
            text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_RAW_CHARS else text[: MAX_RAW_CHARS - 1] + "…"


class RawText:
    """The raw JSON text of a value msgspec could not represent (``1e400``, 5,000 digits)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def raw_value(raw: msgspec.Raw) -> Any:
    """The value of one raw JSON value, or its ``RawText`` when msgspec cannot represent it."""
    try:
        return _decode_any(raw)
    except msgspec.MsgspecError:
        data = bytes(raw)
        return RawText(data[: MAX_RAW_CHARS + 1].decode("utf-8", "replace"))


def sendable_timings(timings: dict[str, Any]) -> dict[str, Any]:
    """``timings`` if the link can carry it (one encode, the usual case), else a copy with each
    value that it cannot carry replaced by its raw text (top-level values; a nested value the
    link cannot carry drops its whole top-level value to text)."""
    try:
        _encode(timings)
    except (OverflowError, TypeError, ValueError):
        pass
    else:
        return timings
    out: dict[str, Any] = {}
    for key, value in timings.items():
        if type(value) is RawText:
            out[key] = value.text
            continue
        try:
            _encode(value)
        except (OverflowError, TypeError, ValueError):
            out[key] = raw_text(value)
        else:
            out[key] = value
    return out
