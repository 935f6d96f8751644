"""ResultWriter → real Parquet files, re-read with pyarrow, pandas and veeksha's reader."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.unit.record.builders import T0, make_metadata, make_record, make_result, ns
from veeksha.errors import ConfigurationError, RunAbortedError
from veeksha.record.columns import REQUESTS_SCHEMA, SESSIONS_SCHEMA
from veeksha.record.parquet import ResultWriter, run_metadata
from veeksha.record.reader import is_partial, load_requests, load_sessions, read_metadata
from veeksha.record.rows import SessionRecord, request_row, session_row


def add_requests(writer: ResultWriter, first: int, count: int) -> None:
    for i in range(first, first + count):
        result = make_result(request_id=i) if i % 4 else None  # every 4th one cancelled
        phase = "warmup" if i < 2 else "measured"
        writer.add_request(request_row(make_record(result, request_id=i, phase=phase), T0))


def add_session(writer: ResultWriter, session_id: int) -> None:
    record = SessionRecord("run-1", "measured", session_id, ns(1.0), ns(3.0), 4, 4, 3, 0, 1, 0.5)
    writer.add_session(session_row(record, T0))


def parts(run_dir: Path, name: str = "requests") -> list[Path]:
    return sorted((run_dir / "parts" / name).glob("part-*.parquet"))


def test_finalised_files_are_typed_with_units_and_metadata(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=0.05)
    add_requests(writer, 0, 10)
    add_session(writer, 3)
    writer.close({"health_verdict": "pass", "interrupted": "false"})

    assert not (tmp_path / "parts").exists()
    requests = pq.read_table(tmp_path / "requests.parquet")
    assert requests.num_rows == 10
    assert requests.schema.equals(REQUESTS_SCHEMA)  # types, names, order
    schema = pq.read_schema(tmp_path / "requests.parquet")
    assert schema.field("ttfc").metadata[b"unit"] == b"s"
    assert schema.field("chunk_times").metadata[b"unit"] == b"s since t0"
    metadata = read_metadata(tmp_path)
    assert metadata["seed"] == "42"
    assert metadata["health_verdict"] == "pass"
    assert metadata["interrupted"] == "false"
    assert metadata["partial"] == "false"
    assert "finalized_at" in metadata
    sessions = pq.read_table(tmp_path / "sessions.parquet")
    assert sessions.schema.equals(SESSIONS_SCHEMA)
    assert sessions.column("duration").to_pylist() == [pytest.approx(2.0)]

    frame = pd.read_parquet(tmp_path / "requests.parquet")
    measured = frame[(frame.phase == "measured") & (frame.status == "ok")]
    assert len(measured) == 6
    assert measured.ttfc.quantile(0.99) == pytest.approx(0.2)
    assert str(frame.node_id.dtype) == "int32"
    assert list(frame.tbc.iloc[1]) == pytest.approx([0.1, 0.2])
    assert frame.status.value_counts()["cancelled"] == 3


def test_parts_are_written_before_close_and_readable(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=60)
    add_requests(writer, 0, 5)
    writer.flush()
    add_requests(writer, 5, 5)
    add_session(writer, 1)
    writer.flush()
    try:
        assert len(parts(tmp_path)) == 2
        assert not any(p.name.endswith(".tmp") for p in (tmp_path / "parts/requests").iterdir())
        assert is_partial(tmp_path)
        assert load_requests(tmp_path).column("request_id").to_pylist() == list(range(10))
        assert load_sessions(tmp_path).num_rows == 1
        assert read_metadata(tmp_path)["partial"] == "true"
        assert read_metadata(tmp_path)["scenario_hash"] == "abc123"
        assert len(pd.read_parquet(tmp_path / "parts" / "requests")) == 10
        part_schema = pq.read_schema(parts(tmp_path)[0])
        assert part_schema.field("e2e").metadata[b"unit"] == b"s"
        # parts are written without dictionary pages (cheaper a tick); the final file has them
        chunk = pq.ParquetFile(parts(tmp_path)[0]).metadata.row_group(0).column(0)
        assert not any("DICTIONARY" in encoding for encoding in chunk.encodings)
        from_parts = load_requests(tmp_path)
    finally:
        writer.close()
    assert load_requests(tmp_path).num_rows == 10
    assert load_requests(tmp_path).equals(from_parts)
    final = pq.ParquetFile(tmp_path / "requests.parquet").metadata.row_group(0).column(0)
    assert any("DICTIONARY" in encoding for encoding in final.encodings)


def wait_for_a_tick(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set after the writer thread's next tick that wrote something."""
    ticked = threading.Event()
    original = ResultWriter._write_parts

    def write_parts(self: ResultWriter) -> None:
        original(self)
        if any(self.rows_written.values()):
            ticked.set()

    monkeypatch.setattr(ResultWriter, "_write_parts", write_parts)
    return ticked


