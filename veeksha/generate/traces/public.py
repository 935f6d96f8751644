"""Published request traces by name: the Azure LLM inference trace and BurstGPT.

Both are lengths-only logs (each row a session of one request, its prompt built from the corpus
as for ``request_log``) whose own timestamps feed ``traffic_scheduler: {type: trace}``.

* ``azure_llm`` (Azure LLM inference trace 2023 and 2024, ``AzureLLMInferenceTrace_*.csv``)::

      TIMESTAMP,ContextTokens,GeneratedTokens
      2023-11-16 18:15:46.6805900,374,44

  ``TIMESTAMP`` is a date and time (fractions of a second up to nanoseconds; an offset such as
  ``+00:00`` is accepted), converted to seconds.
* ``burstgpt`` (BurstGPT, ``BurstGPT_*.csv``)::

      Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
      5,ChatGPT,472,18,490,Conversation log

  ``Timestamp`` is seconds. A failed request of the trace has 0 ``Response tokens``: it is not
  replayed, but counted and reported with the other unservable rows (run.log, summary.json).
  ``Model`` and ``Log Type`` are read and not used: the scenario's model is requested.
"""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.arrow import mask
from veeksha.generate.traces.flavor import TraceFlavor, check_lengths, first_bad
from veeksha.generate.traces.reader import LINE, Field

__all__ = ["AzureLlmFlavor", "BurstGptFlavor"]


def _staged(batch: pa.RecordBatch, ts: pa.Array, prompt: str, output: str) -> pa.RecordBatch:
    n = batch.num_rows
    return pa.RecordBatch.from_arrays(
        [
            batch.column(LINE),
            pa.nulls(n, pa.string()),
            ts,
            batch.column(prompt),
            batch.column(output),
        ],
        names=["line", "group", "ts", "prompt_tokens", "output_tokens"],
    )


class AzureLlmFlavor(TraceFlavor):
    """``TIMESTAMP,ContextTokens,GeneratedTokens`` (see module doc)."""

    name = "azure_llm"
    fields: ClassVar = (
        Field("TIMESTAMP", str, required=True),
        Field("ContextTokens", int, required=True),
        Field("GeneratedTokens", int, required=True),
    )

    def __init__(self, path: object, settings: object = None) -> None:
        super().__init__(path, settings)  # type: ignore[arg-type]
        #: whether the first row's TIMESTAMP has a UTC offset, and its line: every row must
        #: agree (a time without an offset next to one with it is ambiguous)
        self._zoned: tuple[bool, int] | None = None

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        check_lengths(self, batch, ("ContextTokens", "GeneratedTokens"))
        return _staged(batch, self._seconds(batch), "ContextTokens", "GeneratedTokens")

    def _seconds(self, batch: pa.RecordBatch) -> pa.Array:
        text = pc.utf8_trim_whitespace(batch.column("TIMESTAMP"))
        zoned = mask(pc.match_substring_regex(text, r"([+-]\d\d:?\d\d|Z)$"))
        if self._zoned is None and len(zoned):
            self._zoned = (bool(zoned[0]), int(batch.column(LINE)[0].as_py()))
        if self._zoned is not None:
            with_offset, first_line = self._zoned
            other = first_bad(zoned != with_offset)
            if other is not None:
                this, first = ("has no", "has one") if with_offset else ("has a", "has none")
                raise self.error(
                    batch.column(LINE)[other].as_py(),
                    f"TIMESTAMP = {text[other].as_py()!r} {this} UTC offset while line"
                    f" {first_line}'s {first}; give every row an offset (e.g. +00:00) or none",
                )
        kind = pa.timestamp("ns", "UTC" if self._zoned and self._zoned[0] else None)
        try:
            stamps = pc.cast(text, kind)
        except pa.ArrowInvalid:
            for i, value in enumerate(text.to_pylist()):
                try:
                    pc.cast(pa.array([value], pa.string()), kind)
                except pa.ArrowInvalid:
                    raise self.error(
                        batch.column(LINE)[i].as_py(),
                        f"TIMESTAMP = {value!r} is not a date and time; write e.g."
                        " 2023-11-16 18:15:46.680590 (every row with or without a UTC offset)",
                    ) from None
            raise self.error(  # (not reached: a batch that fails has a row that fails)
                batch.column(LINE)[0].as_py(), "TIMESTAMP cannot be read as dates and times"
            ) from None
        nanos = pc.cast(pc.cast(stamps, pa.timestamp("ns")), pa.int64())
        micros = pc.divide(nanos, 1000)  # (doubles hold microseconds of today exactly)
        return pc.divide(pc.cast(micros, pa.float64()), 1e6)


class BurstGptFlavor(TraceFlavor):
    """``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`` (see module
    doc)."""

    name = "burstgpt"
    unservable_reason = "failed_request"
    fields: ClassVar = (
        Field("Timestamp", float, required=True),
        Field("Request tokens", int, required=True),
        Field("Response tokens", int, required=True),
        Field("Model", str),
        Field("Log Type", str),
    )

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        check_lengths(self, batch, ("Request tokens", "Response tokens"))
        ts = pc.cast(batch.column("Timestamp"), pa.float64())
        bad = first_bad(pc.is_nan(ts))
        if bad is not None:
            raise self.error(
                batch.column(LINE)[bad].as_py(), "Timestamp is not a number of seconds"
            )
        return _staged(batch, ts, "Request tokens", "Response tokens")
