"""The partition of one experiment's sessions across shards (hosts). Pure: indexes in.

Vocabulary: a *shard* is one of ``count`` engines that together run one experiment; the global
schedule (session indexes, planned arrival times, the closed-loop ramp) is computed by every
shard exactly as one host would compute it, and each shard starts only the sessions it *owns*.

Rule: shard ``k`` of ``c`` owns the session indexes ``i`` with ``i % c == k`` (round robin).
Deterministic, needs no communication, and balanced: over any run of consecutive indexes the
shards' counts differ by at most one, so a rate scheduler's arrivals spread evenly over time.

Closed loop: a single-host target of ``A`` active sessions is split so that shard ``k`` keeps
``share(A, k) = #{i < A : i % c == k} = max(0, ceil((A - k) / c))`` active; the shares sum to
``A`` at every instant, ramp included (``ShardRamp``): shard ``k``'s ``m``-th slot (1-based) is
the global slot of index ``k + (m - 1) c``, which opens when the global ramp reaches
``k + (m - 1) c + 1`` sessions.

Worked example: target 5, rampup 10 s, 2 shards. Globally slots open at 2, 4, 6, 8, 10 s (the
indexes 0..4); shard 0 owns 0, 2, 4 (opens at 2, 6, 10 s: share 3), shard 1 owns 1, 3 (at 4,
8 s: share 2). At 7 s: global 3 = shard 0's 2 + shard 1's 1.

This module is the engine's (``veeksha.engine`` uses it on a lower floor than
``veeksha.distributed``, which re-exports it as ``veeksha.distributed.partition``).
"""

from __future__ import annotations

from dataclasses import dataclass

from veeksha.schedule.arrivals import ConcurrencyRamp

__all__ = [
    "ShardRamp",
    "ShardSpec",
    "concurrency_share",
    "next_owned",
    "owned_below",
    "owned_index",
    "owns",
]


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"a shard count is at least 1, not {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"shard index {self.index} is not in [0, {self.count})")

    def to_dict(self) -> dict[str, int]:
        """``{"index": k, "count": c}`` (summary.json's ``run.shard``)."""
        return {"index": self.index, "count": self.count}


def owns(spec: ShardSpec, session_index: int) -> bool:
    """Whether the shard starts global session ``session_index`` (``index % count``)."""
    return session_index % spec.count == spec.index


def concurrency_share(total: int, spec: ShardSpec) -> int:
    """The shard's part of ``total`` active sessions: the owned indexes below ``total``."""
    if total <= spec.index:
        return 0
    return (total - spec.index + spec.count - 1) // spec.count


def owned_index(spec: ShardSpec, m: int) -> int:
    """The global index of the shard's ``m``-th owned session (0-based)."""
    return spec.index + m * spec.count


def owned_below(spec: ShardSpec, end: int) -> range:
    """The shard's own indexes below ``end`` (e.g. the sessions it started before
    ``RunProbe``'s ``next_session``)."""
    return range(spec.index, max(end, spec.index), spec.count)


def next_owned(spec: ShardSpec, session_index: int) -> int:
    """The first owned index at or after ``session_index``."""
    return session_index + (spec.index - session_index) % spec.count


class ShardRamp:
    """A ``ConcurrencyRamp`` seen by one shard: the same interface, the shard's share.

    ``allowed(t) = concurrency_share(global.allowed(t))``; the shard's ``m``-th slot opens at
    the global slot ``owned_index(m - 1) + 1``. So the sum over shards of ``allowed`` is the
    single-host ``allowed`` at every instant, and every slot opens at its single-host time.
    """

    __slots__ = ("_global", "from_target", "rampup_ns", "spec", "start_ns", "target")

    def __init__(self, ramp: ConcurrencyRamp, spec: ShardSpec) -> None:
        self._global = ramp
        self.spec = spec
        self.target = concurrency_share(ramp.target, spec)
        self.from_target = concurrency_share(ramp.from_target, spec)
        self.rampup_ns = ramp.rampup_ns
        self.start_ns = ramp.start_ns

    @property
    def global_ramp(self) -> ConcurrencyRamp:
        return self._global

    def allowed(self, elapsed_ns: int) -> int:
        return concurrency_share(self._global.allowed(elapsed_ns), self.spec)

    def slot_open_ns(self, k: int) -> int:
        """Elapsed time at which the shard's k-th slot (1-based) opens."""
        return self._global.slot_open_ns(owned_index(self.spec, k - 1) + 1)

    def next_increase_ns(self, elapsed_ns: int) -> int | None:
        current = self.allowed(elapsed_ns)
        if current >= self.target:
            return None
        return self.slot_open_ns(current + 1)
