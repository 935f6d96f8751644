"""The text channel: prompt bodies of a target token count, and the shared prefix.

Words come from the tokenizer's ``Vocabulary`` (``veeksha.generate.tokenizer``): words that are
one token each, so a text of n of them is n tokens. The builtin tokenizer's is the builtin word
list; a server tokenizer's is calibrated against the server at start-up
(``veeksha.generate.calibration``); other tokenizers (hf) use the builtin words and re-count.
Vocabulary:

* **corpus**: a fixed random sequence of ``CORPUS_WORDS`` vocabulary words, drawn once per seed
  from the ``content`` stream (sub-key ``"corpus"``) and stored twice over so any window of up to
  ``CORPUS_WORDS`` words is one string slice. Bodies are cut from it, so building a prompt costs
  O(1) string slices, not one Python operation per word.
* **body**: a request's new user message: a window of ``n`` corpus words at a uniform offset.
  A root's body is a *head* window of up to ``HEAD_WORDS`` words and a *tail* window of the
  rest, at two independent offsets: two roots start identically only if both offsets collide
  (≈ 1 in 2^38), so sessions do not share KV-cache prefixes by accident. (A non-root's body
  follows its own session's history, so one window suffices.)
* **shared prefix**: ``shared_prefix_count`` word sequences per scenario (sub-key
  ``"shared_prefix"``, and the prefix's number after the first). A root request uses one with
  ``shared_prefix_probability``, each prefix as likely (the coin's own uniform picks it): the
  first ``floor(shared_prefix_ratio × n)`` tokens of its body, or ``min(shared_prefix_tokens,
  n)``, are that prefix's first tokens (recorded as ``shared_prefix_tokens``). Non-root nodes
  never use one (their history already differs).
* **lead word**: when the vocabulary names the words that are one token at a text's start
  (``Vocabulary.lead``), every body and the shared prefix open with one of them: every
  ``LEAD_STRIDE``-th corpus word is a lead word (the drawn word ``w`` replaced by
  ``lead[w % len(lead)]``) and body windows start at those positions only (the drawn offset
  rounded down), so bodies stay O(1) slices (and two roots start alike ≈ 1 in 2^34).

With a vocabulary (builtin, calibrated server) every body has exactly its target count, by
construction. With a tokenizer without one (hf) the words are re-counted and the body trimmed or
padded until it has the target count, or as close as a few rounds get (merges at the seams can
shift a token).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from veeksha.generate.rng import RandomStreams
from veeksha.generate.tokenizer import (
    BUILTIN_VOCAB,
    BUILTIN_VOCABULARY,
    TokenizerLike,
    Vocabulary,
)
from veeksha.scenario.models import TextChannel

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "CORPUS_WORDS",
    "HEAD_WORDS",
    "LEAD_STRIDE",
    "ClientPrompts",
    "PromptBuilder",
    "random_words",
]

CORPUS_WORDS = 1 << 19
HEAD_WORDS = 4
LEAD_STRIDE = 16
_PREFIX_CHUNK = 4096
_FIT_ROUNDS = 8


def random_words(rng: np.random.Generator, n: int) -> str:
    """``n`` uniformly drawn vocabulary words joined by single spaces."""
    if n <= 0:
        return ""
    idx = rng.integers(0, len(BUILTIN_VOCAB), n).tolist()
    if n == 1:
        return BUILTIN_VOCAB[idx[0]]
    return " ".join(itemgetter(*idx)(BUILTIN_VOCAB))


def _word_starts(words: tuple[str, ...] | list[str]) -> NDArray[np.int64]:
    """Char offset of each word in ``" ".join(words)``, plus a sentinel ``len + 1``."""
    starts = np.zeros(len(words) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, words), np.int64, len(words)) + 1, out=starts[1:])
    return starts


@lru_cache(maxsize=4)
def _corpus(seed: int, vocab: Vocabulary) -> tuple[str, NDArray[np.int64]]:
    """The seed's corpus: CORPUS_WORDS random words, twice (so any window wraps without a
    seam), and each word's char offset. Built once per run, before t0: the offsets come from
    the vocabulary's word lengths in numpy, and the text is made once, then doubled."""
    words = vocab.words
    rng = RandomStreams(seed).stream("content", "corpus")
    idx = rng.integers(0, len(words), CORPUS_WORDS)
    if vocab.lead:
        position = {word: i for i, word in enumerate(words)}
        leads = np.array([position[word] for word in vocab.lead], dtype=np.int64)
        idx[::LEAD_STRIDE] = leads[idx[::LEAD_STRIDE] % len(leads)]
    spaced = np.fromiter(map(len, words), np.int32, len(words)) + 1  # (a word and its space)
    n = len(idx)
    starts = np.empty(2 * n + 1, dtype=np.int64)
    starts[0] = 0
    np.cumsum(spaced[idx], dtype=np.int64, out=starts[1 : n + 1])
    np.add(starts[1 : n + 1], starts[n], out=starts[n + 1 :])  # (the second copy's offsets)
    return _joined_twice(words, idx), starts


