"""``ServerWatch``: what veeksha watches of the server while a run goes: its Prometheus metrics
(``MetricsScraper``) and, for a managed server on this host, its GPUs (``GpuSampler``), both into
server_metrics.parquet. The run starts it at t0 and stops it when the traffic ends; nothing of
it runs on the event loop."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from veeksha.record.server_metrics import ServerMetricsWriter
from veeksha.server.gpu import GpuSampler
from veeksha.server.scraper import MetricsScraper

if TYPE_CHECKING:
    from veeksha.engine.target import Target
    from veeksha.scenario.models import Scenario

__all__ = ["ServerWatch", "metrics_url"]


class Log(Protocol):
    """Where the watch says what it skipped or what failed (the run's RunLog)."""

    def info(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...


def metrics_url(api_base: str) -> str:
    """The default metrics address: the api_base's server root + ``/metrics``."""
    parts = urlsplit(api_base)
    return f"{parts.scheme}://{parts.netloc}/metrics"


class ServerWatch:
    """The scraper (and GPU sampler) of one run, writing one server_metrics.parquet."""

    def __init__(
        self,
        writer: ServerMetricsWriter,
        scraper: MetricsScraper | None,
        gpu: GpuSampler | None,
        log: Log,
    ) -> None:
        self._log = log
        self._writer = writer
        self._scraper = scraper
        self._gpu = gpu

    @classmethod
    def for_run(
        cls,
        scenario: Scenario,
        target: Target,
        run_dir: Path,
        t0_ns: int,
        metadata: dict[str, str],
        log: Log,
    ) -> ServerWatch | None:
        """The watch of a run, or None (disabled, or a dry run: no server)."""
        config = scenario.server_metrics
        if not config.enabled or target.kind == "dry_run":
            return None
        import prometheus_client.parser  # noqa: F401  (now, before t0: not on the scraper's first tick)

        writer = ServerMetricsWriter(run_dir, metadata)
        url = config.url or metrics_url(target.api_base)
        scraper = MetricsScraper(url, target.api_key, config.interval, t0_ns, writer, log.warning)
        gpu = None
        if config.gpu:
            program = GpuSampler.find()
            if target.kind != "managed":
                log.info("GPU sampling skipped: the server is not a managed server on this host")
            elif program is None:
                log.info("GPU sampling skipped: nvidia-smi is not on PATH")
            else:
                gpu = GpuSampler(program, config.interval, t0_ns, writer)
        return cls(writer, scraper, gpu, log)

    def start(self) -> None:
        if self._scraper is not None:
            self._scraper.start()
        if self._gpu is not None:
            self._gpu.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling, finalise server_metrics.parquet; what happened (for summary.json)."""
        status: dict[str, Any] = {} if self._scraper is None else self._scraper.stop()
        if self._gpu is not None:
            status["gpu_samples"] = self._gpu.stop()
        status["rows"] = self._writer.rows
        try:
            self._writer.close(
                {
                    f"server_metrics_{key}": "" if value is None else str(value)
                    for key, value in status.items()
                }
            )
        except OSError as exc:  # (the disk: the run's own files say so; these are extras)
            status["write_error"] = str(exc)
            self._log.warning(f"server metrics: cannot write server_metrics.parquet: {exc}")
        return status
