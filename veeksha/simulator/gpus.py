"""Simulated GPUs: the simulator's ``GET /dcgm/metrics``, answered as NVIDIA's dcgm-exporter
answers its ``/metrics``, so GPU telemetry (``server_metrics.gpu_urls``: utilisation, power,
energy per output token) can be tested end to end against a real server process.

With ``simulator.gpus: N`` (0, the default: no GPUs, and ``/dcgm/metrics`` is a 404 like any
unknown path) a simulator process reports N GPUs that work together (tensor parallelism): every
one of them reports the same load. They are *busy* while any sequence of the process (of any
served model, ``simulator.models``) holds a running slot, idle otherwise. :class:`BusyClock`
counts that time exactly at the transitions: every ``SlotQueue`` of the process shares one,
told when sequences take slots (``started``) and leave them (``stopped``); when the running
count goes 0 → 1 it notes the time, when it returns to 0 it adds the interval (nothing is
polled, nothing is done per token).

The power model, from ``gpu_idle_watts`` (P_idle) and ``gpu_busy_watts`` (P_busy): a GPU draws
P_busy while busy and P_idle otherwise, so since the server started

    energy (mJ) = 1000 × (P_idle × uptime_s + (P_busy − P_idle) × busy_s)

the exact integral of the power, which ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (a counter,
integer mJ) answers. ``DCGM_FI_DEV_GPU_UTIL`` (integer %, 100 × busy time / elapsed) and
``DCGM_FI_DEV_POWER_USAGE`` (W, energy delta / elapsed, so P_idle + (P_busy − P_idle) × the
busy share) are averages over one period: since this process' previous ``/dcgm/metrics``
answer (the first: since the server started), as a real GPU's are averages over its sampling
window. The other fields: ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` (MiB of an 80 GB
H100's 81,559: 90 % used from the start, as vLLM preallocates its KV cache),
``DCGM_FI_DEV_GPU_TEMP`` (30 + 45 × util / 100 °C, rounded) and ``DCGM_FI_DEV_SM_CLOCK`` (1,980
MHz when the period's utilisation is above 0, else 345).

Each sample is labelled as dcgm-exporter labels it: ``gpu`` (the index), ``UUID``
(``GPU-`` and 8-4-4-4-12 hex digits, the same for a given ``seed`` and index: :func:`gpu_uuid`),
``device`` (``nvidia<i>``), ``modelName`` and ``Hostname``. With ``processes`` above 1 each
process answers for its own sequences and its own periods, as ``/metrics`` does.
"""

from __future__ import annotations

import hashlib
import time

__all__ = [
    "FB_TOTAL_MIB",
    "FB_USED_MIB",
    "HOSTNAME",
    "MODEL_NAME",
    "BusyClock",
    "SimulatedGpus",
    "gpu_uuid",
]

FB_TOTAL_MIB = 81_559  # an 80 GB H100's frame buffer, as nvidia-smi and DCGM count it
FB_USED_MIB = round(0.9 * FB_TOTAL_MIB)  # vLLM's KV cache, preallocated at start
MODEL_NAME = "veeksha simulated GPU"
HOSTNAME = "veeksha-sim"
SM_CLOCK_BUSY_MHZ = 1980
SM_CLOCK_IDLE_MHZ = 345
IDLE_TEMP_C = 30
TEMP_RISE_C = 45  # at 100 % utilisation


