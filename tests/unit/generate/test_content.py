"""Prompt bodies: exact builtin counts, shared prefix, hf fitting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from veeksha.generate.content import CORPUS_WORDS, PromptBuilder, _corpus, random_words
from veeksha.generate.rng import RandomStreams
from veeksha.generate.tokenizer import (
    BUILTIN_VOCAB,
    BUILTIN_VOCABULARY,
    BuiltinTokenizer,
    HfTokenizerAdapter,
    Vocabulary,
)
from veeksha.scenario.models import TextChannel

VOCAB = set(BUILTIN_VOCAB)


def build(
    channel: TextChannel, targets: list[int], roots: list[bool], seed: int = 0
) -> tuple[list[str], list[int], PromptBuilder]:
    builder = PromptBuilder(channel, BuiltinTokenizer(), seed)
    texts, shared = builder.build(
        np.array(targets, dtype=np.int64), np.array(roots), np.random.default_rng(seed)
    )
    return texts, shared, builder


def test_builtin_bodies_have_exactly_the_target_count() -> None:
    targets = [0, 1, 2, 3, 4, 5, 9, 64, 1000, 3]
    roots = [True, False] * 5
    texts, shared, _ = build(TextChannel(), targets, roots)
    tok = BuiltinTokenizer()
    assert [tok.count(t) for t in texts] == targets
    assert shared == [0] * len(targets)
    assert all(w in VOCAB for t in texts for w in t.split())
    assert all(t == t.strip() and "  " not in t for t in texts)


def test_bodies_longer_than_the_corpus_wrap_around() -> None:
    n = CORPUS_WORDS + 7
    texts, _, _ = build(TextChannel(), [n, n], [True, False])
    assert [len(t.split()) for t in texts] == [n, n]


def test_root_bodies_differ_and_are_reproducible() -> None:
    a, _, _ = build(TextChannel(), [20] * 50, [True] * 50)
    b, _, _ = build(TextChannel(), [20] * 50, [True] * 50)
    assert a == b
    assert len(set(a)) == 50
    assert len({" ".join(t.split()[:4]) for t in a}) == 50  # distinct heads


def test_shared_prefix_on_roots_only() -> None:
    channel = TextChannel(shared_prefix_ratio=0.5, shared_prefix_probability=1.0)
    targets = [10, 11, 7, 40, 1]
    roots = [True, True, False, True, True]
    texts, shared, builder = build(channel, targets, roots)
    assert shared == [5, 5, 0, 20, 0]
    prefix = builder.shared_prefix(20).split()
    for text, k, n in zip(texts, shared, targets, strict=True):
        words = text.split()
        assert len(words) == n
        assert words[:k] == prefix[:k]
    # the prefix is one global text: same for another builder with the same seed
    assert PromptBuilder(channel, BuiltinTokenizer(), 0).shared_prefix(20).split() == prefix
    assert builder.shared_prefix(5000).split()[:20] == prefix  # grows without changing


def test_several_prefixes_each_opens_its_own_roots_evenly() -> None:
    """``shared_prefix_count`` prefixes (tenants' system prompts): a root opens with one of
    them, each as likely; roots with the same prefix open alike, others differ from the first
    word; ``shared_prefix_tokens`` is the prefix's length in tokens (at most the body)."""
    channel = TextChannel(shared_prefix_tokens=30, shared_prefix_count=3)
    n = 3000
    targets = [100] * (n - 1) + [12]
    texts, shared, builder = build(channel, targets, [True] * n)
    assert shared == [30] * (n - 1) + [12]
    prefixes = [builder.shared_prefix(30, number).split() for number in range(3)]
    assert len({" ".join(p[1:]) for p in prefixes}) == 3  # (three distinct texts)
    which = []
    for text in texts[:-1]:
        head = text.split()[:30]
        (number,) = [k for k, prefix in enumerate(prefixes) if head == prefix]
        which.append(number)
    counts = np.bincount(which, minlength=3)
    assert stats.chisquare(counts).pvalue > 0.001
    assert texts[-1].split() in [p[:12] for p in prefixes]  # (a body shorter than the prefix)
    # the count's draw is the prefix coin's own uniform: the bodies after it are unmoved
    plain = build(TextChannel(shared_prefix_tokens=30), targets, [True] * n)[0]
    assert [t.split()[30:] for t in texts] == [t.split()[30:] for t in plain]


def test_one_prefix_is_the_prefix_it_always_was() -> None:
    ratio = TextChannel(shared_prefix_ratio=0.5)
    texts, _, _ = build(ratio, [10, 40], [True, True])
    again, _, _ = build(ratio.model_copy(update={"shared_prefix_count": 1}), [10, 40], [True] * 2)
    assert texts == again
    tokens = build(TextChannel(shared_prefix_tokens=5), [10, 40], [True, True])
    assert tokens[1] == [5, 5]
    assert [t.split()[:5] for t in tokens[0]] == [t.split()[:5] for t in texts]


def test_full_ratio_makes_the_whole_body_the_prefix() -> None:
    channel = TextChannel(shared_prefix_ratio=1.0)
    texts, shared, builder = build(channel, [12], [True])
    assert shared == [12]
    assert texts[0] == builder.shared_prefix(12)


def test_shared_prefix_probability_is_honoured() -> None:
    channel = TextChannel(shared_prefix_ratio=0.5, shared_prefix_probability=0.3)
    n = 4000
    _, shared, _ = build(channel, [10] * n, [True] * n)
    used = sum(1 for s in shared if s)
    assert stats.binomtest(used, n, 0.3).pvalue > 0.001
    _, none, _ = build(channel.model_copy(update={"shared_prefix_probability": 0.0}), [10], [True])
    assert none == [0]


@pytest.mark.parametrize(
    "vocab",
    [
        BUILTIN_VOCABULARY,
        Vocabulary(("a", "bb", "ccc ", "dddddddd"), lead=("bb",)),  # (a word may end in a space)
        Vocabulary(("é", "x", "ñu")),  # not ASCII: joined as strings
    ],
)
def test_the_corpus_is_its_words_joined(vocab: Vocabulary) -> None:
    # what the corpus was before it was built in numpy: the drawn words joined by spaces
    text, starts = _corpus(7, vocab)
    idx = RandomStreams(7).stream("content", "corpus").integers(0, len(vocab.words), CORPUS_WORDS)
    words = [vocab.words[i] for i in idx.tolist()]
    if vocab.lead:
        for j in range(0, CORPUS_WORDS, 16):
            words[j] = vocab.lead[vocab.words.index(words[j]) % len(vocab.lead)]
    half = " ".join(words)
    assert text == half + " " + half
    assert text[int(starts[5]) : int(starts[8]) - 1] == " ".join(words[5:8])
    assert int(starts[-1]) == len(text) + 1


def test_random_words() -> None:
    rng = np.random.default_rng(0)
    assert random_words(rng, 0) == ""
    assert len(random_words(rng, 1).split()) == 1
    assert all(w in VOCAB for w in random_words(rng, 30).split())


@pytest.mark.parametrize("fixture", ["wordlevel_json", "bpe_json"])
def test_hf_bodies_fit_the_target(fixture: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(fixture)
    tok = HfTokenizerAdapter(str(path))
    channel = TextChannel(shared_prefix_ratio=0.25)
    builder = PromptBuilder(channel, tok, 3)
    targets = np.array([1, 5, 13, 40, 100, 7, 9, 21], dtype=np.int64)
    roots = np.array([True, False] * 4)
    texts, shared = builder.build(targets, roots, np.random.default_rng(3))
    counts = [tok.count(t) for t in texts]
    errors = [abs(c - t) for c, t in zip(counts, targets.tolist(), strict=True)]
    assert max(errors) <= 1
    assert sum(e == 0 for e in errors) >= 6
    prefix = builder.shared_prefix(10)
    assert shared[0] == 0
    assert shared[2] == 3
    assert shared[4] == 25
    assert texts[4].startswith(builder.shared_prefix(25))
    assert tok.count(prefix) in (9, 10, 11)
