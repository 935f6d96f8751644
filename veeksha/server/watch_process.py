"""The server watch's process: ``python -I -m veeksha.server.watch_process``.

Scraping a real server's ``/metrics`` (~1,000 lines from vLLM) costs ~40 ms of CPU a scrape in
``prometheus_client``'s parser, under the GIL the traffic's event loop needs: so the scraper
(``MetricsScraper``), the GPU sampler (``GpuSampler``), the scrapers of the GPU exporters
(``server_metrics.gpu_urls``, a thread each, their answers turned into ``gpu:*`` rows by
``veeksha.server.dcgm``) and the server-metrics writer run in this small process, never in
veeksha's main one (``benchmarks/server_metrics.py`` measures both).

The protocol, one JSON object a line:

- veeksha starts it when the run begins (its imports overlap the run's set-up); it says
  ``{"ready": true}`` once its imports are done;
- veeksha writes one line, the watch's settings (:class:`WatchSettings`: url, key, interval,
  t0, folder, metadata, nvidia-smi, GPU exporters), and keeps standard input open; scraping
  starts at t0;
- each warning comes back as ``{"warning": "..."}`` while the run goes (the first failed scrape);
- standard input closes (veeksha's ``stop`` after the drain, or veeksha died: the kernel closes
  it) or SIGTERM (``PR_SET_PDEATHSIG`` when veeksha's thread that started it dies): one last
  scrape, ``{"status": {...}}`` (what ``ServerWatch.stop`` returns), exit 0. When veeksha wrote
  ``{"merge": true}`` before closing (its ``stop``), the last part is written and the status says
  ``"parts": true``: veeksha, which has Arrow loaded, merges them into server_metrics.parquet;
  otherwise (veeksha died) this process merges them itself.

It imports only what scraping needs (~0.15 CPU-s, no Arrow, numpy or msgspec): Arrow only in the
rare merge of its own, and ``prometheus_client``'s parser without the package's ``__init__``
(which imports its HTTP server, WSGI and metrics registry: ~0.1 CPU-s).

SIGINT is ignored (it runs in a session of its own anyway): veeksha stops it after the drain.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import json
import os
import select
import signal
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["MERGE_REQUEST", "WatchSettings", "die_with_parent", "main"]

#: What veeksha writes before closing standard input when it merges the parts itself.
MERGE_REQUEST = b'{"merge": true}\n'

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WatchSettings:
    """What the watch's process needs to watch one run (one JSON object)."""

    url: str
    api_key: str | None
    interval_s: float
    t0_ns: int
    run_dir: str
    metadata: dict[str, str]
    nvidia_smi: str | None = None
    headers: dict[str, str] | None = None  # the client's own, sent with each scrape
    gpu_urls: list[str] | None = None  # dcgm-exporters (server_metrics.gpu_urls): no key sent
    #: the other servers of the run's clients: {url, api_key, headers} each, scraped in the
    #: same rounds as ``url`` (every sample then labelled ``server``: 0 for ``url``'s)
    servers: list[dict[str, Any]] | None = None


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``preexec_fn``: SIGTERM when the thread that started this process dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _Stop(Exception):
    """SIGTERM: stop as if standard input closed."""


_state = {"finishing": False}  # (set once the watch ends: a SIGTERM then changes nothing)


def _raise_stop(signum: int, frame: object) -> None:
    """SIGTERM's handler: stop the wait, once. veeksha's death closes standard input and sends
    SIGTERM (``PR_SET_PDEATHSIG``) at the same moment: a SIGTERM after the wait saw the end of
    its input must not cut short the last scrape and the file's merge."""
    if not _state["finishing"]:
        _state["finishing"] = True
        raise _Stop


_say_lock = threading.Lock()


def _say(message: dict[str, Any]) -> None:
    with _say_lock, contextlib.suppress(OSError, ValueError):
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def _read_line(fd: int) -> tuple[bytes, bytes]:
    """The first line of ``fd`` (empty at EOF) and what came after it."""
    data = b""
    while b"\n" not in data:
        more = _read(fd)
        if not more:
            return b"", b""
        data += more
    line, _, rest = data.partition(b"\n")
    return line, rest


