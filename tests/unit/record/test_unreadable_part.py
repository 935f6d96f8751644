"""An unfinished run's folder with a part file that cannot be read (parts are renamed whole, so
only a damaged disk or a hand makes one): the readers skip it, say which, and keep every row of
the others; the distributed merge's shard reader does the same."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.unit.record.builders import T0, make_metadata, make_record, make_result
from veeksha.distributed.shard_rows import result_files
from veeksha.record.parquet import PARTS_DIR, REQUESTS_FILE, ResultWriter
from veeksha.record.reader import is_partial, load_requests
from veeksha.record.rows import request_row


def _partial_run(run_dir: Path, parts: int, rows_each: int) -> list[Path]:
    """A run folder holding ``parts`` request parts of ``rows_each`` rows, never finalised."""
    writer = ResultWriter(run_dir, make_metadata(), flush_interval_s=60)
    request_id = 0
    for _ in range(parts):
        for _ in range(rows_each):
            record = make_record(make_result(request_id=request_id), request_id=request_id)
            writer.add_request(request_row(record, T0))
            request_id += 1
        writer.flush()  # (one part per flush)
    # left unfinished, as a killed run leaves it: the writer's thread ends without a merge
    writer._stopping = True
    writer._wake.set()
    writer._thread.join()
    files = sorted((run_dir / PARTS_DIR / "requests").glob("part-*.parquet"))
    assert len(files) == parts
    return files


def test_an_unreadable_part_is_skipped_and_named_and_the_others_are_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = _partial_run(tmp_path, parts=3, rows_each=5)
    damaged = files[1]
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])  # cut in half

    with caplog.at_level(logging.WARNING):
        table = load_requests(tmp_path)

    assert is_partial(tmp_path)
    assert not (tmp_path / REQUESTS_FILE).exists()
    assert sorted(table.column("request_id").to_pylist()) == [*range(5), *range(10, 15)]
    assert any(str(damaged) in record.getMessage() for record in caplog.records)


def test_a_shards_unreadable_part_is_left_out_of_the_merge_and_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    files = _partial_run(tmp_path, parts=3, rows_each=4)
    files[0].write_bytes(b"not parquet at all")

    with caplog.at_level(logging.WARNING):
        readable = result_files(tmp_path, REQUESTS_FILE, "requests")

    assert readable == files[1:]
    assert any(str(files[0]) in record.getMessage() for record in caplog.records)
