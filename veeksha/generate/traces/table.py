"""Random access to a prepared trace's sessions, one row group at a time (bounded memory)."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from veeksha.generate.traces.arrow import numbers
from veeksha.generate.traces.content import ContentRows
from veeksha.generate.traces.prepare import PreparedTrace

__all__ = ["SessionRows", "TraceTable"]


@dataclass(slots=True)
class SessionRows:
    """The rows of consecutive sessions ``[first, first + len(bounds) - 1)`` as columns;
    session ``first + k`` has rows ``bounds[k]:bounds[k + 1]``."""

    first: int
    bounds: np.ndarray
    start: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    parents: list[tuple[int, ...]] | None  # None: every row is a root
    history: list[int | None] | None
    wait: np.ndarray
    content: ContentRows | None = None  # None: prompts come from the corpus
    client: list[str | None] | None = None  # None: every row's client is the first
    priority: list[int | None] | None = None  # None: every row's priority is 0
    tool_latency: list[float | None] | None = None  # None: every row is an LLM request
    reprompts: list[int | None] | None = None  # None: no row was re-prompted
    valid: list[bool | None] | None = None  # None: no row recorded its last answer's validity
    agent: list[str | None] | None = None  # None: no row is an agent_rounds node
    round: list[int | None] | None = None
    transcript: list[list[int] | None] | None = None  # None: history parents' conversations
    ts: np.ndarray | None = None  # each row's own timestamp (NaN: none); None: ``start`` is it
    images: list[list[int] | None] | None = None  # None: no row has images (flat triples)
    abandon_after: list[float | None] | None = None  # None: no row was abandoned by its user


class TraceTable:
    """Reads the canonical table's row groups on demand, keeping the last two decoded."""

    def __init__(self, prepared: PreparedTrace) -> None:
        self.prepared = prepared
        # (read in this thread alone: no Arrow thread pools, which would stay for the process'
        # life, and a sweep's later points could not fork their helpers: veeksha.forked)
        self._file = pq.ParquetFile(prepared.cache, pre_buffer=False)
        self._firsts = prepared.group_sessions
        self._decoded: dict[int, SessionRows] = {}

    @property
    def sessions(self) -> int:
        return self.prepared.sessions

    def starts(self, group: int) -> tuple[int, np.ndarray]:
        """(first session, start time of each session) of row group ``group``."""
        table = self._file.read_row_group(group, columns=["session", "start"], use_threads=False)
        sessions = numbers(table.column("session"), np.int64)
        first = np.flatnonzero(np.diff(sessions, prepend=sessions[0] - 1))
        return int(sessions[0]), numbers(table.column("start"), np.float64, np.nan)[first]

    @property
    def num_groups(self) -> int:
        return len(self._firsts) - 1

    def rows(self, lo: int, hi: int) -> list[SessionRows]:
        """The rows of sessions ``[lo, hi)``, one piece per row group they lie in."""
        pieces = []
        while lo < hi:
            group = bisect_right(self._firsts, lo) - 1
            rows = self._group(group)
            end = min(hi, self._firsts[group + 1])
            a, b = lo - rows.first, end - rows.first
            r0, r1 = int(rows.bounds[a]), int(rows.bounds[b])
            pieces.append(
                SessionRows(
                    lo,
                    rows.bounds[a : b + 1] - r0,
                    rows.start[r0:r1],
                    rows.prompt_tokens[r0:r1],
                    rows.output_tokens[r0:r1],
                    None if rows.parents is None else rows.parents[r0:r1],
                    None if rows.history is None else rows.history[r0:r1],
                    rows.wait[r0:r1],
                    None if rows.content is None else rows.content.slice(r0, r1),
                    None if rows.client is None else rows.client[r0:r1],
                    None if rows.priority is None else rows.priority[r0:r1],
                    None if rows.tool_latency is None else rows.tool_latency[r0:r1],
                    None if rows.reprompts is None else rows.reprompts[r0:r1],
                    None if rows.valid is None else rows.valid[r0:r1],
                    None if rows.agent is None else rows.agent[r0:r1],
                    None if rows.round is None else rows.round[r0:r1],
                    None if rows.transcript is None else rows.transcript[r0:r1],
                    None if rows.ts is None else rows.ts[r0:r1],
                    None if rows.images is None else rows.images[r0:r1],
                    None if rows.abandon_after is None else rows.abandon_after[r0:r1],
                )
            )
            lo = end
        return pieces

    def _group(self, group: int) -> SessionRows:
        rows = self._decoded.get(group)
        if rows is None:
            table = self._file.read_row_group(group, use_threads=False)
            sessions = numbers(table.column("session"), np.int64)
            change = np.flatnonzero(np.diff(sessions)) + 1
            bounds = np.concatenate([[0], change, [len(sessions)]]).astype(np.int64)
            linked = "parents" in table.column_names
            parents_col = table.column("parents").combine_chunks() if linked else None
            rows = SessionRows(
                int(sessions[0]),
                bounds,
                numbers(table.column("start"), np.float64, np.nan),
                numbers(table.column("prompt_tokens"), np.int64),
                numbers(table.column("output_tokens"), np.int64),
                None if parents_col is None else [tuple(p) for p in parents_col.to_pylist()],
                table.column("history").to_pylist() if linked else None,
                numbers(table.column("wait"), np.float64) if linked else np.zeros(len(sessions)),
                ContentRows.of(table),
                _given(table, "client"),
                _given(table, "priority"),
                _given(table, "tool_latency"),
                _given(table, "reprompts"),
                _given(table, "valid"),
                _given(table, "agent"),
                _given(table, "round"),
                _given(table, "transcript"),
                numbers(table.column("ts"), np.float64, np.nan) if linked else None,
                _given(table, "images"),
                _given(table, "abandon_after"),
            )
            if len(self._decoded) >= 2:
                self._decoded.pop(next(iter(self._decoded)))
            self._decoded[group] = rows
        return rows


def _given(table: pa.Table, name: str) -> list[Any] | None:
    """The optional column ``name`` as a list, or None when no row gives it."""
    if name not in table.column_names or table.column(name).null_count == table.num_rows:
        return None
    return table.column(name).to_pylist()
