"""server_metrics.parquet: the server's own metrics (Prometheus scrapes, GPU samples) over the run.

One row per sample per scrape: ``t`` (seconds since the run's t0, when the scrape's answer came),
``metric`` (the sample's name as exposed: ``vllm:num_requests_waiting``,
``vllm:time_to_first_token_seconds_bucket``, ``gpu:utilization``), ``labels`` (a JSON object with
sorted keys: ``{"le":"0.1","model_name":"m"}``), ``value``, ``kind`` (the family's type: gauge,
counter, histogram, summary, untyped, ...) and ``canonical`` (running, waiting, kv_usage,
prefix_hits, prefix_queries, prefix_hit_rate, preemptions, finished: see
``veeksha.server.metric_names``; null for the rest, which are stored raw).

Written like the other tables: each flush is a complete small Parquet file under
``parts/server_metrics/`` (written as .tmp and renamed), merged on ``close`` into
server_metrics.parquet with the run metadata and the scraper's ``server_metrics_*`` keys, which
say why the file is empty when it is (``server_metrics_status``, ``server_metrics_error``).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from veeksha.record.columnar import _floats, _strings
from veeksha.record.parquet import read_table

__all__ = ["SERVER_METRICS_FILE", "SERVER_METRICS_SCHEMA", "Sample", "ServerMetricsWriter"]

SERVER_METRICS_FILE = "server_metrics.parquet"
_PARTS = Path("parts") / "server_metrics"

SERVER_METRICS_SCHEMA = pa.schema(
    [
        pa.field("t", pa.float64(), metadata={"unit": "s"}),
        pa.field("metric", pa.string()),
        pa.field("labels", pa.string()),
        pa.field("value", pa.float64()),
        pa.field("kind", pa.string()),
        pa.field("canonical", pa.string()),
    ]
)

#: (metric, labels as sorted JSON, value, kind, canonical name or None)
Sample = tuple[str, str, float, str, str | None]


class ServerMetricsWriter:
    """Buffers samples (from any thread) and writes them as parts; ``close`` merges them."""

    def __init__(self, run_dir: Path, metadata: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.metadata = dict(metadata)
        self.rows = 0
        self._lock = threading.Lock()
        self._columns: tuple[
            list[float], list[str], list[str], list[float], list[str], list[str | None]
        ] = (
            [],
            [],
            [],
            [],
            [],
            [],
        )
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
        ts, metrics, labels, values, kinds, canonical = columns
        # (no pa.array: it loads pandas, which a run never needs)
        arrays = [
            _floats(np.array(ts, dtype=np.float64)),
            _strings(metrics),  # type: ignore[arg-type]
            _strings(labels),  # type: ignore[arg-type]
            _floats(np.array(values, dtype=np.float64)),
            _strings(kinds),  # type: ignore[arg-type]
            _strings(canonical),
        ]
        table = pa.Table.from_arrays(arrays, schema=SERVER_METRICS_SCHEMA)
        self._parts.mkdir(parents=True, exist_ok=True)
        tmp = self._parts / f".part-{number:06d}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        tmp.rename(self._parts / f"part-{number:06d}.parquet")

    def close(self, extra_metadata: dict[str, str]) -> Path:
        """Merge the parts (and what is buffered) into server_metrics.parquet; its path."""
        self.flush()
        metadata = {**self.metadata, **extra_metadata}
        schema = SERVER_METRICS_SCHEMA.with_metadata({k: str(v) for k, v in metadata.items()})
        final = self.run_dir / SERVER_METRICS_FILE
        tmp = final.with_name(final.name + ".tmp")
        with pq.ParquetWriter(tmp, schema, compression="zstd") as out:
            for part in sorted(self._parts.glob("part-*.parquet")):
                out.write_table(read_table(part, SERVER_METRICS_SCHEMA).cast(schema))
        tmp.rename(final)
        shutil.rmtree(self._parts, ignore_errors=True)
        return final
