"""The shard's pulls and the driver's local copy (``veeksha.distributed.collect``): real files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from veeksha.distributed.collect import LocalCopy, ShardFiles, pending_work


def _part(folder: Path, table: str, n: int, column: str, values: list[int]) -> None:
    path = folder / "parts" / table / f"part-{n:06d}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({column: pa.array(values, pa.int64())}), path)


def _trace(folder: Path, *lines: dict[str, int], partial: str = "") -> None:
    with (folder / "trace.jsonl").open("a") as file:
        file.writelines(json.dumps(line) + "\n" for line in lines)
        file.write(partial)


def test_pulls_carry_each_part_once_and_whole_trace_lines_only(tmp_path: Path) -> None:
    shard, copy = tmp_path / "shard", LocalCopy(tmp_path / "copy")
    shard.mkdir()
    files = ShardFiles(shard)
    _part(shard, "requests", 1, "request_id", [0])
    _trace(shard, {"session_id": 0, "request_id": 0}, partial='{"session_id": 1, "req')
    first = files.next_pull()
    assert list(first.files) == ["parts/requests/part-000001.parquet"]
    assert first.trace.count(b"\n") == 1  # the half-written line waits for the next pull
    copy.apply(first)
    with (shard / "trace.jsonl").open("a") as file:
        file.write('uest_id": 1}\n')
    _part(shard, "requests", 2, "request_id", [])
    second = files.next_pull()
    assert list(second.files) == ["parts/requests/part-000002.parquet"]
    assert second.trace == b'{"session_id": 1, "request_id": 1}\n'
    copy.apply(second)
    assert (copy.folder / "trace.jsonl").read_bytes() == (shard / "trace.jsonl").read_bytes()
    assert files.next_pull().files == {}

    # request 1 was dispatched and has no row: in flight; sessions 0 and 1 started
    in_flight, started = pending_work(copy.folder)
    assert [entry["request_id"] for entry in in_flight] == [1]
    assert started == [0, 1]


def test_a_final_pull_replaces_the_parts_with_the_finished_files(tmp_path: Path) -> None:
    shard, copy = tmp_path / "shard", LocalCopy(tmp_path / "copy")
    shard.mkdir()
    files = ShardFiles(shard)
    _part(shard, "requests", 1, "request_id", [0, 1])
    copy.apply(files.next_pull())
    # the engine finished: parts merged into the final files and deleted
    for path in (shard / "parts").rglob("*.parquet"):
        path.unlink()
    pq.write_table(
        pa.table({"request_id": pa.array([0, 1], pa.int64())}), shard / "requests.parquet"
    )
    pq.write_table(pa.table({"session_id": pa.array([0], pa.int64())}), shard / "sessions.parquet")
    (shard / "summary.json").write_text("{}")
    final = files.next_pull(final=True)
    assert set(final.files) == {"requests.parquet", "sessions.parquet", "summary.json"}
    final.outcome = {"interrupted": False}
    copy.apply(final)
    assert not (copy.folder / "parts").exists()
    assert (copy.folder / "summary.json").exists()
    assert copy.outcome == {"interrupted": False}
    assert pending_work(copy.folder) == ([], [0])