def _joined_twice(words: tuple[str, ...], idx: NDArray[np.int64]) -> str:
    """``half + " " + half`` where ``half = " ".join(words[i] for i in idx)``. ASCII words
    (the builtin list's): as bytes in numpy, each word and its space a fixed-width record padded
    with NULs, the records picked by ``idx`` in one gather and the padding dropped (a quarter of
    the CPU of joining half a million Python strings), the bytes doubled before they are
    decoded once (every copy of the text made once: ~25 % less memory touched)."""
    joined = "".join(words)  # (one pass in C, not a generator over the words)
    if not joined.isascii() or "\0" in joined:
        half = " ".join(itemgetter(*idx.tolist())(words))
        return half + " " + half
    width = max(map(len, words)) + 1
    records = np.array([f"{word} " for word in words], dtype=f"S{width}")  # (NUL-padded)
    spaced = records[idx].tobytes().replace(b"\0", b"")  # each word and its space
    text = bytearray(spaced)
    text += memoryview(spaced)[:-1]  # (the second copy without its last space)
    return text.decode("ascii")


class _Prefix:
    """One shared prefix as far as it was drawn: its words, their text and offsets, and (for a
    tokenizer without a vocabulary) its token ids."""

    __slots__ = ("ids", "starts", "text", "words")

    def __init__(self) -> None:
        self.words: list[str] = []
        self.text = ""
        self.starts = np.zeros(1, dtype=np.int64)
        self.ids: list[int] = []


class PromptBuilder:
    """Builds prompt bodies for one text channel, tokenizer and seed (see module doc)."""

    def __init__(self, channel: TextChannel, tokenizer: TokenizerLike, seed: int) -> None:
        self.channel = channel
        self.tokenizer = tokenizer
        vocab: Vocabulary | None = getattr(tokenizer, "vocabulary", None)
        self.exact = vocab is not None
        self.vocabulary = vocab or BUILTIN_VOCABULARY
        self._lead = self.vocabulary.lead
        self._streams = RandomStreams(seed)
        self._text, self._starts = _corpus(seed, self.vocabulary)
        self._prefixes: dict[int, _Prefix] = {}  # (each shared prefix, by its number)

    # ---------------------------------------------------------------------------- shared prefix

    def _grow_prefix(self, prefix: _Prefix, number: int, words: int) -> None:
        while len(prefix.words) < words:
            chunk = len(prefix.words) // _PREFIX_CHUNK
            # (prefix 0's stream is the one the single shared prefix always had)
            key = ("shared_prefix", chunk) if number == 0 else ("shared_prefix", number, chunk)
            rng = self._streams.stream("content", *key)
            vocab = self.vocabulary.words
            idx = rng.integers(0, len(vocab), _PREFIX_CHUNK).tolist()
            prefix.words.extend(itemgetter(*idx)(vocab))
            if self._lead and chunk == 0:
                prefix.words[0] = self._lead[number % len(self._lead)]
        prefix.text = " ".join(prefix.words)
        prefix.starts = _word_starts(prefix.words)

    def shared_prefix(self, tokens: int, number: int = 0) -> str:
        """The first ``tokens`` tokens of the scenario's shared prefix ``number`` (of
        ``shared_prefix_count``; each is its own word sequence)."""
        if tokens <= 0:
            return ""
        prefix = self._prefixes.setdefault(number, _Prefix())
        if self.exact:
            if len(prefix.words) < tokens:
                self._grow_prefix(prefix, number, tokens)
            return prefix.text[: int(prefix.starts[tokens]) - 1]
        while len(prefix.ids) < tokens:
            self._grow_prefix(prefix, number, len(prefix.words) + _PREFIX_CHUNK)
            prefix.ids = self.tokenizer.encode(prefix.text)
        return self.tokenizer.decode(prefix.ids[:tokens])

    # -------------------------------------------------------------------------------- bodies

    def _window(self, offset: int, words: int) -> str:
        """``words`` corpus words from ``offset`` (wrapping around the corpus as needed)."""
        text, starts = self._text, self._starts
        parts = []
        while words > 0:
            take = min(words, CORPUS_WORDS)
            parts.append(text[int(starts[offset]) : int(starts[offset + take]) - 1])
            words -= take
        return " ".join(parts)

    def build(
        self, targets: NDArray[np.int64], roots: NDArray[np.bool_], rng: np.random.Generator
    ) -> tuple[list[str], list[int]]:
        """Bodies for nodes with the given token targets; ``roots`` marks root requests.

        Draws 3 uniforms per node from ``rng`` (prefix coin, head and tail offsets), whatever the
        targets, so changing lengths or the prefix settings never shifts other draws.
        Returns the texts and each node's ``shared_prefix_tokens``.
        """
        return self.build_drawn(targets, roots, rng.random((3, len(targets))))

    def build_drawn(
        self, targets: NDArray[np.int64], roots: NDArray[np.bool_], u: NDArray[np.float64]
    ) -> tuple[list[str], list[int]]:
        """``build`` with its 3 uniforms per node already drawn (``u``: shape (3, n))."""
        n = len(targets)
        ch = self.channel
        prefix_tokens = np.zeros(n, dtype=np.int64)
        numbers = np.zeros(n, dtype=np.int64)  # (which shared prefix each one opens with)
        if ch.shared_prefix_ratio > 0 or ch.shared_prefix_tokens:
            chance = ch.shared_prefix_probability
            use = roots & (u[0] < chance)
            if ch.shared_prefix_tokens:
                prefix_tokens[use] = np.minimum(targets[use], ch.shared_prefix_tokens)
            else:
                share = np.floor(ch.shared_prefix_ratio * targets[use])
                prefix_tokens[use] = share.astype(np.int64)
            if ch.shared_prefix_count > 1:  # (the coin's own uniform, below the chance: even)
                drawn = (u[0][use] / chance * ch.shared_prefix_count).astype(np.int64)
                numbers[use] = np.minimum(drawn, ch.shared_prefix_count - 1)
        rest = np.maximum(targets - prefix_tokens, 0)
        # roots: a head window and a tail window; others: one window (their history differs)
        head = np.where(roots, np.minimum(rest, HEAD_WORDS), rest)
        np.minimum(head, CORPUS_WORDS, out=head)
        tail = rest - head
        a = (u[1] * CORPUS_WORDS).astype(np.int64)
        if self._lead:  # a body opens with a lead word (one token at a text's start)
            a -= a % LEAD_STRIDE
        starts = self._starts
        text = self._text
        texts = [
            text[h0:h1]
            for h0, h1 in zip(starts[a].tolist(), (starts[a + head] - 1).tolist(), strict=True)
        ]
        for i in np.flatnonzero(tail).tolist():
            offset = int(u[2, i] * CORPUS_WORDS)
            texts[i] = f"{texts[i]} {self._window(offset, int(tail[i]))}"
        shared = prefix_tokens.tolist()
        for i in np.flatnonzero(prefix_tokens).tolist():
            prefix = self.shared_prefix(shared[i], int(numbers[i]))
            texts[i] = f"{prefix} {texts[i]}" if texts[i] else prefix
        if not self.exact:
            target_list = targets.tolist()
            for i, t in enumerate(texts):
                texts[i] = self._fit(t, target_list[i], int(a[i]))
        return texts, shared

    def _fit(self, text: str, target: int, offset: int) -> str:
        """Trim or pad ``text`` (keeping its start) to ``target`` tokens of the tokenizer."""
        tok = self.tokenizer
        best, best_err = text, None
        pad_at = (offset + HEAD_WORDS) % CORPUS_WORDS
        for _ in range(_FIT_ROUNDS):
            ids = tok.encode(text)
            err = len(ids) - target
            if best_err is None or abs(err) < abs(best_err):
                best, best_err = text, err
            if err == 0:
                break
            if err > 0:
                text = tok.decode(ids[:target])
            else:
                pad = self._window(pad_at, -err)
                pad_at = (pad_at + -err) % CORPUS_WORDS
                text = f"{text} {pad}" if text else pad
        return best