class BusyClock:
    """Cumulative busy time of a process' GPUs: the time during which at least one sequence
    held a running slot, in ns of ``time.monotonic_ns()``.

    >>> clock = BusyClock()
    >>> clock.started(2, now_ns=100)
    >>> clock.stopped(now_ns=150)
    >>> clock.busy_ns(now_ns=170)  # one still runs: 100 → 170
    70
    >>> clock.stopped(now_ns=200)
    >>> clock.busy_ns(now_ns=1000)
    100

    The queues report their own times (an engine step's model time, the present), so an
    interval never begins before the previous one ended, and none counts backwards: the total
    never decreases.
    """

    __slots__ = ("_ended_ns", "_since_ns", "_total_ns", "running")

    def __init__(self) -> None:
        self.running = 0  # sequences holding a running slot, over every queue
        self._since_ns = 0  # when the current busy interval began (while running)
        self._ended_ns = 0  # when the last one ended
        self._total_ns = 0  # closed intervals

    def started(self, count: int, now_ns: int) -> None:
        """``count`` sequences took running slots at ``now_ns``."""
        if not self.running:
            self._since_ns = max(now_ns, self._ended_ns)
        self.running += count

    def stopped(self, now_ns: int) -> None:
        """One sequence left its running slot at ``now_ns``."""
        self.running -= 1
        if not self.running:
            since = self._since_ns
            if now_ns > since:
                self._total_ns += now_ns - since
                self._ended_ns = now_ns
            else:
                self._ended_ns = since

    def busy_ns(self, now_ns: int) -> int:
        """Busy time up to ``now_ns``, the open interval (if running) included."""
        if self.running and now_ns > self._since_ns:
            return self._total_ns + now_ns - self._since_ns
        return self._total_ns


def gpu_uuid(seed: int, index: int) -> str:
    """The UUID of simulated GPU ``index`` (``GPU-`` and 8-4-4-4-12 hex digits), the same for
    the same ``seed``.

    >>> gpu_uuid(0, 0) == gpu_uuid(0, 0) != gpu_uuid(0, 1)
    True
    """
    h = hashlib.blake2b(f"veeksha-sim-gpu/{seed}/{index}".encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class SimulatedGpus:
    """The GPUs of one simulator process and its ``/dcgm/metrics`` answers (module doc)."""

    __slots__ = (
        "_labels",
        "_last_busy_ns",
        "_last_ns",
        "busy",
        "busy_watts",
        "idle_watts",
        "t0_ns",
    )

    def __init__(
        self,
        count: int,
        idle_watts: float,
        busy_watts: float,
        seed: int,
        t0_ns: int,
        busy: BusyClock,
    ) -> None:
        self.idle_watts = idle_watts
        self.busy_watts = busy_watts
        self.t0_ns = t0_ns
        self.busy = busy
        self._labels = [
            f'gpu="{i}",UUID="{gpu_uuid(seed, i)}",device="nvidia{i}",'
            f'modelName="{MODEL_NAME}",Hostname="{HOSTNAME}"'
            for i in range(count)
        ]
        self._last_ns = t0_ns  # the previous answer (none yet: the start)
        self._last_busy_ns = 0

    def energy_mj(self, uptime_ns: int, busy_ns: int) -> float:
        """Energy of one GPU after ``uptime_ns`` of which ``busy_ns`` busy, mJ (exact)."""
        idle = self.idle_watts
        return (idle * uptime_ns + (self.busy_watts - idle) * busy_ns) / 1e6

    def exposition(self, now_ns: int | None = None) -> str:
        """The Prometheus text of the GPUs at ``now_ns`` (None: now); it ends the period of
        ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_POWER_USAGE`` and begins the next."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        uptime = max(now - self.t0_ns, 0)
        busy = min(self.busy.busy_ns(now), uptime)
        period = now - self._last_ns
        busy_in_period = min(max(busy - self._last_busy_ns, 0), max(period, 0))
        if period > 0:
            share = busy_in_period / period
            power = self.idle_watts + (self.busy_watts - self.idle_watts) * share
        else:  # (two answers in the same nanosecond: nothing happened in between)
            share, power = 0.0, self.idle_watts
        self._last_ns = max(now, self._last_ns)
        self._last_busy_ns = max(busy, self._last_busy_ns)
        util = min(max(round(100 * share), 0), 100)
        energy = int(self.energy_mj(uptime, busy))
        values = [
            ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).",
             str(SM_CLOCK_BUSY_MHZ if util > 0 else SM_CLOCK_IDLE_MHZ)),
            ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).",
             str(round(IDLE_TEMP_C + TEMP_RISE_C * util / 100))),
            ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", f"{power:.3f}"),
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
             "Total energy consumption since boot (in mJ).", str(energy)),
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", str(util)),
            ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
             str(FB_TOTAL_MIB - FB_USED_MIB)),
            ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
             str(FB_USED_MIB)),
        ]  # fmt: skip
        lines: list[str] = []
        for name, kind, help_text, value in values:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            lines += [f"{name}{{{labels}}} {value}" for labels in self._labels]
        return "\n".join(lines) + "\n"
