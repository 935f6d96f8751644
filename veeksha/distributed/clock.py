"""A shard's clock offset to the driver, from round trips (NTP's min-RTT estimate). Pure.

A *sample* is one round trip: the driver reads its wall clock (``send``), asks the shard for
its wall clock (``shard``), and reads its own again when the answer arrives (``recv``), all
``time.time_ns()``. If the two legs took equally long, the shard read its clock at the driver's
``(send + recv) / 2``, so

    offset = shard − (send + recv) / 2          (shard clock − driver clock)

Whatever the split of the round trip between the legs, the true offset lies within
``rtt / 2`` of that (the shard's reading happened somewhere between send and recv). Queues,
scheduling and GC only ever lengthen a round trip, so the sample with the smallest RTT is the
one least disturbed: its offset is the estimate and its ``rtt / 2`` the uncertainty, a hard
bound, not a statistical one (as NTP's clock filter keeps the minimum-delay sample).

Worked example: samples (1000, 1600, 1100) and (2000, 2900, 2400): RTTs 100 and 400 ns; the
first wins: offset = 1600 − 1050 = 550 ns, uncertainty 50 ns. A shard time 10_000 is driver
time 10_000 − 550 = 9_450.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["OffsetEstimate", "drift_ns", "estimate_offset", "to_driver_ns", "to_shard_ns"]


@dataclass(frozen=True, slots=True)
class OffsetEstimate:
    """A shard's clock minus the driver's (ns), within ±``uncertainty_ns``; ``rtt_ns`` of the
    round trip it came from, out of ``samples`` round trips."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    samples: int

    def to_dict(self) -> dict[str, int]:
        return {
            "offset_ns": self.offset_ns,
            "uncertainty_ns": self.uncertainty_ns,
            "rtt_ns": self.rtt_ns,
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OffsetEstimate:
        return cls(
            int(data["offset_ns"]),
            int(data["uncertainty_ns"]),
            int(data["rtt_ns"]),
            int(data["samples"]),
        )


def estimate_offset(samples: Sequence[tuple[int, int, int]]) -> OffsetEstimate:
    """The min-RTT estimate from ``(driver_send_ns, shard_clock_ns, driver_recv_ns)`` samples.

    Samples whose receive precedes their send (a driver clock stepped back mid-sample) are
    ignored; ValueError when none is left.
    """
    best: tuple[int, int, int] | None = None
    best_rtt = 0
    for sample in samples:
        send, _, recv = sample
        rtt = recv - send
        if rtt < 0:
            continue
        if best is None or rtt < best_rtt:
            best, best_rtt = sample, rtt
    if best is None:
        raise ValueError("no usable clock sample (each needs driver_recv >= driver_send)")
    send, shard, recv = best
    # (send + recv) / 2 without losing the half nanosecond: offset = (2 shard − send − recv) / 2
    offset = (2 * shard - send - recv) // 2
    return OffsetEstimate(offset, (best_rtt + 1) // 2, best_rtt, len(samples))


def to_driver_ns(shard_ns: int, est: OffsetEstimate) -> int:
    """A shard wall-clock reading on the driver's wall clock."""
    return shard_ns - est.offset_ns


def to_shard_ns(driver_ns: int, est: OffsetEstimate) -> int:
    """A driver wall-clock instant on the shard's wall clock (e.g. the agreed t0 a shard is
    given as ``start_at_wall_ns``)."""
    return driver_ns + est.offset_ns


def drift_ns(before: OffsetEstimate, after: OffsetEstimate) -> int:
    """How far the offset moved over the run (after − before), in ns."""
    return after.offset_ns - before.offset_ns
