"""``chunks_coalesced`` in a real run's requests.parquet: a whole answer written at once reaches
the worker in one read (every chunk after the first shares it), the same answer one byte a write
in one read per chunk (none shares)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.hostile.harness import HostileServer, hostile_run, hostile_scenario

BEHAVIOURS = "tests.integration.hostile.behaviours_coalesce:"


def test_chunks_that_share_a_read_are_counted(tmp_path: Path) -> None:
    with HostileServer(BEHAVIOURS + "whole_then_bytewise", tmp_path) as server:
        run = hostile_run(tmp_path, hostile_scenario(server.base_url, sessions=1), in_process=True)
    assert run.audit is not None
    assert run.audit.kinds() == {("ok", ""): 3}
    rows = sorted(run.rows, key=lambda row: row["node_id"])
    for row, coalesced in zip(rows, (5, 0, 5), strict=True):  # 6 chunks an answer
        times = row["chunk_times"]
        assert len(times) == 6
        assert row["chunks_coalesced"] == coalesced
        assert len(set(times)) == len(times) - coalesced
        assert row["tbc"].count(0.0) == coalesced
