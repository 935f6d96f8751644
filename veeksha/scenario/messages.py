"""How a bad key or value is worded, alike in every file veeksha reads: a scenario, a capacity
search file, a microbenchmark's settings (``file:line:column: key: message``, the message in
veeksha's words, never pydantic's):

- an unknown key names the key it resembles, ``unknown key; did you mean 'arrival_rate'?``
  (close in spelling, or holding the word as a part of its name: ``samples`` →
  ``samples_per_length``), else every allowed key;
- a bad value says what it must be and what was given, ``must be a valid integer (got 'abc')``,
  ``must be 'manual', 'range' or 'auto' (got 'foo')`` (pydantic says ``Input should be a valid
  integer, unable to parse string as an integer``), a boolean where a number belongs
  ``must be a valid integer, not a boolean (got true)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic_core import ErrorDetails

from veeksha.scenario.base import boolean_note

__all__ = ["REDACTED", "closest", "shown", "unknown_key", "value_message"]

REDACTED = "***"  # a secret given, as a message shows it

_MAPPING_ERRORS = ("model_type", "model_attributes_type", "dict_type")


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice a mistaken ``word`` most likely meant: the closest in spelling (difflib,
    imported only for a file with a mistake), else the one choice whose name holds the word's
    parts in a row (``samples`` → ``samples_per_length``, ``rate`` → ``arrival_rate``); None
    when neither finds exactly one."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    if close:
        return close[0]
    parts = [part for part in word.lower().split("_") if part]
    if not parts:
        return None
    holding = [c for c in choices if _holds(c.lower().split("_"), parts)]
    return holding[0] if len(holding) == 1 else None


def _holds(name: list[str], parts: list[str]) -> bool:
    return any(name[i : i + len(parts)] == parts for i in range(len(name) - len(parts) + 1))


def unknown_key(key: str, allowed: Sequence[str]) -> str:
    """The message for ``key``, not one of ``allowed``: the key it resembles, else the list."""
    near = closest(key, allowed)
    if near is not None:
        return f"unknown key; did you mean {near!r}?"
    return f"unknown key; allowed keys: {', '.join(allowed)}" if allowed else "unknown key"


def shown(value: Any) -> str:
    """A given value as a message quotes it, as YAML writes it: ``null``, ``true``, ``'text'``
    (long text cut), ``[1, 'a']``, ``{a: 1}``, ``!tag value``; never a Python repr."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, int | float):
        return _number(value)
    if isinstance(value, list | tuple):
        return _cut("[" + ", ".join(shown(item) for item in value) + "]")
    if isinstance(value, dict):
        pairs = (f"{_key(key)}: {shown(item)}" for key, item in value.items())
        return _cut("{" + ", ".join(pairs) + "}")
    tag = getattr(getattr(value, "tag", None), "value", None)
    if isinstance(tag, str):  # (a YAML tag ruamel kept: !expand 3)
        return _cut(f"{tag} {getattr(value, 'value', '')}")
    return _cut(str(value))


def _number(value: int | float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return repr(int(value) if isinstance(value, int) else float(value))


def _key(key: Any) -> str:
    return key if isinstance(key, str) else shown(key)


def _cut(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _own_words(kind: str, ctx: dict[str, Any]) -> str | None:
    """The message of a pydantic error that does not start "Input should be", in veeksha's
    words (None: ``value_message`` rewords pydantic's own)."""
    least, most = ctx.get("min_length"), ctx.get("max_length")
    if kind == "string_too_short":
        return "must not be empty" if least == 1 else f"must be at least {least} characters long"
    if kind == "string_too_long":
        return f"must be at most {most} characters long"
    if kind == "string_pattern_mismatch":
        return f"must match the pattern {ctx.get('pattern')}"
    if kind == "too_short":
        return "must not be empty" if least == 1 else f"must hold at least {least} items"
    if kind == "too_long":
        return f"must hold at most {most} items"
    if kind == "int_parsing_size":
        return "must be a valid integer, and this one is too large"
    if kind == "invalid_key":
        return "every key must be text"
    if kind == "string_not_ascii":
        return "must hold only ASCII characters"
    return None


def value_message(err: ErrorDetails, secret: bool = False) -> str:
    """A validation error of a value (not of an unknown key or a tag) in veeksha's words, with
    the value given (:data:`REDACTED` when ``secret``)."""
    kind, given = err["type"], err.get("input")
    if kind == "missing":
        return "missing required key"
    if kind in _MAPPING_ERRORS:
        if isinstance(given, list):
            return "must be a mapping, not a list"
        return f"must be a mapping (got {shown(given)})"
    message = _own_words(kind, err.get("ctx") or {}) or err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    message = message.replace("Input should be", "must be").replace(
        "a valid dictionary", "a mapping"
    )
    message = message.split(", unable to")[0].split(", got a number")[0]
    message += boolean_note(given, kind)  # (Python's bool is an int: veeksha.scenario.base)
    if "(got" not in message and not isinstance(given, dict | list):
        message += f" (got {REDACTED if secret else shown(given)})"
    return message
