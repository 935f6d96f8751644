"""The pure engine model, driven with explicit times (no clock, no I/O)."""

from __future__ import annotations

from veeksha.simulator.engine import (
    BatchEngine,
    EngineParams,
    PrefixCache,
    SeqState,
    SlotQueue,
    chain_hashes,
)

MS = 1_000_000


def seq(prompt: int, out: int, at: int = 0, tokens: list[str] | None = None) -> SeqState:
    hashes = chain_hashes(tokens, 16) if tokens else []
    return SeqState(prompt, out, hashes, at)


def test_chain_hashes_extend_without_rehashing() -> None:
    tokens = [f"w{i}" for i in range(70)]
    head = chain_hashes(tokens[:40], 16)
    assert len(head) == 2
    whole = chain_hashes(tokens, 16)
    assert whole[:2] == head
    assert chain_hashes(tokens, 16, start_block=2, prev=head[-1]) == whole[2:]
    assert chain_hashes(["x", *tokens[1:]], 16)[1] != whole[1]  # a block's key has its past


def test_prefix_cache_leading_blocks_lru_and_ttl() -> None:
    cache = PrefixCache(capacity_tokens=48, block_size=16, ttl_ns=100)
    a = chain_hashes([f"a{i}" for i in range(48)], 16)
    cache.insert(a, now_ns=0)
    assert cache.match(a, now_ns=10) == 3
    assert cache.match([a[0], 12345, a[2]], now_ns=20) == 1  # stops at the first miss
    b = chain_hashes([f"b{i}" for i in range(32)], 16)
    cache.insert(b, now_ns=30)  # capacity 3 blocks: evicts a's least recently used ones
    assert len(cache) == 3
    assert cache.match(b, now_ns=40) == 2
    assert cache.match(a, now_ns=140) == 0  # idle longer than the ttl: gone


def test_lookup_always_computes_one_token_and_counts_hits() -> None:
    tokens = [f"t{i}" for i in range(32)]
    cache = PrefixCache(capacity_tokens=1000, block_size=16)
    hashes = chain_hashes(tokens, 16)
    cache.insert(hashes, 0)
    assert cache.lookup(hashes, 32, now_ns=1) == 16  # not 32: the last token is computed
    assert cache.lookup(hashes, 33, now_ns=1) == 32
    assert (cache.query_tokens, cache.hit_tokens) == (65, 48)
    assert PrefixCache(capacity_tokens=0, block_size=16).lookup(hashes, 33, 0) == 0


def test_slot_queue_is_fifo_and_release_admits_the_next() -> None:
    slots = SlotQueue(max_num_seqs=2, cache=None)
    a, b, c = seq(1, 1), seq(1, 1), seq(1, 1)
    for s in (a, b, c):
        slots.submit(s)
    assert slots.admit(now_ns=5) == [a, b]
    assert a.scheduled_ns == 5
    assert list(slots.waiting) == [c]
    slots.release(b)
    assert slots.admit(now_ns=9) == [c]
    slots.release(c)
    slots.release(c)  # twice is harmless
    waiting = seq(1, 1)
    slots.submit(waiting)
    slots.submit(seq(1, 1))
    slots.release(waiting)  # aborted while queued
    assert len(slots.waiting) == 1


def test_step_duration_formula() -> None:
    params = EngineParams(
        max_num_seqs=8, prefill_tokens_per_s=1000, decode_step_ms=5, decode_step_ms_per_seq=1
    )
    assert params.step_ns(batch=2, prefill_tokens=150) == 157 * MS
    assert params.step_ns(batch=4, prefill_tokens=0) == 9 * MS
    assert EngineParams(max_num_seqs=1).step_ns(3, 1000) == 0  # prefill speed 0: instant


