"""The simulator's own tokenizers: subword (unlike the builtin one) and bytes."""

from __future__ import annotations

import random

from veeksha.generate.tokenizer import BUILTIN_VOCAB, BuiltinTokenizer
from veeksha.simulator.subword import ByteTokenizer, SubwordTokenizer, subword_tokenizer


def test_any_text_round_trips() -> None:
    tok = subword_tokenizer()
    for text in ("", "ba bebe", " lead\n\nand  trail ", "Naïve café: 12,345 — ok?", "zzzzz"):
        assert tok.decode(tok.encode(text)) == text


def test_it_differs_from_the_builtin_tokenizer() -> None:
    tok = SubwordTokenizer()
    words = random.Random(0).choices(BUILTIN_VOCAB, k=2000)
    text = " ".join(words)
    assert BuiltinTokenizer().count(text) == 2000
    assert 2600 < tok.count(text) < 3400  # about half the words are two tokens
    # a word may be one token after a space and two at a text's start, or the reverse
    mid = {w for w in BUILTIN_VOCAB if tok.count("ba " + w) == 2}
    start = {w for w in BUILTIN_VOCAB if tok.count(w) == 1}
    assert mid - start
    assert start - mid
    assert tok.encode("bebe") == SubwordTokenizer().encode("bebe")  # deterministic


def test_answer_words_are_one_token_wherever_they_stand() -> None:
    tok = subword_tokenizer()
    words = tok.single_words()
    assert len(words) > 500
    text = " ".join(random.Random(1).choices(words, k=300))
    assert tok.count(text) == 300


def test_bytes_are_one_token_each() -> None:
    tok = ByteTokenizer()
    assert tok.encode("ba é") == list("ba é".encode())
    assert tok.decode(tok.encode("ba é")) == "ba é"
    assert tok.count("baba") == 4
