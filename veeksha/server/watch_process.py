"""The server watch's process: ``python -I -m veeksha.server.watch_process``.

Scraping a real server's ``/metrics`` (~1,000 lines from vLLM) costs ~40 ms of CPU a scrape in
``prometheus_client``'s parser, under the GIL the traffic's event loop needs: so the scraper
(``MetricsScraper``), the GPU sampler (``GpuSampler``) and the server-metrics writer run in this
small process, never in veeksha's main one (``benchmarks/server_metrics.py`` measures both).

The protocol, one JSON object a line:

- veeksha starts it before t0 (its imports overlap the workers' start-up); it says
  ``{"ready": true}`` once its imports are done;
- veeksha writes one line, the watch's settings (:class:`WatchSettings`: url, key, interval,
  t0, folder, metadata, nvidia-smi), and keeps standard input open; scraping starts at t0;
- each warning comes back as ``{"warning": "..."}`` while the run goes (the first failed scrape);
- standard input closes (veeksha's ``stop`` after the drain, or veeksha died: the kernel closes
  it) or SIGTERM (``PR_SET_PDEATHSIG`` when veeksha's thread that started it dies): one last
  scrape, server_metrics.parquet finalised, ``{"status": {...}}`` (what ``ServerWatch.stop``
  returns), exit 0.

SIGINT is ignored (it runs in a session of its own anyway): veeksha stops it after the drain.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["WatchSettings", "die_with_parent", "main"]

_PR_SET_PDEATHSIG = 1


class WatchSettings(msgspec.Struct, frozen=True):
    """What the watch's process needs to watch one run."""

    url: str
    api_key: str | None
    interval_s: float
    t0_ns: int
    run_dir: str
    metadata: dict[str, str]
    nvidia_smi: str | None = None


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``preexec_fn``: SIGTERM when the thread that started this process dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _Stop(Exception):
    """SIGTERM: stop as if standard input closed."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


_say_lock = threading.Lock()


def _say(message: dict[str, Any]) -> None:
    with _say_lock, contextlib.suppress(OSError, ValueError):
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def _wait_for_eof(fd: int) -> None:
    while True:
        select.select([fd], [], [])
        if not _read(fd):
            return


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


def watch(settings: WatchSettings) -> dict[str, Any]:
    """Watch until standard input closes (or SIGTERM); what happened."""
    from veeksha.record.server_metrics import ServerMetricsWriter
    from veeksha.server.gpu import GpuSampler
    from veeksha.server.scraper import MetricsScraper

    def warn(text: str) -> None:
        _say({"warning": text})

    writer = ServerMetricsWriter(Path(settings.run_dir), settings.metadata)
    scraper = MetricsScraper(
        settings.url, settings.api_key, settings.interval_s, settings.t0_ns, writer, warn
    )
    gpu = None
    if settings.nvidia_smi is not None:
        gpu = GpuSampler(settings.nvidia_smi, settings.interval_s, settings.t0_ns, writer)
    try:
        scraper.start()
        if gpu is not None:
            gpu.start()
        _wait_for_eof(sys.stdin.fileno())
    except _Stop:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (finishing now: the file must be whole)
    status = scraper.stop()
    if gpu is not None:
        status["gpu_samples"] = gpu.stop()
    status["rows"] = writer.rows
    try:
        writer.close(
            {
                f"server_metrics_{key}": "" if value is None else str(value)
                for key, value in status.items()
            }
        )
    except OSError as exc:  # (the disk: the run's own files say so; these are extras)
        status["write_error"] = str(exc)
        warn(f"server metrics: cannot write server_metrics.parquet: {exc}")
    return status


def main() -> None:
    """Read the settings line, watch, report the status line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        import prometheus_client.parser  # noqa: F401  (now: not on the first scrape)

        import veeksha.record.server_metrics
        import veeksha.server.scraper  # noqa: F401

        _say({"ready": True})
        line = sys.stdin.buffer.readline()
        if not line:  # veeksha stopped before t0: nothing to watch
            return
        settings = msgspec.json.decode(line, type=WatchSettings)
        _say({"status": watch(settings)})
    except _Stop:
        return


if __name__ == "__main__":
    main()
