"""How long veeksha's own processes waited for a CPU during the traffic (Linux).

The kernel accounts, per thread, the time it was runnable but not running because another task
held its CPU: ``run_delay``, the second field of ``/proc/PID/schedstat``, in ns. A worker whose
release timer fires while another process holds its CPU sends late by that wait whatever the
worker itself does, so the wait names the cause of a dispatch-timing tail that no figure of the
worker's own shows: other processes on the workers' CPUs (a server on the same machine, a
monitoring agent, a second benchmark). It is read for each process' main thread, which runs its
event loop (where a worker releases and sends requests), once when the traffic starts and once
when it ends.

Worked example: two workers that waited 12 ms and 18 ms for their CPU during a 10 s traffic
phase give ``cpu_wait_s`` 0.030, a share of 0.030 / (2 × 10 s) = 0.15 % of their time.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CpuWait", "run_delay_ns"]


def run_delay_ns(pid: int) -> int | None:
    """Time the main thread of ``pid`` has waited on a run queue so far (ns); None where the
    kernel does not tell (not Linux, no schedstat) or the process is gone."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


class CpuWait:
    """The run-queue wait of a set of processes between ``start`` and ``stop``."""

    __slots__ = ("_pids", "_started")

    def __init__(self, pids: Iterable[int]) -> None:
        self._pids = tuple(pids)
        self._started: dict[int, int] = {}

    def start(self) -> None:
        """Take the first reading of every process."""
        readings = ((pid, run_delay_ns(pid)) for pid in self._pids)
        self._started = {pid: ns for pid, ns in readings if ns is not None}

    def stop(self) -> float | None:
        """Seconds waited since ``start``, summed over the processes readable both times; None
        when none was (a process that exited in between is left out)."""
        waited = [
            ns - self._started[pid]
            for pid in self._started
            if (ns := run_delay_ns(pid)) is not None
        ]
        return sum(waited) / 1e9 if waited else None
