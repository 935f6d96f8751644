"""Two merged run folders compared file by file: the streaming merge against the reference."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

#: Files two merges of the same shards write byte for byte the same.
SAME_BYTES = ("trace.jsonl", "summary.json", "health.json", "health.txt", "slo.json")


def assert_same_merge(expected: Path, actual: Path) -> None:
    """``actual`` holds what ``expected`` holds: the same files; the same rows, order, schema
    and metadata (but ``finalized_at``) in the Parquet files; the same bytes in the others."""
    assert sorted(p.name for p in actual.iterdir()) == sorted(p.name for p in expected.iterdir())
    for name in ("requests.parquet", "sessions.parquet", "server_metrics.parquet"):
        if not (expected / name).exists():
            continue
        old, new = pq.read_table(expected / name), pq.read_table(actual / name)
        assert new.schema.equals(old.schema, check_metadata=False), name
        assert [f.metadata for f in new.schema] == [f.metadata for f in old.schema], name
        assert new.equals(old), name
        old_meta = dict(old.schema.metadata or {})
        new_meta = dict(new.schema.metadata or {})
        assert old_meta.keys() == new_meta.keys(), name
        for key in old_meta.keys() - {b"finalized_at", b"ARROW:schema"}:
            assert new_meta[key] == old_meta[key], (name, key)
    for name in SAME_BYTES:
        if (expected / name).exists():
            assert (actual / name).read_bytes() == (expected / name).read_bytes(), name
    metrics = sorted(p.name for p in (expected / "metrics").glob("*.csv"))
    assert metrics == sorted(p.name for p in (actual / "metrics").glob("*.csv"))
    for name in metrics:
        old_csv = (expected / "metrics" / name).read_bytes()
        assert (actual / "metrics" / name).read_bytes() == old_csv, name
