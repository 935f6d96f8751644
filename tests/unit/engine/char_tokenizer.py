"""A tokenizer without a vocabulary, for the recorder's tests: prompts are counted again."""

from __future__ import annotations

from collections.abc import Sequence


class CharTokenizer:
    """One token per character: prompts are not built to length, so the recorder counts them."""

    def count(self, text: str) -> int:
        return len(text)

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(map(chr, ids))
