"""The dry run's in-process pool: one result per item, next loop pass, batched."""

from __future__ import annotations

import asyncio

import pytest

from veeksha.dispatch.inprocess import DRY_WORD, InProcessPool, dry_result
from veeksha.dispatch.messages import Result, WorkItem
from veeksha.errors import RunAbortedError


def item(request_id: int, max_tokens: int = 3) -> WorkItem:
    return WorkItem(request_id, [("user", "hi")], max_tokens, dispatched_at_ns=1)


def test_dry_result_is_a_complete_answer() -> None:
    result = dry_result(item(7, 3), 0, 100)
    assert (result.request_id, result.status, result.completion_tokens) == (7, "ok", 3)
    assert result.chunk_times_ns == [100, 100, 100]
    assert result.output_text == " ".join([DRY_WORD] * 3)
    assert result.first_chunk_at_ns == 100
    empty = dry_result(item(8, 0), 0, 100)
    assert empty.chunk_times_ns == []
    assert empty.first_chunk_at_ns is None


def test_a_batch_shares_chunk_lists_per_length() -> None:
    chunks: dict[int, list[int]] = {}
    a, b, c = (dry_result(item(i, n), 0, 5, chunks) for i, n in ((1, 2), (2, 2), (3, 4)))
    assert a.chunk_times_ns is b.chunk_times_ns
    assert c.chunk_times_ns == [5] * 4
    assert dry_result(item(4, 2), 0, 5).chunk_times_ns is not a.chunk_times_ns


def test_pool_answers_each_pass_in_one_batch() -> None:
    batches: list[list[Result]] = []

    async def main() -> None:
        pool = InProcessPool(batches.append)
        await pool.start()
        assert pool.submit(item(1)) == 0
        pool.submit(item(2))
        assert pool.in_flight == 2
        assert batches == []
        await asyncio.sleep(0)
        pool.submit(item(3))
        await pool.stop()
        with pytest.raises(RunAbortedError):
            pool.submit(item(4))

    asyncio.run(main())
    assert [[r.request_id for r in batch] for batch in batches] == [[1, 2], [3]]
