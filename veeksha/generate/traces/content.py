"""Prompts from a trace's own content: dataset text, system messages, replies and token blocks.

Content flavors (``untimed_content_multi_turn``, ``shared_prefix``, ``mooncake``, ``rag``) stage
the ``CONTENT`` columns (``flavor.py``); the canonical table keeps them, ``ContentRows`` carries
them with a piece of sessions, and ``TraceContent.apply`` turns them into what is sent:

* ``text``: the request's prompt is the dataset's text (not corpus words);
* ``system``: a system message before the root's prompt (its tokens count in the prompt);
* ``reply``: with a tokenizer other than the builtin one, the output length is recounted from it
  (the canonical table holds the builtin count, one token per word);
* ``hash_ids``: the prompt starts with one block of ``block_size`` tokens per hash id (the last
  one possibly partial), the block's words a pure function of (seed, pass, hash id). Equal ids
  give identical blocks in every session, so a server's prefix cache sees the trace's sharing;
  a wrapped pass keys its blocks by (pass, id), so its ids never collide with an earlier pass's.

A block is ``block_size`` words of a **vocabulary of one-token words** (``block_vocabulary``),
so it is exactly ``block_size`` tokens of the configured tokenizer, whatever blocks surround it:

* builtin: its own vocabulary (every word one token);
* ``server``: the vocabulary calibrated on the server's ``/tokenize`` at start-up
  (``veeksha.generate.calibration``); each block opens with a *lead word* (one token at a text's
  start too), so the prompt's first block is exact as well;
* ``hf``: the same calibration, run locally on the tokenizer.json (no server involved; ~0.3 s,
  once per run); if fewer than 16 of the candidate words are one token of it, blocks fall
  back to builtin words, whose token counts the tokenizer decides (the prompt length is then
  recounted, and blocks are equal across sessions but not ``block_size`` tokens long).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from veeksha.errors import ConfigurationError
from veeksha.generate.rng import RandomStreams
from veeksha.generate.tokenizer import (
    BUILTIN_VOCABULARY,
    BuiltinTokenizer,
    HfTokenizerAdapter,
    TokenizerLike,
    Vocabulary,
)

__all__ = ["ContentRows", "TraceContent", "block_vocabulary", "word_counts"]

_NAMES = ("text", "system", "reply", "hash_ids")
_CACHED_BLOCKS = 2048
#: one-token words enough for blocks (a block's words are drawn at random: a few dozen distinct
#: words make distinct blocks; prompts need more, calibration.MIN_WORDS)
_MIN_BLOCK_WORDS = 16


def word_counts(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Whitespace-separated words of each string (null: 0), as int64: the builtin token count."""
    import pyarrow.compute as pc

    counts = pc.count_substring_regex(column, r"\S+")
    return pc.cast(pc.fill_null(counts, 0), pa.int64())


@dataclass(slots=True)
class ContentRows:
    """The content columns of consecutive canonical rows (a value is None where absent)."""

    text: list[str | None]
    system: list[str | None]
    reply: list[str | None]
    hash_ids: list[list[int] | None]

    @classmethod
    def of(cls, table: pa.Table) -> ContentRows | None:
        """The content of a row group, or None when it has none (corpus prompts)."""
        if all(table.column(name).null_count == table.num_rows for name in _NAMES):
            return None
        return cls(*(table.column(name).to_pylist() for name in _NAMES))

    def slice(self, lo: int, hi: int) -> ContentRows:
        return ContentRows(
            self.text[lo:hi], self.system[lo:hi], self.reply[lo:hi], self.hash_ids[lo:hi]
        )

    @classmethod
    def merge(cls, parts: list[ContentRows | None], sizes: list[int]) -> ContentRows | None:
        """Consecutive pieces' content as one (pieces without content give Nones)."""
        if all(part is None for part in parts):
            return None
        columns: list[list[Any]] = [[], [], [], []]
        for part, size in zip(parts, sizes, strict=True):
            for column, name in zip(columns, _NAMES, strict=True):
                column.extend([None] * size if part is None else getattr(part, name))
        return cls(*columns)


