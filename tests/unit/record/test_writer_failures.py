"""A writer failure that is not the disk's says so, and the parts written before are finalised."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.record.builders import make_metadata
from tests.unit.record.test_parquet import add_requests, parts
from veeksha.errors import RunAbortedError
from veeksha.record.columnar import RequestColumns
from veeksha.record.parquet import ResultWriter
from veeksha.record.reader import load_requests, read_metadata


def test_a_conversion_failure_is_not_blamed_on_the_disk_and_the_parts_are_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors: list[RunAbortedError] = []
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=60, on_error=errors.append)
    add_requests(writer, 0, 5)
    writer.flush()
    convert = RequestColumns.to_table

    def broken(self: RequestColumns, *args: object, **kwargs: object) -> object:
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(RequestColumns, "to_table", broken)
    add_requests(writer, 5, 3)
    with pytest.raises(RunAbortedError) as info:
        writer.flush()
    message = str(info.value)
    assert "cannot write results" not in message  # (the disk is fine)
    assert "could not convert 3 rows to Parquet" in message
    assert "OverflowError" in message
    assert "bug in veeksha" in message
    assert [str(e) for e in errors] == [message]
    assert not writer.io_error
    with pytest.raises(RunAbortedError):
        writer.add_request({})
    monkeypatch.setattr(RequestColumns, "to_table", convert)
    with pytest.raises(RunAbortedError):  # finalised, and still a failed run
        writer.close({"interrupted": "true"})
    assert not (tmp_path / "parts").exists()
    assert (tmp_path / "requests.parquet").exists()
    assert load_requests(tmp_path).column("request_id").to_pylist() == [0, 1, 2, 3, 4]
    assert read_metadata(tmp_path)["interrupted"] == "true"


def test_a_disk_failure_still_keeps_the_parts_unmerged(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path, make_metadata(), flush_interval_s=60)
    add_requests(writer, 0, 5)
    writer.flush()
    (tmp_path / "parts/requests/.part-000002.parquet.tmp").mkdir()  # the next part cannot land
    add_requests(writer, 5, 5)
    with pytest.raises(RunAbortedError, match="cannot write results to"):
        writer.flush()
    assert writer.io_error
    with pytest.raises(RunAbortedError):
        writer.close()
    assert [p.name for p in parts(tmp_path)] == ["part-000001.parquet"]
    assert not (tmp_path / "requests.parquet").exists()
