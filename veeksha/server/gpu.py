"""``GpuSampler``: the GPUs of the host, sampled with ``nvidia-smi`` while the run goes.

One long-running ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,
power.draw --format=csv,noheader,nounits -lms INTERVAL`` (a line per GPU every interval), read
on a thread of its own into the server-metrics writer as gauges ``gpu:utilization`` (%),
``gpu:memory_used`` and ``gpu:memory_total`` (MiB), ``gpu:power`` (W), labelled ``gpu`` (the
GPU's index). A field nvidia-smi cannot read (``[N/A]``, ``[Not Supported]``) is left out.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time

from veeksha.record.server_metrics import Sample, ServerMetricsWriter

__all__ = ["QUERY", "GpuSampler", "parse_line"]

QUERY = ("index", "utilization.gpu", "memory.used", "memory.total", "power.draw")
_METRICS = ("gpu:utilization", "gpu:memory_used", "gpu:memory_total", "gpu:power")
_NS = 1_000_000_000


def parse_line(line: str) -> list[Sample]:
    """The samples of one line of nvidia-smi's CSV answer (none when it is not one)."""
    fields = [field.strip() for field in line.split(",")]
    if len(fields) != len(QUERY) or not fields[0].isdigit():
        return []
    labels = json.dumps({"gpu": fields[0]})
    samples: list[Sample] = []
    for metric, text in zip(_METRICS, fields[1:], strict=True):
        try:
            samples.append((metric, labels, float(text), "gauge", None))
        except ValueError:  # [N/A], [Not Supported]
            continue
    return samples


class GpuSampler:
    """Runs nvidia-smi in loop mode and writes its samples until ``stop()``."""

    def __init__(
        self, program: str, interval_s: float, t0_ns: int, writer: ServerMetricsWriter
    ) -> None:
        self._argv = [
            program,
            f"--query-gpu={','.join(QUERY)}",
            "--format=csv,noheader,nounits",
            f"-lms={max(round(interval_s * 1000), 1)}",
        ]
        self._t0_ns = t0_ns
        self._writer = writer
        self._proc: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._read, name="gpu-sampler", daemon=True)
        self.lines = 0

    @staticmethod
    def find() -> str | None:
        """nvidia-smi's path, if it is on PATH."""
        return shutil.which("nvidia-smi")

    def start(self) -> None:
        self._proc = subprocess.Popen(
            self._argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._thread.start()

    def stop(self) -> int:
        """Stop nvidia-smi and the reader; the number of GPU lines read."""
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._thread.join(5)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        return self.lines

    def _read(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            samples = parse_line(line)
            if samples:
                self.lines += 1
                self._writer.add((time.monotonic_ns() - self._t0_ns) / _NS, samples)
