"""A metric's sample with numpy's exact aggregates, held in memory or streamed in passes.

``ArraySample`` holds the values (NaN dropped) and asks numpy. ``StreamedSample`` never holds more
than a chunk and a bounded working set: it reads its values again for each pass (a function
returning a fresh iterator of float64 chunks, e.g. one Parquet column batch by batch) and gives
**the same floats numpy gives on the whole array**:

- ``count``, ``min``, ``max``: one pass;
- ``mean`` and ``std``: numpy sums a contiguous float64 array by pairwise summation (blocks of at
  most 128 values summed with 8 accumulators, larger ranges split in two at a multiple of 8 near
  the middle); the same tree is computed over the stream: the leaf sums chunk by chunk
  (vectorised), then the tree over the leaf sums. ``std`` sums ``(x - mean)²`` the same way.
- quantiles (numpy's ``linear`` method: the virtual index ``(n − 1)·q``, its two neighbouring
  order statistics, interpolated as ``numpy`` does): each order statistic is found by radix
  selection on the values' order-preserving 64-bit keys. A pass counts the keys of a key range in
  65,536 sub-ranges (16 bits); a sub-range holding a wanted rank is refined again if it has more
  than ``budget`` values, else its values are collected in a later pass and sorted (a range of
  width 1 is a single value: no collection). At most ``budget`` values are held at once.

Worked example: 21,000,000 TBC gaps, all 0.0 (a dry run): 4 counting passes narrow the rank of
each percentile to the single key of 0.0; the sums take 2 passes; nothing larger than a chunk and
the 65,536 counters is ever held (the array would be 168 MB).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from veeksha.evaluate.stats import (
    PERCENTILES,
    Floats,
    describe,
    distinct,
    median,
    percentile_key,
    quantiles,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "ArraySample",
    "Chunks",
    "Sample",
    "StreamedSample",
    "percentile_fractions",
    "sample_of",
]

#: A function returning a fresh iterator over the sample's values (float64, NaN allowed).
Chunks = Callable[[], Iterable[Floats]]

_DIGIT = 16
_BINS = 1 << _DIGIT
_SIGN = np.uint64(1 << 63)
_TOP_SHIFT = np.uint64(64 - _DIGIT)
_LEAF = 128  # numpy's PW_BLOCKSIZE


def percentile_fractions(percentiles: Sequence[float]) -> Floats:
    """``q / 100`` exactly as ``np.percentile`` computes it."""
    out: Floats = np.true_divide(np.asarray(percentiles, dtype=np.float64), 100)
    return out


class Sample(Protocol):
    """What the evaluation needs of a metric's sample (NaN never counts)."""

    @property
    def size(self) -> int: ...

    def describe(self) -> dict[str, Any]: ...

    def quantiles(self, fractions: Floats) -> Floats: ...

    def median(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ArraySample:
    """A sample held in memory: numpy computes everything."""

    values: Floats

    @classmethod
    def of(cls, values: Floats) -> ArraySample:
        return cls(values[~np.isnan(values)])

    @property
    def size(self) -> int:
        return int(self.values.size)

    def describe(self) -> dict[str, Any]:
        return describe(self.values)

    def quantiles(self, fractions: Floats) -> Floats:
        out: Floats = quantiles(self.values, fractions)
        return out

    def median(self) -> float:
        return median(self.values)


def sample_of(values: Floats | Sample) -> Sample:
    """``values`` as a sample (an array is wrapped, NaN dropped)."""
    return ArraySample.of(values) if isinstance(values, np.ndarray) else values


class StreamedSample:
    """A sample read in passes (see the module docstring); ``budget`` bounds the values held."""

    def __init__(self, chunks: Chunks, budget: int = 1 << 21) -> None:
        self._chunks = chunks
        self._budget = budget
        count, low, high = 0, math.inf, -math.inf
        top = np.zeros(_BINS, dtype=np.int64)
        for values in self._values():
            count += values.size
            if values.size:
                low, high = min(low, float(values.min())), max(high, float(values.max()))
                top += np.bincount((_keys(values) >> _TOP_SHIFT).astype(np.intp), minlength=_BINS)
        self._count, self._min, self._max = count, low, high
        self._top = top  # the first selection pass, counted here: one pass fewer per selection
        self._found: dict[int, float] = {}  # order statistics already selected, by rank
        self._mean: float | None = None

    def _values(self) -> Iterator[Floats]:
        for chunk in self._chunks():
            values = np.asarray(chunk, dtype=np.float64)
            yield values[~np.isnan(values)]

    @property
    def size(self) -> int:
        return self._count

    def mean(self) -> float:
        if self._mean is None:
            self._mean = _pairwise_total(self._values(), self._count) / self._count
        return self._mean

    def std(self) -> float:
        mean = self.mean()
        squares = ((values - mean) ** 2 for values in self._values())
        return math.sqrt(_pairwise_total(squares, self._count) / self._count)

    def describe(self) -> dict[str, Any]:
        """``veeksha.evaluate.stats.describe`` of the values, computed in passes."""
        if self._count == 0:
            return describe(np.empty(0))
        stats: dict[str, Any] = {"count": self._count, "mean": self.mean()}
        stats |= {"min": self._min, "max": self._max, "std": self.std()}
        quantiles = self.quantiles(percentile_fractions(PERCENTILES))
        for q, v in zip(PERCENTILES, quantiles, strict=True):
            stats[percentile_key(q)] = float(v)
        return stats

    def quantiles(self, fractions: Floats) -> Floats:
        """``np.quantile(values, fractions)`` (linear method)."""
        n = self._count
        if n == 0:
            raise ValueError("quantiles of an empty sample")
        virtual = (n - 1) * np.asarray(fractions, dtype=np.float64)
        previous = np.floor(virtual)
        following = previous + 1
        above = virtual >= n - 1
        previous[above], following[above] = n - 1, n - 1
        below = virtual < 0
        previous[below], following[below] = 0, 0
        lower, upper = previous.astype(np.intp), following.astype(np.intp)
        found = self._order_statistics(np.concatenate([lower, upper]))
        a = np.array([found[int(i)] for i in lower])
        b = np.array([found[int(i)] for i in upper])
        # numpy's _get_gamma after _get_indexes: the index above the last is stored as -1
        gamma = virtual - np.where(above, -1, lower)
        diff = b - a
        out: Floats = np.add(a, diff * gamma)
        np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
        return out

    def median(self) -> float:
        """``np.median``: the middle value, or the mean of the two middle ones."""
        n = self._count
        middle = [n // 2 - 1, n // 2] if n % 2 == 0 else [n // 2]
        found = self._order_statistics(np.array(middle))
        return float(np.mean(np.array([found[i] for i in middle])))

    def _order_statistics(self, ranks: NDArray[np.intp]) -> dict[int, float]:
        """The values at ``ranks``, selecting only those not selected before."""
        wanted = distinct(ranks)  # (np.setdiff1d: numpy.ma)
        missing = wanted[~np.isin(wanted, np.fromiter(self._found, dtype=np.intp))]
        if missing.size:
            self._found |= _order_statistics(
                self._values, self._count, missing, self._budget, self._top
            )
        return self._found


# ------------------------------------------------------------------------- pairwise summation


def _leaf_lengths(n: int, out: list[int]) -> None:
    if n <= _LEAF:
        out.append(n)
        return
    half = n // 2
    half -= half % 8
    _leaf_lengths(half, out)
    _leaf_lengths(n - half, out)


def _combine(n: int, leaves: Iterator[float]) -> float:
    if n <= _LEAF:
        return next(leaves)
    half = n // 2
    half -= half % 8
    return _combine(half, leaves) + _combine(n - half, leaves)


def _leaf_sums(values: Floats, starts: NDArray[np.int64], lengths: NDArray[np.int64]) -> Floats:
    out = np.empty(lengths.size)
    for m in distinct(lengths).tolist():
        which = np.flatnonzero(lengths == m)
        rows = values[starts[which, None] + np.arange(m)]
        if m < 8:
            total = np.zeros(which.size)
            for j in range(m):
                total += rows[:, j]
        else:
            acc = rows[:, :8].copy()
            end = m - m % 8
            for j in range(8, end, 8):
                acc += rows[:, j : j + 8]
            total = ((acc[:, 0] + acc[:, 1]) + (acc[:, 2] + acc[:, 3])) + (
                (acc[:, 4] + acc[:, 5]) + (acc[:, 6] + acc[:, 7])
            )
            for j in range(end, m):
                total += rows[:, j]
        out[which] = total
    return out


def _pairwise_total(chunks: Iterable[Floats], n: int) -> float:
    """``np.add.reduce`` of the concatenated chunks (``n`` values in all)."""
    if n == 0:
        return 0.0
    lengths_list: list[int] = []
    _leaf_lengths(n, lengths_list)
    lengths = np.array(lengths_list, dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    sums = np.empty(lengths.size)
    pending: Floats = np.empty(0)
    offset = done = 0  # offset: position of pending[0] in the whole sample
    for chunk in chunks:
        pending = np.concatenate([pending, chunk]) if pending.size else chunk
        stop = int(np.searchsorted(ends, offset + pending.size, side="right"))
        if stop > done:
            sums[done:stop] = _leaf_sums(pending, starts[done:stop] - offset, lengths[done:stop])
            cut = int(ends[stop - 1]) - offset
            pending, offset, done = pending[cut:], offset + cut, stop
    if done != lengths.size:
        raise ValueError("the sample changed between two passes")
    return 0.0 + _combine(n, iter(sums.tolist()))


# ----------------------------------------------------------------------------- radix selection


def _keys(values: Floats) -> NDArray[np.uint64]:
    """Order-preserving unsigned keys of float64 values (negative: all bits flipped)."""
    bits = values.view(np.uint64)
    out: NDArray[np.uint64] = np.where(bits >> np.uint64(63), ~bits, bits | _SIGN)
    return out


def _value(key: int) -> float:
    bits = key ^ (1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


@dataclass(frozen=True, slots=True)
class _Range:
    """The keys ``lo .. lo + 2**width − 1``; ``below`` keys of the sample are smaller."""

    lo: int
    width: int
    below: int
    count: int
    ranks: NDArray[np.intp]


def _locate(keys: NDArray[np.uint64], ranges: list[_Range]) -> tuple[NDArray[np.intp], Any]:
    """Per key, the index of the range holding it and whether one does (ranges sorted by lo)."""
    if len(ranges) == 1 and ranges[0].width == 64:
        return np.zeros(keys.size, dtype=np.intp), np.ones(keys.size, dtype=bool)
    los = np.array([r.lo for r in ranges], dtype=np.uint64)
    widths = np.array([r.width for r in ranges], dtype=np.uint64)
    at = np.searchsorted(los, keys, side="right").astype(np.intp) - 1
    inside = at >= 0
    at = np.maximum(at, 0)
    inside &= ((keys - los[at]) >> widths[at]) == 0
    return at, inside


def _order_statistics(
    values: Callable[[], Iterator[Floats]],
    n: int,
    ranks: NDArray[Any],
    budget: int,
    top: NDArray[np.int64] | None = None,
) -> dict[int, float]:
    """The values at 0-based ``ranks`` of the sorted sample, in passes (module docstring).

    ``top``: the first pass's counts (of the keys' top ``_DIGIT`` bits) when already known.
    """
    found: dict[int, float] = {}
    ranks = distinct(np.asarray(ranks, dtype=np.intp))
    refine = [_Range(0, 64, 0, n, ranks)]
    collect: list[_Range] = []
    while refine:
        counts = np.zeros(len(refine) * _BINS, dtype=np.int64)
        if top is not None:
            counts, top = top.copy(), None
            chunks: Iterable[Floats] = ()
        else:
            chunks = values()
        for chunk in chunks:
            keys = _keys(chunk)
            at, inside = _locate(keys, refine)
            keys, at = keys[inside], at[inside]
            shifts = np.array([r.width - _DIGIT for r in refine], dtype=np.uint64)[at]
            los = np.array([r.lo for r in refine], dtype=np.uint64)[at]
            digits = ((keys - los) >> shifts).astype(np.intp)
            counts += np.bincount(at * _BINS + digits, minlength=counts.size)
        refined: list[_Range] = []
        for i, parent in enumerate(refine):
            bins = counts[i * _BINS : (i + 1) * _BINS]
            ends = parent.below + np.cumsum(bins)
            which = np.searchsorted(ends, parent.ranks, side="right")
            width = parent.width - _DIGIT
            for digit in distinct(which).tolist():
                sub = _Range(
                    parent.lo + (digit << width),
                    width,
                    int(ends[digit] - bins[digit]),
                    int(bins[digit]),
                    parent.ranks[which == digit],
                )
                if width == 0:  # a single key: every rank in it is that value
                    found.update(dict.fromkeys(sub.ranks.tolist(), _value(sub.lo)))
                elif sub.count > budget:
                    refined.append(sub)
                else:
                    collect.append(sub)
        refine = refined
    collect.sort(key=lambda r: r.lo)
    for group in _groups(collect, budget):
        parts = []
        for chunk in values():
            keys = _keys(chunk)
            parts.append(keys[_locate(keys, group)[1]])
        ordered = np.sort(np.concatenate(parts))
        offset = 0
        for r in group:
            for rank in r.ranks.tolist():
                found[rank] = _value(int(ordered[offset + rank - r.below]))
            offset += r.count
    return found


def _groups(ranges: list[_Range], budget: int) -> Iterator[list[_Range]]:
    group: list[_Range] = []
    held = 0
    for r in ranges:
        if group and held + r.count > budget:
            yield group
            group, held = [], 0
        group.append(r)
        held += r.count
    if group:
        yield group
