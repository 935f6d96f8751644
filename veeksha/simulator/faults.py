"""Fault injection: which request misbehaves, and how.

Each request draws one uniform number from the server's own seeded stream (seed, process index)
and gets at most one fault: the kinds are laid end to end on [0, 1) by their rates, in the order
of ``FAULT_KINDS``. Outside the window ``[window_start_s, window_end_s)`` since server start no
fault is drawn at all (and the stream does not advance).
"""

from __future__ import annotations

import random
from enum import StrEnum

from veeksha.scenario.sim_presets import FAULT_KINDS
from veeksha.simulator.settings import FaultSettings

__all__ = ["Fault", "FaultPicker"]


class Fault(StrEnum):
    """The kinds of misbehaviour the simulator can inject."""

    HTTP_500 = "http_500"
    HTTP_503 = "http_503"
    HTTP_429 = "http_429"
    DISCONNECT = "disconnect"
    STALL = "stall"
    MALFORMED_SSE = "malformed_sse"
    SLOW_HEADERS = "slow_headers"
    NEVER_ENDING = "never_ending"

    @property
    def is_http_error(self) -> bool:
        """Answered at once with an error status, without generating anything."""
        return self in (Fault.HTTP_500, Fault.HTTP_503, Fault.HTTP_429)


class FaultPicker:
    """Draws the fault (or None) of each request from a seeded stream."""

    __slots__ = ("_bounds", "_end_ns", "_rng", "_start_ns", "enabled")

    def __init__(self, config: FaultSettings, seed: int, t0_ns: int) -> None:
        self._rng = random.Random(seed)
        self._bounds: list[tuple[float, Fault]] = []
        total = 0.0
        for kind in FAULT_KINDS:
            rate = config.rate(kind)
            if rate > 0:
                total += rate
                self._bounds.append((total, Fault(kind)))
        self.enabled = bool(self._bounds)
        self._start_ns = t0_ns + round(config.window_start_s * 1e9)
        self._end_ns = (
            None if config.window_end_s is None else t0_ns + round(config.window_end_s * 1e9)
        )

    def pick(self, now_ns: int) -> Fault | None:
        """The fault of a request arriving at ``now_ns``, or None."""
        if not self.enabled or now_ns < self._start_ns:
            return None
        if self._end_ns is not None and now_ns >= self._end_ns:
            return None
        u = self._rng.random()
        for bound, fault in self._bounds:
            if u < bound:
                return fault
        return None
