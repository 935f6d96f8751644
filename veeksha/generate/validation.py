"""Checks of an answer's text (a node's ``validation``): a regex, JSON, or one of a list.

A check returns None when the answer passes, else the note appended to the re-prompt (as agent
frameworks do: the failed answer as ``assistant``, then the note as ``user``).

>>> AnswerCheck.of(RegexValidation(pattern="^yes|no$"))("maybe") is not None
True

:class:`NodeChecks` puts a graph's or a trace's ``validation`` on a share of its LLM nodes;
:class:`ReplayedReprompts` replays a recorded node's re-prompts (trace.jsonl's ``attempt``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from veeksha.generate.spec import NodeSpec
from veeksha.scenario.models import (
    ChoicesValidation,
    JsonValidation,
    RegexValidation,
    Validation,
)

__all__ = ["AnswerCheck", "NodeChecks", "ReplayedReprompts"]


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


class _Checked(Protocol):
    """The keys of a graph or a trace generator that put a validation on its nodes."""

    @property
    def validation(self) -> Validation | None: ...
    @property
    def max_reprompts(self) -> int: ...
    @property
    def validation_probability(self) -> float: ...


class NodeChecks:
    """``validation`` / ``max_reprompts`` / ``validation_probability`` of a linear, branching
    or single-request graph, or of a trace: each LLM node is checked with that probability
    (a draw per node from the caller's ``validation`` stream, so the choice never reshuffles
    lengths, content or arrivals; probability 1 draws nothing)."""

    __slots__ = ("_check", "_max", "_probability")

    def __init__(self, check: AnswerCheck, max_reprompts: int, probability: float) -> None:
        self._check = check
        self._max = max_reprompts
        self._probability = probability

    @classmethod
    def of(cls, config: _Checked) -> NodeChecks | None:
        """The checks ``config`` asks for, or None (no validation, or a 0 share)."""
        if config.validation is None or config.validation_probability <= 0:
            return None
        return cls(
            AnswerCheck.of(config.validation), config.max_reprompts, config.validation_probability
        )

    def apply(self, nodes: Sequence[NodeSpec], rng: np.random.Generator) -> None:
        """Give the chosen LLM nodes of ``nodes`` the check (tool nodes are never checked)."""
        if self._probability >= 1:
            chosen: Sequence[bool] = [True] * len(nodes)
        else:
            chosen = (rng.random(len(nodes)) < self._probability).tolist()
        check, most = self._check, self._max
        for node, pick in zip(nodes, chosen, strict=True):
            if pick and node.kind == "llm":
                node.validation = check
                node.max_reprompts = most


class ReplayedReprompts:
    """The check of a replayed node that was re-prompted ``count`` times when recorded: its first
    ``count`` answers fail (with ``NOTE``), the next passes (fails too when not ``last_valid``:
    the recording ran out of re-prompts), so the replay sends the recorded number of attempts
    and ends as recorded whatever the server answers. One per node (it counts the answers)."""

    __slots__ = ("_count", "_seen")
    NOTE = "Your answer does not have the required format. Answer again."

    def __init__(self, count: int, last_valid: bool = True) -> None:
        self._count = count if last_valid else count + 1  # (answers that fail)
        self._seen = 0

    def __call__(self, text: str) -> str | None:
        self._seen += 1
        return self.NOTE if self._seen <= self._count else None
