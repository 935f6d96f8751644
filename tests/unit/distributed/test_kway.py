"""The k-way merge of nearly sorted streams: the global order of a stable sort, in chunks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from veeksha.distributed.kway import (
    OutOfOrderError,
    Rows,
    SortedStream,
    merge_streams,
    primary_bounds,
)

Row = tuple[float, int, str]  # (primary key, second key, where it came from)

ROWS: Rows[list[Row]] = Rows(
    length=len,
    concat=lambda parts: [row for part in parts for row in part],
    slice=lambda rows, start, stop: rows[start:stop],
    select=lambda rows, mask: [rows[i] for i in np.flatnonzero(mask).tolist()],
    sort=lambda rows: sorted(rows, key=lambda row: (row[0], row[1])),
)


def _stream(rows: list[Row], batch: int, *, bounded: bool = True) -> SortedStream[list[Row]]:
    batches = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    keyed = [(b, np.asarray([r[0] for r in b], dtype=np.float64)) for b in batches]
    # (the bounds' scan batches need not be the merge's: here they are twice as long)
    scan = [
        np.asarray([r[0] for r in rows[i : i + 2 * batch]]) for i in range(0, len(rows), 2 * batch)
    ]
    return SortedStream(iter(keyed), primary_bounds(iter(scan)) if bounded else None)


def _merged(streams: Sequence[list[Row]], batch: int) -> tuple[list[Row], list[int]]:
    out: list[Row] = []
    chunks: list[int] = []

    def emit(rows: list[Row]) -> None:
        out.extend(rows)
        chunks.append(len(rows))

    merge_streams([_stream(rows, batch) for rows in streams], ROWS, emit)
    return out, chunks


def _expected(streams: Sequence[list[Row]]) -> list[Row]:
    key = [(row[0], row[1]) for rows in streams for row in rows]
    flat = [row for rows in streams for row in rows]
    order = sorted(range(len(flat)), key=lambda i: key[i])  # (stable: concatenation order)
    return [flat[i] for i in order]


def _labelled(keys: Sequence[tuple[float, int]], name: str) -> list[Row]:
    return [(k, s, f"{name}{i}") for i, (k, s) in enumerate(keys)]


def test_ties_go_by_the_second_key_then_by_stream_then_by_position() -> None:
    a = _labelled([(1.0, 5), (1.0, 1), (2.0, 0), (2.0, 0)], "a")
    b = _labelled([(1.0, 1), (2.0, 0), (3.0, 0)], "b")
    out, _ = _merged([a, b], 1)
    assert [row[2] for row in out] == ["a1", "b0", "a0", "a2", "a3", "b1", "b2"]


def test_an_empty_stream_and_one_exhausted_early() -> None:
    a = _labelled([(0.5, 0)], "a")
    b = _labelled([(float(i), 0) for i in range(7)], "b")
    out, _ = _merged([[], a, [], b], 2)
    assert out == _expected([a, b])
    assert _merged([[], []], 2) == ([], [])


def test_null_keys_come_last_in_stream_order() -> None:
    inf = float("inf")
    a = _labelled([(1.0, 0), (inf, 2), (inf, 1)], "a")
    b = _labelled([(inf, 1), (0.5, 0)], "b")  # (out of order: an inf before a finite key)
    out, _ = _merged([a, b], 1)
    assert [row[2] for row in out] == ["b1", "a0", "a2", "b0", "a1"]


def test_a_stream_out_of_order_is_merged_all_the_same() -> None:
    a = _labelled([(5.0, 0), (1.0, 0), (4.0, 0), (2.0, 0), (9.0, 0), (3.0, 0)], "a")
    b = _labelled([(float(i), 1) for i in range(10)], "b")
    out, _ = _merged([a, b], 2)
    assert out == _expected([a, b])


def test_a_sorted_stream_is_emitted_in_chunks_as_it_is_read() -> None:
    """Two sorted streams, interleaved: no chunk waits for the end (bounded memory)."""
    a = _labelled([(float(2 * i), 0) for i in range(100)], "a")
    b = _labelled([(float(2 * i + 1), 0) for i in range(100)], "b")
    out, chunks = _merged([a, b], 10)
    assert out == _expected([a, b])
    # (a bound covers a scan batch of 20 rows: each stream holds at most that and one batch)
    assert len(chunks) > 5
    assert max(chunks) <= 2 * (20 + 10)


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_merge_as_a_stable_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    streams = []
    for s in range(int(rng.integers(1, 5))):
        n = int(rng.integers(0, 40))
        keys = np.sort(rng.integers(0, 12, n)).astype(float)
        if rng.random() < 0.4:  # some disorder, as a shard's sessions have
            swaps = rng.integers(0, max(n, 1), (int(rng.integers(0, 6)), 2))
            for i, j in swaps:
                if n:
                    keys[[i, j]] = keys[[j, i]]
        if n and rng.random() < 0.3:
            keys[-int(rng.integers(1, n + 1)) :] = np.inf
        seconds = rng.integers(0, 3, n)
        streams.append(_labelled(list(zip(keys.tolist(), seconds.tolist(), strict=True)), f"{s}:"))
    out, _ = _merged(streams, int(rng.integers(1, 7)))
    assert out == _expected(streams)


def test_a_stream_without_bounds_is_merged_as_sorted_and_refused_out_of_order() -> None:
    a = _labelled([(float(i // 2), i % 3) for i in range(20)], "a")
    b = _labelled([(float(i), 0) for i in range(12)], "b")
    out: list[Row] = []
    streams = [_stream(a, 3, bounded=False), _stream(b, 4, bounded=False)]
    merge_streams(streams, ROWS, out.extend)
    assert out == _expected([a, b])
    late = _labelled([(1.0, 0), (2.0, 0), (3.0, 0), (0.5, 0)], "c")  # (across two batches)
    with pytest.raises(OutOfOrderError):
        merge_streams([_stream(late, 3, bounded=False), _stream(b, 4)], ROWS, out.extend)
    within = _labelled([(1.0, 0), (0.5, 0)], "d")
    with pytest.raises(OutOfOrderError):
        merge_streams([_stream(within, 3, bounded=False)], ROWS, out.extend)
