"""Calibration of a vocabulary on a server's tokenizer: pure logic, against in-process fake
tokenizers that behave like the real kinds (a BOS, words split in two, a start-of-text form,
a word whose count depends on its neighbour), and the cache."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from veeksha.errors import ConfigurationError
from veeksha.generate.calibration import (
    BATCH_WORDS,
    LEAD_WORDS,
    CalibratedTokenizer,
    Calibration,
    TokenizerCache,
    calibrate,
    calibrated_tokenizer,
)
from veeksha.generate.content import PromptBuilder
from veeksha.generate.rng import RandomStreams
from veeksha.generate.tokenizer import BUILTIN_VOCAB
from veeksha.scenario.models import TextChannel

_PIECES = re.compile(r" ?[a-z]+| ?[^\sa-z]+|\s+(?!\S)|\s+")


class FakeTokenizer:
    """A whitespace-pre-tokenizing tokenizer: one token a piece, except ``split`` words (two
    tokens after a space), ``start_split`` words (two tokens without a space before them),
    ``context`` words (two tokens unless right after their candidate-order predecessor) and
    ``split_separators`` (two tokens). ``bos`` opens every text with a special token."""

    def __init__(
        self,
        split: frozenset[str] = frozenset(),
        start_split: frozenset[str] = frozenset(),
        context: frozenset[str] = frozenset(),
        split_separators: frozenset[str] = frozenset(),
        bos: bool = False,
    ) -> None:
        self.split, self.start_split, self.context = split, start_split, context
        self.split_separators, self.bos = split_separators, bos
        self.texts: list[str] = [""]  # id 0: the BOS, whose text is empty
        self.ids: dict[str, int] = {}
        self.calls = 0
        self._before = {w: BUILTIN_VOCAB[i - 1] for i, w in enumerate(BUILTIN_VOCAB) if i}

    def _id(self, text: str) -> int:
        if text not in self.ids:
            self.ids[text] = len(self.texts)
            self.texts.append(text)
        return self.ids[text]

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        out = [0] if self.bos else []
        previous = ""
        for piece in _PIECES.findall(text):
            word = piece.strip()
            spaced = piece.startswith(" ")
            two = (
                (spaced and word in self.split)
                or (not spaced and word in self.start_split)
                or (word in self.context and previous != self._before.get(word))
            )
            if piece in self.split_separators:
                out += [self._id(piece), self._id("\u200b")]
            elif two:
                out += [self._id(piece[:-1]), self._id(piece[-1])]
            else:
                out.append(self._id(piece))
            previous = word
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.texts[i] for i in ids)

    def count(self, text: str) -> int:
        return len(self.encode(text)) - (1 if self.bos else 0)


def test_one_token_words_are_kept_the_others_dropped() -> None:
    split = frozenset(BUILTIN_VOCAB[100:4000])
    fake = FakeTokenizer(split=split)
    calibration = calibrate(fake)
    assert set(calibration.words) == set(BUILTIN_VOCAB) - split
    assert list(calibration.words) == [w for w in BUILTIN_VOCAB if w not in split]  # (order)
    assert [fake.texts[i] for i in calibration.ids] == [" " + w for w in calibration.words]
    assert calibration.overhead == 0
    assert calibration.lead == BUILTIN_VOCAB[:LEAD_WORDS]
    batches = -(-len(BUILTIN_VOCAB) // BATCH_WORDS)
    assert calibration.calls == fake.calls + 1 + batches  # (the /detokenize calls)
    # the overhead, the separator, the words' batches, their verification, the lead words
    assert fake.calls == 1 + 1 + batches + -(-len(calibration.words) // BATCH_WORDS) + LEAD_WORDS


def test_a_bos_is_measured_and_removed_from_every_count() -> None:
    calibration = calibrate(FakeTokenizer(bos=True))
    assert calibration.overhead == 1
    assert len(calibration.words) == len(BUILTIN_VOCAB)


def test_lead_words_are_one_token_at_a_texts_start() -> None:
    start_split = frozenset(BUILTIN_VOCAB[:5])
    calibration = calibrate(FakeTokenizer(start_split=start_split))
    assert len(calibration.words) == len(BUILTIN_VOCAB)  # (after a space they are one token)
    assert calibration.lead == BUILTIN_VOCAB[5 : 5 + LEAD_WORDS]


def test_a_word_whose_count_depends_on_its_neighbour_is_found_and_dropped() -> None:
    """One token where the candidates are listed, two elsewhere: only the additivity check,
    on the words in another order, can see it."""
    context = frozenset({"bebe", "zuzu", "koko"})
    fake = FakeTokenizer(context=context)
    calibration = calibrate(fake)
    assert set(BUILTIN_VOCAB) - set(calibration.words) == context
    # ~70 calls, plus the halving (2·log2(512) calls an offender) and one more verifying round
    assert calibration.calls <= 70 + 3 * 2 * 9 + 16


def test_the_separator_falls_back_and_none_is_an_error() -> None:
    calibration = calibrate(FakeTokenizer(split_separators=frozenset({"\n"})))
    assert len(calibration.words) == len(BUILTIN_VOCAB)
    with pytest.raises(ConfigurationError, match=r"none of '\\n', '\|', '#' is one token"):
        calibrate(FakeTokenizer(split_separators=frozenset({"\n", "|", "#"})))


def test_too_few_words_is_a_configuration_error_naming_what_to_use() -> None:
    split = frozenset(w for w in BUILTIN_VOCAB if len(w) > 2)  # only the 90 syllables stay
    assert len(calibrate(FakeTokenizer(split=split), min_words=64).words) == 90
    with pytest.raises(ConfigurationError) as info:
        calibrate(FakeTokenizer(split=split), min_words=91)
    message = str(info.value)
    assert "only 90 of 8190 candidate words are one token" in message
    assert "at least 91" in message
    assert "use client.tokenizer type hf" in message


def test_prompts_built_from_a_calibration_are_exact_in_the_servers_tokens() -> None:
    """Bodies (and a shared prefix) from the calibrated words open with a lead word, so even a
    tokenizer whose start-of-text form differs counts each exactly at its target."""
    fake = FakeTokenizer(
        split=frozenset(BUILTIN_VOCAB[200:3000]),
        start_split=frozenset(BUILTIN_VOCAB[:10]) | frozenset(BUILTIN_VOCAB[3000:]),
        bos=True,
    )
    tokenizer = CalibratedTokenizer(calibrate(fake), fake, [1, 2])
    channel = TextChannel(shared_prefix_ratio=0.5, shared_prefix_probability=0.5)
    builder = PromptBuilder(channel, tokenizer, seed=3)
    assert builder.exact
    targets = np.arange(1, 400, 7, dtype=np.int64)
    roots = np.arange(targets.size) % 2 == 0
    texts, shared = builder.build(targets, roots, RandomStreams(3).stream("content", "test"))
    assert any(shared)
    assert [fake.count(t) for t in texts] == targets.tolist()
    assert [tokenizer.count(t) for t in texts] == targets.tolist()
    again, _ = PromptBuilder(channel, tokenizer, seed=3).build(
        targets, roots, RandomStreams(3).stream("content", "test")
    )
    assert again == texts  # deterministic: same calibration and seed, same prompts


# ------------------------------------------------------------------------------------- the cache


class FakeClient(FakeTokenizer):
    """A server tokenizer client over the fake: endpoint, model, shape and fingerprint."""

    endpoint = "http://127.0.0.1:9/tokenize"
    model = "m"
    format = "vllm"

    def fingerprint(self) -> list[int]:
        return self.encode("fingerprint probe")


def test_the_cache_reuses_a_calibration_while_the_fingerprint_matches(tmp_path: Path) -> None:
    cache = TokenizerCache(tmp_path / "cache")
    client = FakeClient(split=frozenset(BUILTIN_VOCAB[:100]))
    messages: list[str] = []
    first = calibrated_tokenizer(client, cache=cache, log=messages.append)
    assert first.source == "calibrated"
    calls = client.calls
    second = calibrated_tokenizer(client, cache=cache, log=messages.append)
    assert second.source == "cache"
    assert client.calls == calls + 1  # the fingerprint only
    assert second.calibration == first.calibration
    assert any("reused" in m for m in messages)
    # another tokenizer at the same address: another fingerprint, calibrated again
    other = FakeClient(bos=True)
    assert calibrated_tokenizer(other, cache=cache).source == "calibrated"
    assert calibrated_tokenizer(other, cache=cache, use_cache=False).source == "calibrated"


def test_a_broken_or_unwritable_cache_costs_a_calibration_only(tmp_path: Path) -> None:
    cache = TokenizerCache(tmp_path)
    client = FakeClient()
    path = cache.path(client.endpoint, client.model, client.format)
    path.write_text("{not json")
    assert cache.load(path, client.fingerprint(), BUILTIN_VOCAB) is None
    calibration = Calibration(("ba",), (1,), ("ba",), 0, 1, 1)
    assert cache.store(path, [1], BUILTIN_VOCAB, calibration, {}) is None
    assert cache.load(path, [1], BUILTIN_VOCAB) == calibration
    assert cache.load(path, [2], BUILTIN_VOCAB) is None
    assert cache.load(path, [1], BUILTIN_VOCAB[:10]) is None  # other candidates
    blocked = tmp_path / "file"
    blocked.write_text("")
    failed = TokenizerCache(blocked).store(blocked / "x.json", [1], (), calibration, {})
    assert failed is not None
    assert str(blocked) in failed
