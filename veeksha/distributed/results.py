"""What the driver knows of each shard after the run, and what the merge made of them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from veeksha.distributed.clock import OffsetEstimate
from veeksha.evaluate.exit_codes import ExitCode
from veeksha.schedule.shards import ShardSpec, owned_below

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["MergeReport", "ShardResult"]


@dataclass
class ShardResult:
    """What the driver knows of one shard when the run is over.

    ``folder``: a local copy of the shard's run folder (finalised, or only its ``parts/`` when
    the shard was lost), None when nothing came back. ``offset_before``/``offset_after``: its
    clock offset to the driver's, measured before and after the run. ``lost``: why the shard
    was lost (None: it finished). ``in_flight``: what it last reported as dispatched and not
    completed, one dict per request with ``session_id``, ``node_id`` and optionally
    ``request_id``, ``phase``, ``ready_at``, ``dispatched_at`` (seconds since the shard's t0),
    ``client``, ``model``, ``worker_id``, ``attempt``, ``seen_at`` (the snapshot that named
    it: it was in flight then; ``reported_at``: that snapshot's time). ``started_sessions``:
    the global indexes of the sessions it started, sorted (None: unknown; then the ids in its
    rows and in ``in_flight``). ``t0_wall_ns``: the shard's t0 on its own wall clock, if the
    driver knows it (else read from the folder).
    """

    spec: ShardSpec
    folder: Path | None
    offset_before: OffsetEstimate | None = None
    offset_after: OffsetEstimate | None = None
    lost: str | None = None
    in_flight: list[dict[str, Any]] = field(default_factory=list)
    started_sessions: NDArray[np.int64] | None = None  # (sorted)
    t0_wall_ns: int | None = None
    lost_at_wall_ns: int | None = None  # when the driver saw it lost (driver's wall clock)
    # its last snapshot's time (seconds since its t0): its engine last reported itself then
    reported_at: float | None = None

    @classmethod
    def from_snapshot(
        cls,
        spec: ShardSpec,
        folder: Path | None,
        snapshot: Mapping[str, Any] | None,
        **known: Any,
    ) -> ShardResult:
        """A shard's result from the last ``RunProbe.snapshot()`` it sent (None: none came):
        its in-flight requests, the sessions it started (its own indexes below
        ``next_session``) and its t0; ``known``: the other fields (offsets, ``lost``...)."""
        if snapshot is None:
            return cls(spec, folder, **known)
        next_session = snapshot.get("next_session")
        started = None
        if next_session is not None:
            owned = owned_below(spec, int(next_session))
            started = np.arange(owned.start, owned.stop, owned.step, dtype=np.int64)
        at = snapshot.get("at")  # (each entry was in flight then: ``seen_at``)
        in_flight = [
            dict(entry) if at is None else {**entry, "seen_at": at}
            for entry in snapshot.get("in_flight") or []
        ]
        return cls(
            spec,
            folder,
            in_flight=in_flight,
            started_sessions=started,
            t0_wall_ns=snapshot.get("t0_wall_ns"),
            reported_at=None if at is None else float(at),
            **known,
        )


@dataclass
class MergeReport:
    """What the merge wrote and how the experiment went."""

    run_dir: Path
    requests: int
    sessions: int
    lost_shards: dict[int, str]
    lost_rows: int
    incomplete_sessions: int
    sessions_not_run: int
    interrupted: bool
    verdict: str | None
    all_slos_met: bool | None
    exit_code: ExitCode
    shifts_s: dict[int, float] = field(default_factory=dict)
