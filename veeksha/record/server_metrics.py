"""server_metrics.parquet: the server's own metrics (Prometheus scrapes, GPU samples) over the run.

One row per sample per scrape: ``t`` (seconds since the run's t0, when the scrape's answer came),
``metric`` (the sample's name as exposed: ``vllm:num_requests_waiting``,
``vllm:time_to_first_token_seconds_bucket``, ``gpu:utilization``), ``labels`` (a JSON object with
sorted keys: ``{"le":"0.1","model_name":"m"}``), ``value``, ``kind`` (the family's type: gauge,
counter, histogram, summary, untyped, ...) and ``canonical`` (running, waiting, kv_usage,
prefix_hits, prefix_queries, prefix_hit_rate, preemptions, finished: see
``veeksha.server.metric_names``; null for the rest, which are stored raw).

Written in parts: each flush is a complete small JSON file of columns under
``parts/server_metrics/`` (written as .tmp and renamed), merged by :func:`merge_parts` into
server_metrics.parquet with the run metadata and the scraper's ``server_metrics_*`` keys, which
say why the file is empty when it is (``server_metrics_status``, ``server_metrics_error``). The
parts need no Arrow: the server watch's process (``veeksha.server.watch_process``) writes them
without importing pyarrow or numpy (~0.25 CPU-s a run), and veeksha's main process, which has
them loaded, merges them after the drain (the watch's process merges them itself only when
veeksha died first).
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "SERVER_METRICS_FILE",
    "Sample",
    "ServerMetricsWriter",
    "merge_parts",
    "server_metrics_schema",
    "status_metadata",
]

SERVER_METRICS_FILE = "server_metrics.parquet"
_PARTS = Path("parts") / "server_metrics"
_COLUMNS = ("t", "metric", "labels", "value", "kind", "canonical")

#: (metric, labels as sorted JSON, value, kind, canonical name or None)
Sample = tuple[str, str, float, str, str | None]


def server_metrics_schema() -> pa.Schema:
    """server_metrics.parquet's columns (imports pyarrow: only where the file is merged)."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("t", pa.float64(), metadata={"unit": "s"}),
            pa.field("metric", pa.string()),
            pa.field("labels", pa.string()),
            pa.field("value", pa.float64()),
            pa.field("kind", pa.string()),
            pa.field("canonical", pa.string()),
        ]
    )


def status_metadata(status: dict[str, object]) -> dict[str, str]:
    """The file's ``server_metrics_*`` keys of what the watch reported (a list, the GPU
    exporters' accounts, as JSON)."""
    return {
        f"server_metrics_{key}": (
            "" if value is None else json.dumps(value) if isinstance(value, list) else str(value)
        )
        for key, value in status.items()
    }


class ServerMetricsWriter:
    """Buffers samples (from any thread) and writes them as parts; ``close`` merges them."""

    def __init__(self, run_dir: Path, metadata: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.metadata = dict(metadata)
        self.rows = 0
        self._lock = threading.Lock()
        self._columns: tuple[
            list[float], list[str], list[str], list[float], list[str], list[str | None]
        ] = ([], [], [], [], [], [])
        self._parts = run_dir / _PARTS
        self._next = 1

    def add(self, t: float, samples: list[Sample]) -> None:
        """Samples taken at ``t`` seconds since t0."""
        with self._lock:
            ts, metrics, labels, values, kinds, canonical = self._columns
            for metric, label, value, kind, name in samples:
                ts.append(t)
                metrics.append(metric)
                labels.append(label)
                values.append(value)
                kinds.append(kind)
                canonical.append(name)
            self.rows += len(samples)

    def flush(self) -> None:
        """Write what is buffered as one part (nothing when nothing is)."""
        with self._lock:
            columns = self._columns
            if not columns[0]:
                return
            self._columns = ([], [], [], [], [], [])
            number = self._next
            self._next += 1
        self._parts.mkdir(parents=True, exist_ok=True)
        tmp = self._parts / f".part-{number:06d}.json.tmp"
        tmp.write_text(json.dumps(dict(zip(_COLUMNS, columns, strict=True))), encoding="utf-8")
        tmp.rename(self._parts / f"part-{number:06d}.json")

    def close(self, extra_metadata: dict[str, str]) -> Path:
        """Merge the parts (and what is buffered) into server_metrics.parquet; its path."""
        self.flush()
        return merge_parts(self.run_dir, {**self.metadata, **extra_metadata})


def merge_parts(run_dir: Path, metadata: dict[str, str]) -> Path:
    """Merge ``run_dir``'s parts into server_metrics.parquet (one row group a part) with
    ``metadata``; its path. The parts are removed."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from veeksha.record.columnar import _floats, _strings

    schema = server_metrics_schema().with_metadata({k: str(v) for k, v in metadata.items()})
    final = run_dir / SERVER_METRICS_FILE
    tmp = final.with_name(final.name + ".tmp")
    parts = run_dir / _PARTS
    with pq.ParquetWriter(tmp, schema, compression="zstd") as out:
        for part in sorted(parts.glob("part-*.json"), key=lambda p: p.name):
            columns = json.loads(part.read_text(encoding="utf-8"))
            # (no pa.array: it loads pandas, which a run never needs)
            arrays = [
                _floats(np.array(columns["t"], dtype=np.float64)),
                _strings(columns["metric"]),
                _strings(columns["labels"]),
                _floats(np.array(columns["value"], dtype=np.float64)),
                _strings(columns["kind"]),
                _strings(columns["canonical"]),
            ]
            out.write_table(pa.Table.from_arrays(arrays, schema=schema))
    tmp.rename(final)
    shutil.rmtree(parts, ignore_errors=True)
    return final