class ClientPrompts:
    """Prompt bodies each sized in the tokenizer of the client its node goes to: one
    ``PromptBuilder`` per distinct tokenizer instance (clients sharing one share its builder).

    A node's body depends only on its own three uniforms (drawn for every node of the call at
    once, as ``PromptBuilder.build`` draws them) and its client's builder, so with one
    tokenizer every body is exactly ``PromptBuilder.build``'s, and with several each client's
    bodies are exact in its own tokens, deterministically per seed.
    """

    def __init__(
        self, channel: TextChannel, tokenizers: Sequence[TokenizerLike], seed: int
    ) -> None:
        builders: dict[int, PromptBuilder] = {}
        #: each client's builder (by client index)
        self.of_client: list[PromptBuilder] = []
        for tokenizer in tokenizers:
            builder = builders.get(id(tokenizer))
            if builder is None:
                builder = builders[id(tokenizer)] = PromptBuilder(channel, tokenizer, seed)
            self.of_client.append(builder)
        self._builders = list(builders.values())
        position = {id(b): i for i, b in enumerate(self._builders)}
        self._group = np.array([position[id(b)] for b in self.of_client], dtype=np.int64)

    @property
    def single(self) -> bool:
        """One tokenizer for every client."""
        return len(self._builders) == 1

    def build(
        self,
        targets: NDArray[np.int64],
        roots: NDArray[np.bool_],
        rng: np.random.Generator,
        clients: NDArray[np.int64] | None = None,
    ) -> tuple[list[str], list[int]]:
        """``PromptBuilder.build`` of each node in its client's builder (``clients``: each
        node's client index; None: every node is client 0's)."""
        if clients is None or self.single:
            return self.of_client[0].build(targets, roots, rng)
        n = len(targets)
        u = rng.random((3, n))
        groups = self._group[clients]
        texts: list[str] = [""] * n
        shared: list[int] = [0] * n
        for g, builder in enumerate(self._builders):
            where = np.flatnonzero(groups == g)
            if where.size == 0:
                continue
            own_texts, own_shared = builder.build_drawn(targets[where], roots[where], u[:, where])
            for i, text, tokens in zip(where.tolist(), own_texts, own_shared, strict=True):
                texts[i] = text
                shared[i] = tokens
        return texts, shared
