"""``flavor: {type: auto}`` (the default): the flavor told from the file's header or first row.

Rules, first match wins (names are the CSV header's, or the first JSON row's keys):

================================================  ==============================
``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``  ``azure_llm``
``Request tokens``, ``Response tokens``           ``burstgpt``
``conversations``                                 ``untimed_content_multi_turn``
``doc_id``, ``prompt_text``                       ``rag``
``hash_ids`` and ``timestamp``                    ``mooncake`` (milliseconds)
``hash_ids``                                      ``shared_prefix``
``session_context``, ``new_input_length``,
``target_prompt_tokens`` or ``node_id``           ``timed_synthetic_session``
``input_length`` or ``num_prefill_tokens``        ``request_log``
``prompt`` or ``text``                            ``prompts``
anything else                                     ``timed_synthetic_session``
================================================  ==============================

The public formats' names (the first two rules) are told loosely, whatever their case, spaces,
``_`` and ``-``: a header with ``Timestamp`` for ``TIMESTAMP`` is read as ``azure_llm``, whose
error then says which column to rename. The chosen flavor is written to run.log (``... (flavor
detected from the file)``).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import msgspec

from veeksha.generate.traces.reader import (
    BOM,
    TraceFileError,
    detect_format,
    loose_name,
    unreadable,
)
from veeksha.scenario import models

__all__ = ["detect_flavor", "detected_keys"]


def detected_keys(path: Path) -> set[str]:
    """The column names of a CSV's header, or the keys of a JSON trace's first row."""
    try:
        fmt = detect_format(path)
        with open(path, "rb") as file:
            if fmt == "csv":
                delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
                for row in csv.reader(
                    (line.decode("utf-8-sig", "replace") for line in file), delimiter=delimiter
                ):
                    if row:
                        return {name.strip() for name in row}
                return set()
            if fmt == "jsonl":
                for number, raw in enumerate(file, start=1):
                    if raw.strip():
                        return _keys(msgspec.json.decode(raw.removeprefix(BOM)), path, number)
                return set()
    except OSError as exc:
        raise unreadable(path, exc) from None
    except msgspec.DecodeError as exc:
        raise TraceFileError(
            path,
            None,
            f"cannot tell the flavor: the first row is not JSON ({exc}); fix it or"
            " set session_generator.flavor.type",
        ) from None
    # a JSON array (datasets, read whole anyway): its first element's keys
    try:
        items = msgspec.json.decode(path.read_bytes().removeprefix(BOM), type=list[msgspec.Raw])
    except (OSError, msgspec.DecodeError):
        return set()  # the reader says what is wrong, with its line
    return _keys(msgspec.json.decode(items[0]), path, 1) if items else set()


def _keys(row: Any, path: Path, line: int) -> set[str]:
    if not isinstance(row, dict):
        raise TraceFileError(path, line, "a trace row must be a JSON object; write one per line")
    return set(row)


def detect_flavor(path: Path) -> models.StrictModel:
    """The flavor settings (defaults) the file's names point to (see module doc)."""
    keys = detected_keys(path)
    loose = {loose_name(key) for key in keys}
    chosen: models.StrictModel
    # the public formats' names are told loosely (case, spaces, _ and -): a near-miss reads as
    # that format and its error names the column to rename, not another flavor's columns
    if {"timestamp", "contexttokens", "generatedtokens"} <= loose:
        chosen = models.AzureLlmFlavor()
    elif {"requesttokens", "responsetokens"} <= loose:
        chosen = models.BurstGptFlavor()
    elif "conversations" in keys:
        chosen = models.UntimedContentMultiTurnFlavor()
    elif {"doc_id", "prompt_text"} <= keys:
        chosen = models.RagFlavor()
    elif "hash_ids" in keys:
        chosen = models.MooncakeFlavor() if "timestamp" in keys else models.SharedPrefixFlavor()
    elif keys & {"session_context", "new_input_length", "target_prompt_tokens", "node_id"}:
        chosen = models.TimedSyntheticSessionFlavor()
    elif keys & {"input_length", "num_prefill_tokens"}:
        chosen = models.RequestLogFlavor()
    elif loose & {"prompt", "text"}:  # (loosely: a "Prompt" column is refused by name)
        chosen = models.PromptsFlavor()
    else:
        chosen = models.TimedSyntheticSessionFlavor()
    return chosen