def test_periodic_flush_without_being_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticked = wait_for_a_tick(monkeypatch)
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=0.02)
    add_requests(writer, 0, 3)
    try:
        assert ticked.wait(10)
        assert load_requests(tmp_path).num_rows == 3
    finally:
        writer.close()


def test_row_threshold_wakes_the_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ticked = wait_for_a_tick(monkeypatch)
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=600, flush_rows=4)
    add_requests(writer, 0, 4)
    try:
        assert ticked.wait(10)
        assert load_requests(tmp_path).num_rows == 4
    finally:
        writer.close()


def test_empty_run_has_typed_empty_files(tmp_path: Path) -> None:
    ResultWriter(tmp_path, make_metadata()).close()
    assert pq.read_table(tmp_path / "requests.parquet").schema.equals(REQUESTS_SCHEMA)
    assert load_sessions(tmp_path).num_rows == 0


def test_merge_regroups_many_parts_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("veeksha.record.parquet._MERGE_ROWS", 7)
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=60)
    for start in range(0, 30, 3):
        add_requests(writer, start, 3)
        writer.flush()
    add_requests(writer, 30, 8)  # a part larger than a group: written on its own
    writer.flush()
    add_requests(writer, 38, 3)
    writer.close()
    file = pq.ParquetFile(tmp_path / "requests.parquet")
    groups = [file.metadata.row_group(i).num_rows for i in range(file.metadata.num_row_groups)]
    assert groups == [6, 6, 6, 6, 6, 8, 3]  # parts of 3 by two (a third would pass 7 rows)
    assert file.read().column("request_id").to_pylist() == list(range(41))


def test_write_error_raises_run_aborted_and_keeps_parts(tmp_path: Path) -> None:
    errors: list[RunAbortedError] = []
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=60, on_error=errors.append)
    add_requests(writer, 0, 5)
    writer.flush()
    # The next part cannot be written: its temporary path is taken by a folder (works as root).
    (tmp_path / "parts/requests/.part-000002.parquet.tmp").mkdir()
    add_requests(writer, 5, 5)
    with pytest.raises(RunAbortedError, match=r"cannot write results to .*part-000002"):
        writer.flush()
    assert errors
    assert "kept" in str(errors[0])
    with pytest.raises(RunAbortedError):
        writer.add_request({})
    with pytest.raises(RunAbortedError):
        writer.close()
    assert [p.name for p in parts(tmp_path)] == ["part-000001.parquet"]
    assert not (tmp_path / "requests.parquet").exists()
    assert load_requests(tmp_path).num_rows == 5


def test_unwritable_output_dir_is_a_configuration_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigurationError, match="cannot create the results folder"):
        ResultWriter(blocker / "run", make_metadata())


def test_close_is_idempotent(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path, make_metadata())
    add_requests(writer, 0, 2)
    writer.close()
    writer.close()
    assert load_requests(tmp_path).num_rows == 2


def test_run_metadata_strings() -> None:
    wall = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    meta = run_metadata(
        run_id="r", scenario_hash="h", seed=0, t0_ns=T0, t0_wall=wall, target="simulator"
    )
    assert meta["seed"] == "0"
    assert meta["t0_wall_time"] == "2025-01-02T03:04:05+00:00"
    assert meta["t0_monotonic_ns"] == str(T0)
    assert all(isinstance(v, str) for v in meta.values())


def test_reader_rejects_a_folder_without_results(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="holds no veeksha results"):
        load_requests(tmp_path)


def test_reader_lists_columns_in_schema_order(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=60)
    add_requests(writer, 0, 1)
    writer.flush()
    table = load_requests(tmp_path)
    writer.close()
    assert table.schema.names == REQUESTS_SCHEMA.names
    assert isinstance(table, pa.Table)
