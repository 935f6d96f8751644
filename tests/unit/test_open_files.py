"""The open-file limit: a worker and the simulator raise their soft limit to the hard one, and a
closed loop whose workers cannot hold their share of its sessions is warned about before t0."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from tests.unit.evaluate.builders import scenario
from veeksha import open_files
from veeksha.engine.run_setup import connection_warning

_RAISE = (
    "import resource; from veeksha.open_files import raise_open_file_limit as r; "
    "print(r(), *resource.getrlimit(resource.RLIMIT_NOFILE))"
)


def _limited(soft: int, hard: int) -> tuple[int, int, int]:
    """What ``raise_open_file_limit`` returns and leaves in a process started at (soft, hard)."""
    out = subprocess.run(
        [sys.executable, "-c", _RAISE],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    returned, now_soft, now_hard = (int(v) for v in out)
    return returned, now_soft, now_hard


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = min(hard, 4096) if hard != resource.RLIM_INFINITY else 4096
    assert _limited(64, top) == (top, top, top)
    assert _limited(top, top) == (top, top, top)  # (already there: unchanged)


def test_a_shortfall_is_named_only_when_the_hard_limit_is_below_the_connections(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(open_files.resource, "getrlimit", lambda _kind: (1024, 2048))
    assert open_files.connection_shortfall(1000) is None  # (raised to 2048, room to spare)
    warning = open_files.connection_shortfall(4000)
    assert warning is not None
    assert "open-file limit (2048, ulimit -Hn)" in warning
    assert "~4000 connections a worker may hold" in warning
    assert "client_limit" in warning


def test_a_closed_loop_is_checked_per_worker_at_its_peak_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(open_files.resource, "getrlimit", lambda _kind: (1024, 1024))
    closed = {"type": "concurrent", "target_concurrent_sessions": 100, "rampup_seconds": 0}
    assert connection_warning(scenario(traffic_scheduler=closed), 1) is None
    phases = [
        {"name": "low", "duration": 5},
        {"name": "high", "duration": 5, "target_concurrent_sessions": 3000},
    ]
    stepped = scenario(traffic_scheduler=closed, phases=phases)
    warning = connection_warning(stepped, 2)  # 3000 over 2 workers: 1500 each
    assert warning is not None
    assert "~1500 connections" in warning
    assert connection_warning(stepped, 4) is None  # 750 each
    assert connection_warning(scenario(), 1) is None  # open loop: the server decides
