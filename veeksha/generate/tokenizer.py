"""Tokenizers: how veeksha counts and builds prompt tokens.

``BuiltinTokenizer`` is deterministic and shipped with veeksha: one token per whitespace-separated
word. Its vocabulary is a fixed list of pronounceable words (two-letter syllables, one or two of
them). The built-in simulator counts with the same tokenizer, so runs against it are exact:
a prompt built from N vocabulary words is N tokens on both sides, and a history of turns joined
with whitespace counts as the sum of its parts.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import cache
from typing import Protocol

__all__ = ["BUILTIN_VOCAB", "BuiltinTokenizer", "TokenizerLike", "builtin_vocab"]

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


class TokenizerLike(Protocol):
    """What veeksha needs of a tokenizer: count, encode and decode text."""

    def count(self, text: str) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@cache
def builtin_vocab() -> tuple[str, ...]:
    """The builtin vocabulary: 90 one-syllable then 8,100 two-syllable words, in a fixed order."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    return tuple(syllables) + tuple(a + b for a in syllables for b in syllables)


BUILTIN_VOCAB = builtin_vocab()
_UNKNOWN_BASE = len(BUILTIN_VOCAB)
_UNKNOWN_SPACE = 1 << 20


class BuiltinTokenizer:
    """One token per whitespace-separated word; ids are vocabulary indices.

    Words outside the vocabulary get a stable id above the vocabulary (crc32 based) and decode
    to ``<unk:ID>``; counting never depends on the vocabulary, only on whitespace.

    >>> tok = BuiltinTokenizer()
    >>> tok.count("ba be bi")
    3
    >>> tok.decode(tok.encode("ba bebe"))
    'ba bebe'
    """

    __slots__ = ("_index",)

    name = "builtin"

    def __init__(self) -> None:
        self._index = {word: i for i, word in enumerate(BUILTIN_VOCAB)}

    @property
    def vocab_size(self) -> int:
        return len(BUILTIN_VOCAB)

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        index = self._index
        return [
            index[w] if w in index else _UNKNOWN_BASE + zlib.crc32(w.encode()) % _UNKNOWN_SPACE
            for w in text.split()
        ]

    def decode(self, ids: Sequence[int]) -> str:
        vocab = BUILTIN_VOCAB
        return " ".join(vocab[i] if 0 <= i < len(vocab) else f"<unk:{i}>" for i in ids)

    def words(self, ids: Sequence[int]) -> str:
        """Text of the given vocabulary indices (taken modulo the vocabulary size)."""
        vocab = BUILTIN_VOCAB
        n = len(vocab)
        return " ".join(vocab[i % n] for i in ids)
