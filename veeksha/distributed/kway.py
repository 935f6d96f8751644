"""A k-way merge of nearly sorted streams, in bounded memory, into one stable global order.

The merge's streams are the shards' files (their requests, sessions or trace lines) read a batch
at a time. Each row has a *primary key* (a float: ``processed_at``, ``ended_at``,
``dispatched_at``; +inf for a null); the wanted order is a stable sort of the streams' rows
concatenated in stream order by a full key that begins with the primary one (ties broken by
later keys, then by that concatenation order).

Vocabulary:

- *bounds*: read before the merge, one float per scan batch of a stream: the least primary key
  of that batch and of every later one (a suffix minimum). After ``n`` rows of a stream were
  read, no unread row of it has a primary key below ``bound(n)``.
- *frontier*: the least bound of the streams not yet exhausted. Every row of the whole merge
  whose primary key is below the frontier has been read, so the rows read and below it, sorted
  by the full key, come next in the global order: they are a *chunk*, emitted at once. The
  streams whose bound is the frontier read their next batch; the others wait.

A stream written in primary-key order (a shard's requests in the order its main process handled
them, its trace in dispatch order) keeps about one batch read and not emitted. A stream out of
order (a shard's sessions, written when handled, ordered by their end: a few rows apart) keeps
the rows between a row and the earliest later row with a smaller key: the memory grows with a
file's disorder, never with the run. Rows whose primary key is +inf or NaN are emitted once
every stream is exhausted.

Example (primary keys only; stream A: 1, 2, 5, 6 and B: 3, 4, 7, in batches of 2 rows; A's
bounds 1, 5, B's 3, 7): A reads [1, 2], B [3, 4]; the frontier is min(5, 7) = 5: chunk
[1, 2, 3, 4]; A (the stream at the frontier) reads [5, 6], its bound is then +inf; frontier 7:
chunk [5, 6]; B reads [7]; frontier +inf: chunk [7], and both streams are exhausted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["Bounds", "OutOfOrderError", "Rows", "SortedStream", "merge_streams", "primary_bounds"]

T = TypeVar("T")

Keys: TypeAlias = "NDArray[np.float64]"


@dataclass(frozen=True)
class Bounds:
    """A stream's lower bounds on the primary keys of its unread rows (see the module
    docstring): ``ends[i]`` rows in the stream at the end of scan batch ``i``, ``suffix[i]`` the
    least primary key from batch ``i`` on."""

    ends: NDArray[np.int64]
    suffix: Keys

    def after(self, rows_read: int) -> float:
        """The least primary key a row after the first ``rows_read`` can have (+inf: none)."""
        batch = int(np.searchsorted(self.ends, rows_read, side="right"))
        return float(self.suffix[batch]) if batch < self.suffix.size else np.inf


def primary_bounds(batches: Iterator[Keys]) -> Bounds:
    """The bounds of a stream whose primary keys come in ``batches`` (NaN counts as +inf)."""
    ends: list[int] = []
    mins: list[float] = []
    rows = 0
    for keys in batches:
        if not keys.size:
            continue
        rows += keys.size
        ends.append(rows)
        mins.append(float(np.min(np.nan_to_num(keys, nan=np.inf))))
    suffix = np.minimum.accumulate(np.asarray(mins, dtype=np.float64)[::-1])[::-1]
    return Bounds(np.asarray(ends, dtype=np.int64), np.ascontiguousarray(suffix))


@dataclass(frozen=True)
class Rows(Generic[T]):
    """How the merge handles a batch of rows of type ``T`` (an Arrow table, a list)."""

    length: Callable[[T], int]
    concat: Callable[[Sequence[T]], T]
    slice: Callable[[T, int, int], T]  # (rows, start, stop)
    select: Callable[[T, NDArray[np.bool_]], T]  # (rows, mask): the rows where mask, in order
    sort: Callable[[T], T]  # stable, by the full key


class OutOfOrderError(Exception):
    """A stream merged without bounds (assumed in primary-key order) was not in that order."""


@dataclass
class SortedStream(Generic[T]):
    """One stream: its batches (rows and their primary keys, in file order) and its bounds.

    Without ``bounds`` the stream is taken to be in primary-key order (NaN nowhere): the last
    key read bounds the unread ones, and a batch that breaks the order raises
    ``OutOfOrderError`` (the rows emitted so far are then not to be trusted: merge again with
    bounds).
    """

    batches: Iterator[tuple[T, Keys]]
    bounds: Bounds | None
    rows_read: int = 0
    exhausted: bool = False
    _pending: list[tuple[T, Keys]] = field(default_factory=list)
    _last: float = -np.inf

    def bound(self) -> float:
        if self.exhausted:
            return np.inf
        return self._last if self.bounds is None else self.bounds.after(self.rows_read)

    def read(self) -> None:
        """Read the next batch that has rows (or find the stream exhausted)."""
        for rows, keys in self.batches:
            if keys.size:
                if self.bounds is None:
                    self._check_order(keys)
                self._pending.append((rows, keys))
                self.rows_read += keys.size
                return
        self.exhausted = True

    def _check_order(self, keys: Keys) -> None:
        if not (keys[0] >= self._last and bool(np.all(keys[1:] >= keys[:-1]))):
            raise OutOfOrderError(f"rows {self.rows_read}-{self.rows_read + keys.size}")
        self._last = float(keys[-1])

    def take_below(self, frontier: float, ops: Rows[T], *, every: bool) -> T | None:
        """The pending rows whose primary key is below ``frontier`` (``every``: all of them),
        in file order; the others stay pending."""
        if not self._pending:
            return None
        if len(self._pending) == 1:
            rows, keys = self._pending[0]
        else:
            rows = ops.concat([r for r, _ in self._pending])
            keys = np.concatenate([k for _, k in self._pending])
        self._pending = []
        if every:
            return rows
        below = keys < frontier
        count = int(below.sum())
        if count == keys.size:
            return rows
        if count and below[:count].all():  # (in order: a prefix, no copy)
            self._pending = [(ops.slice(rows, count, keys.size), keys[count:])]
            return ops.slice(rows, 0, count)
        if count:
            self._pending = [(ops.select(rows, ~below), keys[~below])]
            return ops.select(rows, below)
        self._pending = [(rows, keys)]
        return None


def merge_streams(
    streams: Sequence[SortedStream[T]], ops: Rows[T], emit: Callable[[T], None]
) -> None:
    """Emit every row of ``streams`` once, chunk after chunk, in the global order (see the
    module docstring); each stream's bounds must hold for its batches."""
    for stream in streams:
        stream.read()
    while True:
        live = [stream for stream in streams if not stream.exhausted]
        frontier = min((stream.bound() for stream in live), default=np.inf)
        parts = []
        for stream in streams:
            part = stream.take_below(frontier, ops, every=not live)
            if part is not None and ops.length(part):
                parts.append(part)
        if parts:
            emit(ops.sort(parts[0] if len(parts) == 1 else ops.concat(parts)))
        if not live:
            return
        for stream in live:
            if stream.bound() <= frontier:
                stream.read()
