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
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from veeksha.errors import ConfigurationError
from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import NodeSpec
from veeksha.generate.tokenizer import (
    BUILTIN_VOCABULARY,
    BuiltinTokenizer,
    HfTokenizerAdapter,
    TokenizerLike,
    Vocabulary,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

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


#: words of a block drawn one by one from the vocabulary: where two blocks first differ. A
#: prefix cache (vLLM's and SGLang's, the simulator's) keys what follows by everything before
#: it, so the rest of the block is made of chunks of words that any block may repeat
_HEAD = 16
_CHUNK = 16  # words of a chunk
_CHUNKS = 4096  # chunks (65,536 words, made once) a block's words after its head come from
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """SplitMix64's finaliser: 64 well-mixed bits of each of ``x`` (wrapping arithmetic)."""
    a, b, c = _SHIFTS
    x = (x ^ (x >> a)) * _MIX1
    x = (x ^ (x >> b)) * _MIX2
    out: NDArray[np.uint64] = x ^ (x >> c)
    return out


@dataclass(slots=True)
class _Block:
    """A block: its head words and the chunks after them; its whole text once made."""

    head: list[str]
    chunks: list[int]
    text: str | None = None


class TraceContent:
    """Builds the prompts of content rows (see module doc)."""

    def __init__(self, seed: int, tokenizer: TokenizerLike, block_size: int) -> None:
        self.tokenizer = tokenizer
        self.exact = isinstance(tokenizer, BuiltinTokenizer)
        self.block_size = block_size
        self._streams = RandomStreams(seed)
        self._blocks: OrderedDict[tuple[int, int], _Block] = OrderedDict()
        self._vocabulary: Vocabulary | None = None  # (calibrated at the first block)
        self._chunk_words: list[list[str]] = []
        self._chunk_text: list[str] = []
        keys = self._streams.stream("trace_blocks").integers(0, 1 << 63, 2).tolist()
        self._key, self._chunk_key = int(keys[0]), int(keys[1])

    def blocks_text(self, p: int, hash_ids: list[int], tokens: int) -> str:
        """``tokens`` words made of the blocks of ``hash_ids`` (the last one cut short)."""
        size = self.block_size
        used = hash_ids[: max(0, -(-tokens // size))]
        parts = []
        left = tokens
        for block in self._made(p, used):
            parts.append(self._text(block, left))
            left -= size
        return " ".join(parts)

    def _made(self, p: int, hash_ids: list[int]) -> list[_Block]:
        """The blocks of ``hash_ids`` in pass ``p``: those not cached made in one go.

        A block's words are a pure function of (seed, pass, id): its ``_HEAD`` first words each
        drawn from the vocabulary, then ``_CHUNK``-word chunks of a table of ``_CHUNKS`` (the
        seed's), each chosen by (seed, pass, id, place); ~20x faster to make than drawing every
        word (a Mooncake request's 20 new blocks took ~1 ms, and a piece of 256 sessions was
        made at once, holding the traffic loop for 100s of ms)."""
        blocks = self._blocks
        missing = sorted({h for h in hash_ids if (p, h) not in blocks})
        if missing:
            self._make(p, missing)
        out = []
        for h in hash_ids:
            key = (p, h)
            blocks.move_to_end(key)
            out.append(blocks[key])
        while len(blocks) > max(_CACHED_BLOCKS, len(hash_ids)):
            blocks.popitem(last=False)
        return out

    def _make(self, p: int, hash_ids: list[int]) -> None:
        if self._vocabulary is None:
            self._vocabulary = block_vocabulary(self.tokenizer)[0]
        vocab, lead = self._vocabulary.words, self._vocabulary.lead
        if not self._chunk_text:
            draws = _mix(np.arange(_CHUNKS * _CHUNK, dtype=np.uint64) + np.uint64(self._chunk_key))
            index = (draws % np.uint64(len(vocab))).reshape(_CHUNKS, _CHUNK).tolist()
            self._chunk_words = [[vocab[i] for i in row] for row in index]
            self._chunk_text = [" ".join(words) for words in self._chunk_words]
        head = min(_HEAD, self.block_size)
        places = head + -(-(self.block_size - head) // _CHUNK)
        pass_key = int(_mix(np.array([p], dtype=np.uint64))[0]) ^ self._key
        ids = _mix(np.asarray(hash_ids, dtype=np.uint64) * _GOLDEN ^ np.uint64(pass_key))
        draws = _mix(ids[:, None] + np.arange(1, places + 1, dtype=np.uint64)[None, :] * _GOLDEN)
        words_of = (draws[:, :head] % np.uint64(len(vocab))).tolist()
        chunks_of = (draws[:, head:] % np.uint64(_CHUNKS)).tolist()
        blocks = self._blocks
        for h, index, chunks in zip(hash_ids, words_of, chunks_of, strict=True):
            words = [vocab[i] for i in index]
            if lead:  # one token at a text's start as well (the prompt's first block)
                words[0] = lead[index[0] % len(lead)]
            blocks[(p, h)] = _Block(words, chunks)

    def _text(self, block: _Block, words: int) -> str:
        """The first ``words`` words of ``block`` (all of it: its text, kept)."""
        whole = words >= self.block_size
        if whole and block.text is not None:
            return block.text
        words = min(words, self.block_size)
        head = block.head
        if words <= len(head):
            text = " ".join(head[:words])
        else:
            full, rest = divmod(words - len(head), _CHUNK)
            parts = head + [self._chunk_text[c] for c in block.chunks[:full]]
            if rest:
                parts += self._chunk_words[block.chunks[full]][:rest]
            text = " ".join(parts)
        if whole:
            block.text = text
        return text

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
        texts: list[str],
        prompt_tokens: list[int],
        output_tokens: list[int],
        rows: list[int] | None = None,
    ) -> tuple[list[str | None], list[int]]:
        """Replace corpus prompts by the rows' text (in place); returns each row's system
        message (or None) and the rows whose prompts are hash-id blocks, left to
        ``blocks_prompt`` (made when their session is, not a piece of sessions at once).
        ``rows``: only those rows (the ones whose client's tokenizer this is); None: all."""
        if content is None:
            return [None] * len(texts), []
        count = self.tokenizer.count
        blocks = []
        every = range(len(texts)) if rows is None else rows
        text_of, hashes_of, system_of = content.text, content.hash_ids, content.system
        for r in every:
            text = text_of[r]
            if hashes_of[r] is not None:
                blocks.append(r)
                continue
            if text is None:
                continue
            texts[r] = text
            if not self.exact:
                system = system_of[r]
                prompt_tokens[r] = count(text) + (0 if system is None else count(system))
        if not self.exact:
            replies = content.reply
            for r in every:
                reply = replies[r]
                if reply is not None:
                    output_tokens[r] = max(1, count(reply))
        return content.system, blocks

    def blocks_prompt(self, node: NodeSpec, p: int, hash_ids: list[int], text: str | None) -> None:
        """Give ``node`` (a row of ``hash_ids`` blocks, ``node.prompt_tokens`` long, then its own
        ``text`` if any) its prompt, blocks of pass ``p``."""
        own = 0 if text is None else len(text.split())
        body = self.blocks_text(p, hash_ids, node.prompt_tokens - own)
        node.prompt = body if text is None else f"{body} {text}"
        if not self.exact:
            count = self.tokenizer.count
            system = node.system
            node.prompt_tokens = count(node.prompt) + (0 if system is None else count(system))