def test_docstring_worked_example() -> None:
    params = EngineParams(
        max_num_seqs=2, prefill_tokens_per_s=1000, decode_step_ms=5, decode_step_ms_per_seq=1
    )
    engine = BatchEngine(params, cache=None)
    a, b, c = seq(100, 2), seq(50, 1), seq(100, 1, at=1 * MS)
    engine.submit(a)
    engine.submit(b)
    step = engine.begin_step(0)
    assert step is not None
    engine.submit(c)
    assert step.end_ns == 157 * MS
    assert engine.end_step(step, step.end_ns) == [a, b]
    assert b.finished
    assert a.generated == 1
    step = engine.begin_step(157 * MS)
    assert step is not None
    assert step.prefill == [c]
    assert c.scheduled_ns - c.arrival_ns == 156 * MS
    assert step.end_ns == 264 * MS
    assert engine.end_step(step, step.end_ns) == [a, c]
    assert a.finished
    assert c.finished
    assert engine.begin_step(264 * MS) is None
    assert engine.idle


def test_engine_cache_hits_shorten_prefill_and_abort_frees_the_slot() -> None:
    params = EngineParams(max_num_seqs=1, prefill_tokens_per_s=1000)
    cache = PrefixCache(capacity_tokens=1000, block_size=16)
    engine = BatchEngine(params, cache)
    tokens = [f"p{i}" for i in range(100)]
    first = seq(100, 1, tokens=tokens)
    engine.submit(first)
    step = engine.begin_step(0)
    assert step is not None
    assert step.end_ns == 100 * MS
    engine.end_step(step, step.end_ns)  # the prompt's blocks enter the cache after prefill
    again = seq(100, 5, tokens=tokens)
    queued = seq(10, 1)
    engine.submit(again)
    engine.submit(queued)
    step = engine.begin_step(100 * MS)
    assert step is not None
    assert again.cached_tokens == 96
    assert step.end_ns - step.start_ns == 4 * MS
    engine.abort(again)  # the client left during the step
    assert engine.end_step(step, step.end_ns) == []
    step = engine.begin_step(step.end_ns)
    assert step is not None
    assert step.prefill == [queued]


def test_merged_expositions_keep_each_familys_samples_under_one_header() -> None:
    from veeksha.simulator.server import merge_families

    def text(model: str) -> str:
        return (
            "# HELP x_total Things.\n# TYPE x_total counter\n"
            f'x_total{{model_name="{model}"}} 1\n'
            f'# TYPE y gauge\ny{{model_name="{model}"}} 2\n'
        )

    merged = merge_families([text("a"), text("b")]).splitlines()
    assert merged == [
        "# HELP x_total Things.",
        "# TYPE x_total counter",
        'x_total{model_name="a"} 1',
        'x_total{model_name="b"} 1',
        "# TYPE y gauge",
        'y{model_name="a"} 2',
        'y{model_name="b"} 2',
    ]


def test_a_step_at_the_planned_boundary_leaves_later_arrivals_to_the_next() -> None:
    """Steps begin at the previous one's planned end (the server may run them late): a request
    that arrived after that instant joins the next step, and an idle engine whose waiting
    requests all came later starts at the first one's arrival, never before it."""
    params = EngineParams(max_num_seqs=4, decode_step_ms=10)
    engine = BatchEngine(params, cache=None)
    a = seq(10, 2)
    engine.submit(a)
    step = engine.begin_step(0)
    assert step is not None
    late = seq(10, 1, at=11 * MS)  # came after the step's end (10 ms), before it was run
    engine.submit(late)
    engine.end_step(step, 12 * MS)
    step = engine.begin_step(step.end_ns)  # the next step: from 10 ms, without `late`
    assert step is not None
    assert step.batch == [a]
    assert step.end_ns == 20 * MS
    engine.end_step(step, step.end_ns)
    assert a.finished
    step = engine.begin_step(step.end_ns)
    assert step is not None
    assert step.batch == [late]
    assert late.scheduled_ns == 20 * MS
    idle = BatchEngine(params, cache=None)
    b = seq(10, 1, at=35 * MS)
    idle.submit(b)
    step = idle.begin_step(30 * MS)  # a boundary before b arrived: the step starts at b
    assert step is not None
    assert step.batch == [b]
    assert b.scheduled_ns == step.start_ns == 35 * MS
