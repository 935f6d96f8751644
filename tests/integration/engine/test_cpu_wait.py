"""The run-queue wait read from the kernel, for real processes that share one CPU or not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from veeksha.engine.cpu_wait import CpuWait, run_delay_ns

pytestmark = pytest.mark.skipif(
    run_delay_ns(os.getpid()) is None, reason="the kernel gives no /proc/PID/schedstat"
)

_SPIN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass\n"


def _spinners(cpu: int, count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os; os.sched_setaffinity(0, [{cpu}])\n" + _SPIN.format(s=seconds),
            ]
        )
        for _ in range(count)
    ]


def test_two_processes_on_one_cpu_each_wait_for_it() -> None:
    cpu = min(os.sched_getaffinity(0))
    spinners = _spinners(cpu, 2, 1.5)
    try:
        time.sleep(0.2)  # both pinned and spinning
        wait = CpuWait(p.pid for p in spinners)
        wait.start()
        time.sleep(0.8)
        waited = wait.stop()
    finally:
        for p in spinners:
            p.wait()
    # two busy processes on one CPU: together they waited about as long as the interval (each
    # about half of it); never more than both of it
    assert waited is not None
    assert 0.4 < waited < 1.7


def test_a_sleeping_process_waits_for_nothing_and_a_gone_one_is_left_out() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        time.sleep(0.2)
        wait = CpuWait([sleeper.pid, gone.pid])
        wait.start()
        time.sleep(0.3)
        waited = wait.stop()
    finally:
        sleeper.wait()
    assert waited is not None
    assert 0.0 <= waited < 0.05
    assert run_delay_ns(gone.pid) is None
    assert CpuWait([gone.pid]).stop() is None