def block_vocabulary(tokenizer: TokenizerLike) -> tuple[Vocabulary, bool]:
    """The vocabulary hash-id blocks are made of, and whether its words are one token each of
    ``tokenizer`` (see module doc)."""
    vocabulary: Vocabulary | None = getattr(tokenizer, "vocabulary", None)
    if vocabulary is not None:  # builtin, calibrated server
        return vocabulary, True
    if isinstance(tokenizer, HfTokenizerAdapter):
        from veeksha.generate.calibration import calibrate

        try:
            return calibrate(tokenizer, min_words=_MIN_BLOCK_WORDS).vocabulary, True
        except ConfigurationError:
            pass
    return BUILTIN_VOCABULARY, False


class TraceContent:
    """Builds the prompts of content rows (see module doc)."""

    def __init__(self, seed: int, tokenizer: TokenizerLike, block_size: int) -> None:
        self.tokenizer = tokenizer
        self.exact = isinstance(tokenizer, BuiltinTokenizer)
        self.block_size = block_size
        self._streams = RandomStreams(seed)
        self._blocks: OrderedDict[tuple[int, int], list[str]] = OrderedDict()
        self._vocabulary: Vocabulary | None = None  # (calibrated at the first block)

    def block(self, p: int, hash_id: int) -> list[str]:
        """The words of hash id ``hash_id``'s block in pass ``p``."""
        key = (p, hash_id)
        words = self._blocks.get(key)
        if words is None:
            if self._vocabulary is None:
                self._vocabulary = block_vocabulary(self.tokenizer)[0]
            vocab, lead = self._vocabulary.words, self._vocabulary.lead
            rng = self._streams.stream("trace_blocks", p, hash_id)
            idx = rng.integers(0, len(vocab), self.block_size).tolist()
            words = list(itemgetter(*idx)(vocab)) if len(idx) > 1 else [vocab[idx[0]]]
            if lead:  # one token at a text's start as well (the prompt's first block)
                words[0] = lead[idx[0] % len(lead)]
            self._blocks[key] = words
            if len(self._blocks) > _CACHED_BLOCKS:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(key)
        return words

    def blocks_text(self, p: int, hash_ids: list[int], tokens: int) -> str:
        """``tokens`` words made of the blocks of ``hash_ids`` (the last one cut short)."""
        parts = []
        left = tokens
        for h in hash_ids:
            if left <= 0:
                break
            words = self.block(p, h)
            parts.append(" ".join(words if left >= len(words) else words[:left]))
            left -= len(words)
        return " ".join(parts)

    def corpus_targets(
        self, content: ContentRows | None, prompt_tokens: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """The token targets of the corpus prompts: 0 for rows whose content replaces them (no
        corpus text is fitted, with a tokenizer that costs a call per fit, only to be dropped)."""
        if content is None:
            return prompt_tokens
        own = [
            t is not None or h is not None
            for t, h in zip(content.text, content.hash_ids, strict=True)
        ]
        return np.where(np.asarray(own, dtype=np.bool_), 0, prompt_tokens)

    def apply(
        self,
        content: ContentRows | None,
        p: int,
        texts: list[str],
        prompt_tokens: list[int],
        output_tokens: list[int],
    ) -> list[str | None]:
        """Replace corpus prompts by the rows' content (in place); returns each row's system
        message (or None)."""
        if content is None:
            return [None] * len(texts)
        count = self.tokenizer.count
        for r, (text, hashes) in enumerate(zip(content.text, content.hash_ids, strict=True)):
            if hashes is not None:
                own = 0 if text is None else len(text.split())
                body = self.blocks_text(p, hashes, prompt_tokens[r] - own)
                texts[r] = body if text is None else f"{body} {text}"
            elif text is not None:
                texts[r] = text
            else:
                continue
            if not self.exact:
                system = content.system[r]
                prompt_tokens[r] = count(texts[r]) + (0 if system is None else count(system))
        if not self.exact:
            for r, reply in enumerate(content.reply):
                if reply is not None:
                    output_tokens[r] = max(1, count(reply))
        return content.system