def _wait_for_eof(fd: int, received: bytes) -> bool:
    """Whether veeksha asked to merge the parts itself before standard input closed."""
    while True:
        select.select([fd], [], [])
        data = _read(fd)
        if not data:
            _state["finishing"] = True  # (first: a SIGTERM from here on is ignored)
            return MERGE_REQUEST.strip() in received
        received = (received + data)[-256:]


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""


def watch(settings: WatchSettings, received: bytes = b"") -> tuple[dict[str, Any], bool]:
    """Watch until standard input closes (or SIGTERM); what happened, and whether the parts
    are left for veeksha to merge (``received``: what standard input said after the settings)."""
    from veeksha.record.server_metrics import ServerMetricsWriter, status_metadata
    from veeksha.server.dcgm import gpu_samples
    from veeksha.server.gpu import GpuSampler
    from veeksha.server.scraper import MetricsScraper

    def warn(text: str) -> None:
        _say({"warning": text})

    writer = ServerMetricsWriter(Path(settings.run_dir), settings.metadata)
    followers = [
        MetricsScraper(
            str(server["url"]),
            server.get("api_key"),
            settings.interval_s,
            settings.t0_ns,
            writer,
            warn,
            server.get("headers"),
        )
        for server in settings.servers or ()
    ]
    scraper = MetricsScraper(
        settings.url,
        settings.api_key,
        settings.interval_s,
        settings.t0_ns,
        writer,
        warn,
        settings.headers,
        followers=followers,
    )
    exporters = [
        MetricsScraper(
            url,
            None,
            settings.interval_s,
            settings.t0_ns,
            writer,
            warn,
            transform=functools.partial(gpu_samples, source=source),
            what="GPU metrics",
            hint="check server_metrics.gpu_urls",
        )
        for source, url in enumerate(settings.gpu_urls or ())
    ]
    gpu = None
    if settings.nvidia_smi is not None:
        gpu = GpuSampler(settings.nvidia_smi, settings.interval_s, settings.t0_ns, writer)
    handed_over = False
    try:
        scraper.start()
        for exporter in exporters:
            exporter.start()
        if gpu is not None:
            gpu.start()
        handed_over = _wait_for_eof(sys.stdin.fileno(), received)
    except _Stop:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # (finishing now: the file must be whole)
    status = scraper.stop()
    if exporters:
        status["gpu_exporters"] = [exporter.stop() for exporter in exporters]
    if gpu is not None:
        status["gpu_samples"] = gpu.stop()
    status["rows"] = writer.rows
    try:
        if handed_over:
            writer.flush()
        else:
            writer.close(status_metadata(status))
    except OSError as exc:  # (the disk: the run's own files say so; these are extras)
        status["write_error"] = str(exc)
        warn(f"server metrics: cannot write server_metrics.parquet: {exc}")
        handed_over = False
    return status, handed_over


def _load_parser() -> None:
    """``prometheus_client.parser`` without the package's ``__init__``, which imports its HTTP
    server, WSGI app, platform and process collectors and registry (~0.1 CPU-s) that parsing
    never uses: the package stands in as a bare module over the same folder."""
    if "prometheus_client" not in sys.modules:
        spec = importlib.util.find_spec("prometheus_client")
        if spec is not None and spec.submodule_search_locations is not None:
            package = types.ModuleType("prometheus_client")
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__ = spec
            sys.modules["prometheus_client"] = package
    import prometheus_client.parser  # noqa: F401  (now: not on the first scrape)


def main() -> None:
    """Read the settings line, watch, report the status line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        _load_parser()
        import veeksha.server.scraper  # noqa: F401

        _say({"ready": True})
        line, received = _read_line(sys.stdin.fileno())
        if not line:  # veeksha stopped before t0: nothing to watch
            return
        settings = WatchSettings(**json.loads(line))
        status, handed_over = watch(settings, received)
        _say({"status": status, "parts": handed_over})
    except _Stop:
        return


if __name__ == "__main__":
    main()
