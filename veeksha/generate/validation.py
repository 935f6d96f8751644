"""Checks of an answer's text (a node's ``validation``): a regex, JSON, or one of a list.

A check returns None when the answer passes, else the note appended to the re-prompt (as agent
frameworks do: the failed answer as ``assistant``, then the note as ``user``).

>>> AnswerCheck.of(RegexValidation(pattern="^yes|no$"))("maybe") is not None
True
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from veeksha.scenario.models import (
    ChoicesValidation,
    JsonValidation,
    RegexValidation,
    Validation,
)

__all__ = ["AnswerCheck"]


class AnswerCheck:
    """A compiled ``validation``: call it with the answer text."""

    __slots__ = ("_check",)

    def __init__(self, check: Callable[[str], str | None]) -> None:
        self._check = check

    @classmethod
    def of(cls, config: Validation) -> AnswerCheck:
        if isinstance(config, RegexValidation):
            pattern = re.compile(config.pattern)
            note = (
                f"Your answer does not have the required format (it must match {config.pattern})."
                " Answer again."
            )
            return cls(lambda text: None if pattern.search(text) else note)
        if isinstance(config, JsonValidation):
            return cls(_json_note)
        assert isinstance(config, ChoicesValidation)
        allowed = set(config.choices)
        note = f"Your answer must be exactly one of: {', '.join(config.choices)}. Answer again."
        return cls(lambda text: None if text.strip() in allowed else note)

    def __call__(self, text: str) -> str | None:
        return self._check(text)


def _json_note(text: str) -> str | None:
    try:
        json.loads(text)
    except ValueError as exc:
        return f"Your answer is not valid JSON ({exc.args[0]}). Answer again with JSON only."
    return None
