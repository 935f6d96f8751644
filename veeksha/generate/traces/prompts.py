"""The ``prompts`` flavor: your own prompts, one request each.

One row per request: ``prompt`` (alias ``text``; required) is sent as the user's message, as it
is; ``output_length`` (aliases ``output_tokens``, ``output_tokens_count``, ``max_tokens``) is the
answer's length asked for, the flavor's ``output_length`` (256 by default) where a row has none;
``system`` (optional) is a system message sent before it; ``timestamp`` or ``arrival_time``
(optional, seconds) are arrival times for ``traffic_scheduler: {type: trace}``; ``client`` and
``priority`` as in ``request_log``. Each row is a session of one request (a conversation is the
``untimed_content_multi_turn`` flavor's). This is the shape of ``vllm bench serve``'s custom
dataset (``{"prompt": ...}`` lines), guidellm's prompt files and AIPerf's single-turn inputs
(``{"text": ...}``).

Example (JSONL)::

    {"prompt": "Summarise the causes of the French revolution.", "output_length": 300}
    {"prompt": "Write a haiku about autumn."}

Token counts in the cache are words (the builtin tokenizer); with ``hf`` or ``server``
tokenizers each prompt is recounted when its session is made (``content.py``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.content import word_counts
from veeksha.generate.traces.flavor import TraceFlavor, check_lengths
from veeksha.generate.traces.reader import LINE, Field
from veeksha.generate.traces.request_log import CLIENT, PRIORITY, TIMESTAMP
from veeksha.scenario.generators import MAX_DRAW

__all__ = ["PromptsFlavor"]

#: the answer's length asked for when a row gives none (vLLM's custom dataset's default)
DEFAULT_OUTPUT_LENGTH = 256


class PromptsFlavor(TraceFlavor):
    """Rows of ``prompt`` and an optional ``output_length`` (see module doc)."""

    name = "prompts"
    fields: ClassVar = (
        Field("prompt", str, aliases=("text",), required=True),
        Field("output_length", int, aliases=("output_tokens", "output_tokens_count", "max_tokens")),
        Field("system", str),
        TIMESTAMP,
        CLIENT,
        PRIORITY,
    )

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        lines = batch.column(LINE)
        text = batch.column("prompt")
        empty = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(text), ""), True)
        if pc.any(empty).as_py():
            bad = int(np.flatnonzero(empty.to_numpy(zero_copy_only=False))[0])
            raise self.error(lines[bad].as_py(), "prompt is empty; give each row the text to send")
        check_lengths(self, batch, ("output_length",))
        default = getattr(self.settings, "output_length", DEFAULT_OUTPUT_LENGTH)
        output = pc.fill_null(pc.cast(batch.column("output_length"), pa.int64()), default)
        too_long = pc.greater(output, MAX_DRAW)
        if pc.any(too_long).as_py():
            bad = int(np.flatnonzero(too_long.to_numpy(zero_copy_only=False))[0])
            raise self.error(
                lines[bad].as_py(),
                f"output_length = {output[bad].as_py()} is more than {MAX_DRAW} tokens, longer"
                " than any model's context; write the answer's length in tokens",
            )
        system = batch.column("system")
        if system.null_count < len(system):
            system = pc.if_else(pc.equal(system, ""), pa.scalar(None, pa.string()), system)
        n = len(batch)
        return pa.RecordBatch.from_arrays(
            [
                lines,
                pa.nulls(n, pa.string()),  # (no group: each row a session of its own)
                pc.cast(batch.column("timestamp"), pa.float64()),
                pc.add(word_counts(text), word_counts(system)),
                output,
                text,
                system,
                pa.nulls(n, pa.string()),
                batch.column("client"),
                pc.cast(batch.column("priority"), pa.int64()),
            ],
            names=[
                "line",
                "group",
                "ts",
                "prompt_tokens",
                "output_tokens",
                "text",
                "system",
                "reply",
                "client",
                "priority",
            ],
        )
