"""The ``rag`` flavor: questions over a few documents, each document warmed up first.

Columns: ``doc_id`` (the retrieved document), ``prompt_text`` (the question, sent as written),
``input_length`` (the document's tokens), ``output_length``; optional ``timestamp`` (seconds).
Each row is a session of one request whose prompt is the document (blocks of ``block_size``
tokens, a pure function of the document and the seed, identical in every request of that
document, so a prefix cache sees it) followed by the question.

Only the ``num_documents`` most frequent documents are replayed (ties: the first seen first);
rows of other documents are left out and **counted in run.log** with their first lines (the
public veeksha project drops them silently). Before the rows, one warm-up request per replayed
document (its text alone, as long as its longest ``input_length``, so it holds every row's
document; 1 output token; none for a document of 0 tokens in every row) fills the server's
cache (with ``client_selection`` over several clients, one per document and client: the
questions of a document go to each of them); these sessions are the
run's warmup phase (rows with ``phase = warmup``, not in the metrics), arrive first (with the
trace scheduler, together, ``WARMUP_LEAD_S`` = 1 trace second before the first row) and are
added to ``runtime.warmup_sessions``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.content import word_counts
from veeksha.generate.traces.flavor import TraceFlavor, check_lengths
from veeksha.generate.traces.reader import LINE, Field, read_batches

__all__ = ["RagFlavor"]

_DOC_STRIDE = 1 << 24  # block ids of document d: d * _DOC_STRIDE + block
_HASH_IDS = pa.list_(pa.int64())
#: trace seconds between the warm-ups and the first row (their prefill is done before it)
WARMUP_LEAD_S = 1.0


class RagFlavor(TraceFlavor):
    """Document questions (see module doc)."""

    name = "rag"
    warms_up = True
    fields: ClassVar = (
        Field("doc_id", str, required=True),
        Field("prompt_text", str, required=True),
        Field("input_length", int, required=True),
        Field("output_length", int, required=True),
        Field("timestamp", float, aliases=("arrival_time",)),
    )

    def __init__(self, path: Any, settings: Any = None) -> None:
        super().__init__(path, settings)
        self.block_size = int(getattr(settings, "block_size", 512))
        self.num_documents = int(getattr(settings, "num_documents", 16))
        #: doc -> (rank, tokens of its warm-up, its first line)
        self._docs: dict[str, tuple[int, int, int]] | None = None
        self._left_out = 0

    def _choose(self) -> dict[str, tuple[int, int, int]]:
        """The most frequent documents: a first pass over the file (doc_id and lengths only)."""
        counts: Counter[str] = Counter()
        first: dict[str, tuple[int, int]] = {}  # doc -> (its longest input_length, first line)
        for batch in read_batches(self.path, self.fields):
            for doc, tokens, line in zip(
                batch.column("doc_id").to_pylist(),
                batch.column("input_length").to_pylist(),
                batch.column(LINE).to_pylist(),
                strict=True,
            ):
                counts[doc] += 1
                longest, at = first.setdefault(doc, (tokens, line))
                if tokens > longest:
                    first[doc] = (tokens, at)
        order = sorted(counts, key=lambda d: (-counts[d], first[d][1]))[: self.num_documents]
        left_out = sum(counts.values()) - sum(counts[d] for d in order)
        if left_out:
            self.dropped["other_documents"] = left_out
            self.dropped_why["other_documents"] = (
                f"rows of {len(counts) - len(order)} document(s) beyond the {len(order)} most"
                " frequent (num_documents)"
            )
        # (a document of 0 tokens in every row has nothing to cache: no warm-up)
        warmed = sum(1 for d in order if first[d][0] > 0)
        self.warmup_sessions = warmed * len(self.warmup_clients or (None,))
        return {d: (rank, *first[d]) for rank, d in enumerate(order)}

    def _ids(self, rank: int, tokens: int) -> list[int]:
        blocks = max(1, -(-tokens // self.block_size))
        return [rank * _DOC_STRIDE + j for j in range(blocks)]

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        check_lengths(self, batch, ("input_length", "output_length"))
        warm = self._docs is None
        if self._docs is None:
            self._docs = self._choose()
        docs = self._docs
        keep = pc.is_in(batch.column("doc_id"), pa.array(list(docs), pa.string()))
        if "other_documents" in self.dropped:
            left = batch.column(LINE).filter(pc.invert(keep)).to_pylist()
            self.note_lines("other_documents", left)
        batch = batch.filter(keep)
        text = batch.column("prompt_text")
        lengths = batch.column("input_length").to_pylist()
        hashes = [
            self._ids(docs[d][0], n)
            for d, n in zip(batch.column("doc_id").to_pylist(), lengths, strict=True)
        ]
        columns: dict[str, list[Any]] = {
            "line": batch.column(LINE).to_pylist(),
            "ts": pc.cast(batch.column("timestamp"), pa.float64()).to_pylist(),
            "prompt_tokens": pc.add(batch.column("input_length"), word_counts(text)).to_pylist(),
            "output_tokens": batch.column("output_length").to_pylist(),
            "text": text.to_pylist(),
            "hash_ids": hashes,
        }
        spread = self.warmup_clients is not None  # (the rows' clients are chosen later)
        if spread:
            columns["client"] = [None] * len(columns["line"])
        if warm:
            first_ts = columns["ts"][0] if columns["ts"] else None
            start = None if first_ts is None else first_ts - WARMUP_LEAD_S
            # one warm-up per document and client: a document's questions go to every client
            targets: list[str | None] = [None]
            if self.warmup_clients is not None:
                targets = [*self.warmup_clients]
            ordered = [
                (*doc, client)
                for doc in sorted(v for v in docs.values() if v[1] > 0)
                for client in targets
            ]
            warmups: dict[str, list[Any]] = {
                "line": [line for _, _, line, _ in ordered],
                "ts": [start] * len(ordered),
                "prompt_tokens": [tokens for _, tokens, _, _ in ordered],
                "output_tokens": [1] * len(ordered),
                "text": [None] * len(ordered),
                "hash_ids": [self._ids(rank, tokens) for rank, tokens, _, _ in ordered],
                "client": [client for _, _, _, client in ordered],
            }
            columns = {k: warmups[k] + columns[k] for k in columns}
        n = len(columns["line"])
        arrays = [
            pa.array(columns["line"], pa.int64()),
            pa.nulls(n, pa.string()),
            pa.array(columns["ts"], pa.float64()),
            pa.array(columns["prompt_tokens"], pa.int64()),
            pa.array(columns["output_tokens"], pa.int64()),
            pa.array(columns["text"], pa.string()),
            pa.array(columns["hash_ids"], _HASH_IDS),
        ]
        names = ["line", "group", "ts", "prompt_tokens", "output_tokens", "text", "hash_ids"]
        if spread:
            arrays.append(pa.array(columns["client"], pa.string()))
            names.append("client")
        return pa.RecordBatch.from_arrays(arrays, names=names)
