"""The ``request_log`` flavor: one row per request, lengths only.

Columns: ``input_length`` (alias ``num_prefill_tokens``) and ``output_length`` (alias
``num_decode_tokens``), required; ``session_id`` (optional: rows sharing it form a linear chat, in
file order, each turn carrying the conversation so far; without it, each row is a session of one
request); ``timestamp`` or ``arrival_time`` (optional, seconds: arrival times for
``traffic_scheduler: {type: trace}``; a grouped session arrives at its earliest row's time, and
with ``turn_timing: timestamps`` each later turn also waits for its own row's time);
``client`` (optional: the name of the scenario's client that serves the row; empty: the first)
and ``priority`` (optional integer: the row's priority for ``runtime.priority: node``; empty: 0);
``images`` (optional: the row's images for a vision-language model, a JSON list of ``[width,
height]`` in pixels, sent before its text as the image channel sends them, each picture its own;
``input_length`` is the text's tokens).

Example (CSV)::

    timestamp,input_length,output_length
    0.0,512,128
    0.4,90,300
    0.9,2048,16
    1.3,700,64
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.flavor import TraceFlavor, check_lengths
from veeksha.generate.traces.reader import LINE, Field

__all__ = ["RequestLogFlavor"]

TIMESTAMP = Field("timestamp", float, aliases=("arrival_time",))
SESSION_ID = Field("session_id", str)
CLIENT = Field("client", str)
PRIORITY = Field("priority", int)


class RequestLogFlavor(TraceFlavor):
    """Rows of ``input_length``/``output_length`` (see module doc)."""

    name = "request_log"
    fields: ClassVar = (
        Field("input_length", int, aliases=("num_prefill_tokens",), required=True),
        Field("output_length", int, aliases=("num_decode_tokens",), required=True),
        SESSION_ID,
        TIMESTAMP,
        CLIENT,
        PRIORITY,
        Field("images", object),
    )

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        check_lengths(self, batch, ("input_length", "output_length"))
        columns = [
            batch.column(LINE),
            _empty_as_null(batch.column("session_id")),
            pc.cast(batch.column("timestamp"), pa.float64()),
            batch.column("input_length"),
            batch.column("output_length"),
            batch.column("client"),
            pc.cast(batch.column("priority"), pa.int64()),
        ]
        names = ["line", "group", "ts", "prompt_tokens", "output_tokens", "client", "priority"]
        given = batch.column("images")
        if given.null_count < len(given):  # (a log without images stages as it always did)
            lines = batch.column(LINE).to_pylist()
            images = [
                None if value is None or value == "" else self.images(value, line)
                for value, line in zip(given.to_pylist(), lines, strict=True)
            ]
            columns.append(pa.array(images, pa.list_(pa.int64())))
            names.append("images")
        return pa.RecordBatch.from_arrays(columns, names=names)


def _empty_as_null(column: pa.Array) -> pa.Array:
    """A CSV's empty cell reads as "": no session id, as a JSON row without the key (else the
    rows with an empty cell would all be one chat)."""
    if column.null_count == len(column):
        return column
    empty = pc.equal(column, "")
    return pc.if_else(empty, pa.scalar(None, column.type), column)
