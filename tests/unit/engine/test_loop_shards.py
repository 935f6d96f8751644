"""The traffic loop as one shard of several, on a fake clock: the shards together run the
single-host schedule (same session indexes, same planned starts, the closed-loop target split
at every instant)."""

from __future__ import annotations

import numpy as np

from tests.unit.engine.test_loop import Harness, chain
from veeksha.dispatch.messages import Result
from veeksha.engine.loop import LoopSettings
from veeksha.schedule.arrivals import ConcurrencyRamp
from veeksha.schedule.phases import PhaseBounds
from veeksha.schedule.shards import ShardSpec

S = 1_000_000_000


class Shard(Harness):
    """A started loop of one shard (``spec``; None: the single host) of ``turns``-turn chains."""

    def __init__(self, settings: LoopSettings, spec: ShardSpec | None, turns: int = 1) -> None:
        super().__init__(settings, lambda i: chain(i, turns), spec)
        self.start()

    def complete_all(self) -> None:
        items, self.items = self.items, []
        self.loop.on_results(
            [
                Result(item.request_id, 0, "ok", self.clock.now, self.clock.now, self.clock.now)
                for item in items
            ]
        )

    def roots(self) -> set[tuple[int, int]]:
        return {
            (req.session.session_id, req.ready_at_ns)
            for req, _ in self.rec.dispatched
            if req.node_id == 0
        }


def poisson(seed: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return lambda n: rng.exponential(0.1, n)


def test_open_loop_shards_start_the_single_host_arrivals_exactly() -> None:
    def run(spec: ShardSpec | None) -> Shard:
        settings = LoopSettings(
            cancel_on_failure=True, max_sessions=31, warmup_sessions=4, rate_gaps=poisson(3)
        )
        shard = Shard(settings, spec, turns=2)
        for _ in range(200):
            shard.timers.advance(shard.clock.now + S // 10)
            shard.complete_all()
        assert shard.loop.finished
        return shard

    single = run(None)
    shards = [run(ShardSpec(k, 3)) for k in range(3)]
    union: set[tuple[int, int]] = set()
    for k, shard in enumerate(shards):
        assert all(sid % 3 == k for sid, _ in shard.roots())
        assert not union & shard.roots()
        union |= shard.roots()
        # the measured phase begins at the first measured session, whichever shard owns it
        assert shard.loop.measured_start_ns == single.loop.measured_start_ns
    assert union == single.roots()
    assert len(union) == 35
    ids = [req.request_id for shard in shards for req, _ in shard.rec.dispatched]
    assert len(ids) == len(set(ids)) == 70


def test_closed_loop_shares_sum_to_the_single_host_target_at_every_ramp_step() -> None:
    def settings() -> LoopSettings:
        return LoopSettings(
            cancel_on_failure=True, max_sessions=-1, concurrency=ConcurrencyRamp(7, 10.0)
        )

    single = Shard(settings(), None)
    shards = [Shard(settings(), ShardSpec(k, 3)) for k in range(3)]
    for step in range(1, 25):  # sessions never end: the active count is the ramp's target
        at = step * S // 2
        for shard in (single, *shards):
            shard.timers.advance(at)
        active = [len(shard.loop.sessions) for shard in shards]
        assert sum(active) == len(single.loop.sessions) == min(7, 7 * at // (10 * S))
    union = set().union(*(shard.roots() for shard in shards))
    assert union == single.roots()  # the same indexes, each slot at its single-host time


def test_closed_loop_counts_are_global_indexes() -> None:
    def settings() -> LoopSettings:
        return LoopSettings(
            cancel_on_failure=True,
            max_sessions=10,
            concurrency=ConcurrencyRamp(2, 0.0),
            phases=[PhaseBounds("warmup", None, 3), PhaseBounds("measured")],
        )

    def run(spec: ShardSpec | None) -> Shard:
        shard = Shard(settings(), spec)
        for _ in range(40):
            shard.timers.advance(shard.clock.now + S)
            shard.complete_all()
        assert shard.loop.finished
        return shard

    single = run(None)
    shards = [run(ShardSpec(k, 2)) for k in range(2)]
    ids = sorted(sid for shard in shards for sid, _ in shard.roots())
    assert ids == sorted(sid for sid, _ in single.roots()) == list(range(13))
    warm = sorted(
        s.session_id for shard in shards for s in shard.rec.sessions if s.phase == "warmup"
    )
    assert warm == [0, 1, 2]


def test_a_shard_with_no_share_of_the_target_ends_at_once() -> None:
    settings = LoopSettings(
        cancel_on_failure=True, max_sessions=5, concurrency=ConcurrencyRamp(1, 0.0)
    )
    shard = Shard(settings, ShardSpec(1, 2))
    assert shard.loop.finished
    assert not shard.rec.dispatched


def test_a_ramped_rate_is_split_over_shards_exactly_and_arrives_at_inverse_of_k() -> None:
    from veeksha.schedule.ramp import RateRamp

    ramp = RateRamp(5.0, 40.0, 4.0, "linear")  # fixed 0.2-s gaps: 5/s, then to 40/s

    def run(spec: ShardSpec | None) -> Shard:
        settings = LoopSettings(
            cancel_on_failure=True,
            max_sessions=60,
            warmup_sessions=4,
            rate_gaps=lambda n: np.full(n, 0.2),
            rate_warp=ramp.warp,
        )
        shard = Shard(settings, spec)
        for _ in range(100):
            shard.timers.advance(shard.clock.now + S // 20)
            shard.complete_all()
        assert shard.loop.finished
        return shard

    single = run(None)
    starts = sorted(t - single.loop.t0_ns for _, t in single.roots())
    assert starts == [round(float(ramp.inverse(k)) * S) for k in range(64)]
    union: set[tuple[int, int]] = set()
    for k in range(2):
        union |= run(ShardSpec(k, 2)).roots()
    assert union == single.roots()
