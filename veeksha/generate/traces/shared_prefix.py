"""The ``shared_prefix`` flavor and the Mooncake trace: prompts made of hash-id token blocks.

Columns: ``hash_ids`` (a list of non-negative integers: one per block of ``block_size`` tokens),
``input_length`` (the prompt's tokens: ``len(hash_ids) - 1`` full blocks and a last block of
``input_length - (len(hash_ids) - 1) * block_size`` tokens, from 1 to ``block_size``),
``output_length``; optional ``session_id`` (rows sharing it are one linear chat with history:
the first row's prompt is its blocks, each later row adds ``new_input_length`` fresh tokens) and
``timestamp`` (seconds; Mooncake: milliseconds). Equal hash ids are identical blocks in every
session (``content.py``), so a prefix cache sees the trace's sharing.

Mooncake (FAST'25, ``mooncake_trace.jsonl``)::

    {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2, 3]}

is this flavor with ``timestamp`` in milliseconds and ``block_size`` 512; a later turn of a
``session_id`` without ``new_input_length`` adds ``input_length`` minus the previous turn's input
and output (at least 1): a Mooncake turn's ``input_length`` counts the whole conversation.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.arrow import numbers
from veeksha.generate.traces.flavor import TraceFlavor, check_lengths
from veeksha.generate.traces.reader import LINE, Field

__all__ = ["MooncakeFlavor", "SharedPrefixFlavor"]

_HASH_IDS = pa.list_(pa.int64())
_decode_ids = msgspec.json.Decoder(list[int]).decode


class SharedPrefixFlavor(TraceFlavor):
    """Rows of ``hash_ids`` blocks (see module doc)."""

    name = "shared_prefix"
    fields: ClassVar = (
        Field("input_length", int, required=True),
        Field("output_length", int, required=True),
        Field("hash_ids", object),
        Field("new_input_length", int),
        Field("session_id", str),
        Field("timestamp", float, aliases=("arrival_time",)),
    )
    extra: ClassVar = (("new_input_length", pa.int64()), ("input_length", pa.int64()))
    #: trace seconds per timestamp unit
    time_unit = 1.0

    def __init__(self, path: object, settings: object = None) -> None:
        super().__init__(path, settings)  # type: ignore[arg-type]
        self.block_size = int(getattr(settings, "block_size", 512))

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        check_lengths(self, batch, ("input_length", "output_length", "new_input_length"))
        lines = batch.column(LINE).to_pylist()
        inputs = batch.column("input_length").to_pylist()
        grouped = batch.column("session_id")
        hash_ids = [
            self._ids(text, line, n, grouped[i].is_valid)
            for i, (text, line, n) in enumerate(
                zip(batch.column("hash_ids").to_pylist(), lines, inputs, strict=True)
            )
        ]
        ts = pc.cast(batch.column("timestamp"), pa.float64())
        if self.time_unit != 1.0:
            ts = pc.multiply(ts, self.time_unit)
        return pa.RecordBatch.from_arrays(
            [
                batch.column(LINE),
                batch.column("session_id"),
                ts,
                batch.column("input_length"),
                batch.column("output_length"),
                pa.array(hash_ids, _HASH_IDS),
                batch.column("new_input_length"),
                batch.column("input_length"),
            ],
            names=[
                "line",
                "group",
                "ts",
                "prompt_tokens",
                "output_tokens",
                "hash_ids",
                "new_input_length",
                "input_length",
            ],
        )

    def _ids(self, text: str | None, line: int, tokens: int, grouped: bool) -> list[int] | None:
        if text is None:
            if grouped:
                return None  # a later turn needs none; a first turn is checked by link
            raise self.error(line, "no 'hash_ids' in this row; give the row's list of block ids")
        try:
            ids = _decode_ids(text)
        except msgspec.DecodeError:
            raise self.error(
                line, f"hash_ids = {text[:60]} is not a list of integers; write e.g. [0, 1, 2]"
            ) from None
        if not ids:
            raise self.error(line, "hash_ids is empty; give at least one block id")
        if min(ids) < 0:
            raise self.error(line, f"hash_ids holds {min(ids)}; block ids are 0 or more")
        size = self.block_size
        last = tokens - (len(ids) - 1) * size
        if tokens and not 1 <= last <= size:
            raise self.error(
                line,
                f"input_length {tokens} does not fit {len(ids)} hash ids of block_size {size}"
                f" (it must be more than {(len(ids) - 1) * size} and at most {len(ids) * size});"
                " fix the row or set session_generator.flavor.block_size",
            )
        return ids

    def link(self, session: pa.Table) -> pa.Table:
        """A linear chat: the first row's prompt is its blocks, later rows add new tokens."""
        lines = numbers(session.column("line"), np.int64)
        if session.column("hash_ids")[0].as_py() is None:
            raise self.error(
                int(lines[0]), "the first row of a session needs 'hash_ids'; give its block ids"
            )
        prompt = numbers(session.column("prompt_tokens"), np.int64)
        new = session.column("new_input_length")
        fresh = self._later_tokens(session, lines)
        prompt[1:] = fresh[1:]
        del new
        hashes = pa.array(
            [session.column("hash_ids")[0].as_py()] + [None] * (session.num_rows - 1), _HASH_IDS
        )
        index = session.schema.get_field_index
        session = session.set_column(index("prompt_tokens"), "prompt_tokens", pa.array(prompt))
        session = session.set_column(index("hash_ids"), "hash_ids", hashes)
        return super().link(session)

    def _later_tokens(self, session: pa.Table, lines: np.ndarray) -> np.ndarray:
        """Each row's new prompt tokens after the first row (``new_input_length``)."""
        new = numbers(session.column("new_input_length"), np.int64, -1)
        missing = np.flatnonzero(new[1:] < 0)
        if missing.size:
            raise self.error(
                int(lines[1 + missing[0]]),
                "a later turn of a session needs 'new_input_length' (its new prompt tokens)",
            )
        return new


class MooncakeFlavor(SharedPrefixFlavor):
    """The Mooncake trace (see module doc): timestamps in milliseconds."""

    name = "mooncake"
    time_unit = 0.001

    def _later_tokens(self, session: pa.Table, lines: np.ndarray) -> np.ndarray:
        new = numbers(session.column("new_input_length"), np.int64, -1)
        inputs = numbers(session.column("input_length"), np.int64)
        outputs = numbers(session.column("output_tokens"), np.int64)
        derived = np.maximum(1, inputs[1:] - inputs[:-1] - outputs[:-1])
        new[1:] = np.where(new[1:] < 0, derived, new[1:])
        return new
