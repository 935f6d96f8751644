"""Test-only: a worker whose wall clock disagrees with the kernel's (``test_clamped_stamps``).

This folder is put on ``PYTHONPATH`` by the test; Python imports this module at start-up in
every process the run starts. In a worker (``python -m veeksha.dispatch.worker``) with
``VEEKSHA_TEST_WALL_SHIFT_NS`` set, ``time.time_ns`` reads that many nanoseconds ahead, as if
the wall clock had stepped forward after the kernel stamped a read and before the worker
converted the stamp: every kernel chunk stamp then lands that much early, before its request's
``sent_at``, and is clamped. Other processes (the simulator, the run itself) are left alone.
"""

from __future__ import annotations

import os
import sys
import time


def _install(shift_ns: int) -> None:
    real = time.time_ns

    def shifted() -> int:
        return real() + shift_ns

    time.time_ns = shifted


_SHIFT = os.environ.get("VEEKSHA_TEST_WALL_SHIFT_NS")
if _SHIFT and "veeksha.dispatch.worker" in getattr(sys, "orig_argv", ()):
    _install(int(_SHIFT))
