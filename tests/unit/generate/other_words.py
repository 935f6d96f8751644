"""A tokenizer of another vocabulary than veeksha's builtin one, for the per-client tests."""

from __future__ import annotations

from collections.abc import Sequence

from veeksha.generate.tokenizer import Vocabulary


class OtherWords:
    """A tokenizer of another vocabulary than the builtin one (one token a word, as a
    calibrated server tokenizer is for its words): ``xq0`` … ``xq1999``."""

    name = "other"
    vocabulary = Vocabulary(tuple(f"xq{i}" for i in range(2000)))

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        return [int(word[2:]) for word in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(f"xq{i}" for i in ids)
