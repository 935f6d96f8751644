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
    TEMPLATE_WORDS,
    CalibratedTokenizer,
    Calibration,
    ChatTemplate,
    TokenizerCache,
    calibrate,
    calibrated_tokenizer,
    measure_chat_template,
    template_of,
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


# ------------------------------------------------------------------------- the chat template


def test_template_of_takes_the_first_excess_and_the_constant_step() -> None:
    # contents of 8, 24 and 40 tokens, counted 17, 43, 69: 9 a prompt, 10 a further turn
    found = template_of([17, 43, 69], [8, 24, 40])
    assert found == ChatTemplate(9, 10, (17, 43, 69), (8, 24, 40))
    assert found.to_json() == {
        "prompt_tokens": 9,
        "turn_tokens": 10,
        "counts": [17, 43, 69],
        "contents": [8, 24, 40],
    }
    assert template_of([8, 24, 40], [8, 24, 40]) == ChatTemplate(0, 0, (8, 24, 40), (8, 24, 40))


def test_template_of_refuses_a_template_that_is_no_constant_a_turn() -> None:
    # (a template that drops an earlier turn's part, or counts the contents short)
    assert template_of([17, 43, 60], [8, 24, 40]) == (
        "the template does not add the same tokens every turn (10 at turn 2, 1 at turn 3)"
    )
    assert "fewer tokens than the messages' contents" in str(template_of([5, 30], [8, 24]))
    with pytest.raises(ValueError, match="two conversations"):
        template_of([17], [8])


class FakeChat:
    """A chat form of a tokenizer: ``opening`` tokens, ``wrap`` tokens around each message,
    ``generation`` tokens at the end; ``system`` adds a default system prompt to the first
    turn only when True (as some templates do with a date). ``refuse``: the reason instead."""

    def __init__(
        self,
        tokenizer: FakeTokenizer,
        opening: int = 1,
        wrap: int = 5,
        generation: int = 3,
        refuse: str | None = None,
        first_only: int = 0,
    ) -> None:
        self.tokenizer, self.opening, self.wrap, self.generation = (
            tokenizer,
            opening,
            wrap,
            generation,
        )
        self.refuse, self.first_only = refuse, first_only
        self.seen: list[list[dict[str, str]]] = []

    def chat_encode(self, messages: Sequence[dict[str, str]]) -> list[int] | str:
        self.seen.append([dict(m) for m in messages])
        if self.refuse is not None:
            return self.refuse
        ids = [0] * self.opening
        for message in messages:
            ids += [0] * self.wrap + self.tokenizer.encode(message["content"])
        ids += [0] * (self.generation + (self.first_only if len(messages) == 1 else 0))
        return ids


def _calibration() -> Calibration:
    return calibrate(FakeTokenizer(split=frozenset(BUILTIN_VOCAB[::3])))


def test_the_chat_template_is_measured_in_the_servers_tokens() -> None:
    calibration = _calibration()
    chat = FakeChat(FakeTokenizer(split=frozenset(BUILTIN_VOCAB[::3])))
    found = measure_chat_template(chat, calibration)
    assert isinstance(found, ChatTemplate)
    assert (found.prompt, found.turn) == (1 + 5 + 3, 5 + 5)
    assert found.contents == (TEMPLATE_WORDS, 3 * TEMPLATE_WORDS, 5 * TEMPLATE_WORDS)
    # the conversations: user; user, assistant, user; and one more turn, of calibrated words
    assert [[m["role"] for m in c] for c in chat.seen] == [
        ["user"],
        ["user", "assistant", "user"],
        ["user", "assistant", "user", "assistant", "user"],
    ]
    words = {w for c in chat.seen for m in c for w in m["content"].split()}
    assert words <= set(calibration.words)
    assert all(m["content"].split()[0] in calibration.lead for c in chat.seen for m in c)


def test_a_refused_or_inconstant_chat_template_is_a_reason_not_a_number() -> None:
    calibration = _calibration()
    tokenizer = FakeTokenizer(split=frozenset(BUILTIN_VOCAB[::3]))
    reason = "its /tokenize refused a chat request (no tokens in the answer)"
    refusing = FakeChat(tokenizer, refuse=reason)
    assert measure_chat_template(refusing, calibration) == reason
    assert len(refusing.seen) == 1  # (the first refusal: nothing more is asked)
    inconstant = measure_chat_template(FakeChat(tokenizer, first_only=4), calibration)
    assert inconstant == (
        "the template does not add the same tokens every turn (6 at turn 2, 10 at turn 3)"
    )
