"""The simulator's ``subword`` tokenizer: deterministic, and unlike veeksha's builtin one.

It is built to behave like the byte-level BPE tokenizers of real models as far as veeksha's
prompts can tell, so the ``server`` tokenizer path is tested for real:

* a text is first cut into *pieces*: a run of lowercase letters with the space before it, if
  any (``" baba"``), a run of other non-space characters (with its space), or whitespace;
* a letter piece that is a *whole word* is one token. Whole words: every two-letter piece, and
  about half of the builtin vocabulary's two-syllable words after a space (``" baba"``, chosen by
  a hash of the word) but only about a quarter at the start of a text or after a newline
  (``"baba"``, chosen independently);
* any other letter piece is split into two-letter tokens (the first carrying the space), a last
  odd letter alone; any other piece into one token per UTF-8 byte.

So a builtin-sized prompt of n words is about 1.5·n tokens here, and a word may be one token in
the middle of a text and two at its start. Ids: 0-255 bytes, then the letter chunks, then the
whole words; ``decode(encode(t)) == t`` for any text.

>>> tok = SubwordTokenizer()
>>> [tok.decode([i]) for i in tok.encode("ba bebe")] in (["ba", " bebe"], ["ba", " be", "be"])
True
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import cache
from string import ascii_lowercase

from veeksha.generate.tokenizer import BUILTIN_VOCAB

__all__ = ["ByteTokenizer", "SubwordTokenizer", "subword_tokenizer"]

_PIECES = re.compile(r" ?[a-z]+| ?[^\sa-z]+|\s+(?!\S)|\s+")


def _whole(word: str, form: str, share: int) -> bool:
    return hashlib.blake2b(f"{form}:{word}".encode(), digest_size=4).digest()[0] % share == 0


class SubwordTokenizer:
    """See the module docstring."""

    name = "subword"

    def __init__(self) -> None:
        texts: list[str] = [chr(b) if b < 128 else "" for b in range(256)]
        chunks = [a + b for a in ascii_lowercase for b in ascii_lowercase] + list(ascii_lowercase)
        texts += chunks + [" " + c for c in chunks]
        for word in BUILTIN_VOCAB:
            if len(word) <= 2:
                continue  # a two-letter chunk already
            if _whole(word, "mid", 2):
                texts.append(" " + word)
            if _whole(word, "start", 4):
                texts.append(word)
        self._texts = texts
        self._ids = {text: i for i, text in enumerate(texts) if i >= 256}

    @property
    def vocab_size(self) -> int:
        return len(self._texts)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        index = self._ids
        for piece in _PIECES.findall(text):
            whole = index.get(piece)
            if whole is not None:
                ids.append(whole)
            elif piece.lstrip(" ").isalpha() and piece.lstrip(" ").islower() and piece.isascii():
                letters = piece.lstrip(" ")
                space = " " if piece[0] == " " else ""
                for k in range(0, len(letters), 2):
                    ids.append(index[(space if k == 0 else "") + letters[k : k + 2]])
            else:
                ids.extend(piece.encode())
        return ids

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        texts = self._texts
        out: list[str] = []
        raw = bytearray()
        for i in ids:
            if 0 <= i < 256:
                raw.append(i)
                continue
            if raw:
                out.append(raw.decode("utf-8", "replace"))
                raw.clear()
            if 256 <= i < len(texts):
                out.append(texts[i])
        if raw:
            out.append(raw.decode("utf-8", "replace"))
        return "".join(out)

    def single_words(self) -> tuple[str, ...]:
        """The builtin words that are one token both after a space and at a text's start (the
        simulator's answers use only these, so an answer of n tokens re-tokenizes to n)."""
        index = self._ids
        return tuple(w for w in BUILTIN_VOCAB if " " + w in index and w in index)


@cache
def subword_tokenizer() -> SubwordTokenizer:
    """The one shared instance (its tables are built once per process)."""
    return SubwordTokenizer()


class ByteTokenizer:
    """Every UTF-8 byte is one token (ids 0-255), as in byte-level models without merges: no
    word of two letters or more is one token, so a vocabulary cannot be calibrated on it."""

    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def count(self, text: str) -> int:
        return len(text.encode())

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", "replace")
