"""The prefix_sharing check on hand-made rows: cached tokens within what the hash ids allow
pass, with their hit ratio; more than the ids allow fails; no hash ids or no numbers skip."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tests.unit.generate.traces.helpers import trace_scenario, write_jsonl
from veeksha.evaluate.health import HealthInput
from veeksha.evaluate.trace_sharing import PREFIX_SHARING

IDS = [[0, 1], [0, 1], [0, 2], [3, 4]]


def _input(tmp_path: Path, cached: list[int | None], ids: list[list[int]] = IDS) -> HealthInput:
    rows = [{"input_length": 16, "output_length": 2, "hash_ids": h} for h in ids]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    scenario = trace_scenario(
        path, generator={"flavor": {"type": "shared_prefix", "block_size": 8}}
    )
    n = len(ids)
    requests = pa.table(
        {
            "session_id": pa.array(range(n), pa.int64()),
            "parents": pa.array([[]] * n, pa.list_(pa.int32())),
            "sent_at": pa.array([float(i) for i in range(n)]),
            "first_chunk_at": pa.array([i + 0.5 for i in range(n)]),
            "prompt_tokens_total": pa.array([16] * n, pa.int32()),
            "cached_tokens": pa.array(cached, pa.int32()),
        }
    )
    return HealthInput(requests, requests, pa.table({}), scenario)


def test_hits_within_the_ids_pass_with_their_ratio(tmp_path: Path) -> None:
    result = PREFIX_SHARING(_input(tmp_path, [0, 15, 8, 0]))
    assert result.status == "PASS"
    assert result.statistics["implied_tokens"] == 15 + 8  # (16 shared, capped at 16 - 1)
    assert result.statistics["hit_ratio"] == 1.0
    half = PREFIX_SHARING(_input(tmp_path, [0, 8, 0, 0]))
    assert half.status == "PASS"
    assert half.statistics["hit_ratio"] == 8 / 23


def test_more_hits_than_the_ids_allow_fail(tmp_path: Path) -> None:
    result = PREFIX_SHARING(_input(tmp_path, [8, 15, 16, 8]))
    assert result.status == "FAIL"
    assert result.statistics["over_implied"] == 3


def test_no_numbers_or_no_hash_ids_skip(tmp_path: Path) -> None:
    assert PREFIX_SHARING(_input(tmp_path, [None] * 4)).status == "SKIP"
    lengths_only = _input(tmp_path, [0, 8, 8, 0])
    log = write_jsonl(tmp_path / "log.jsonl", [{"input_length": 16, "output_length": 2}] * 4)
    plain = HealthInput(
        lengths_only.requests, lengths_only.measured, lengths_only.sessions, trace_scenario(log)
    )
    result = PREFIX_SHARING(plain)
    assert (result.status, result.detail) == ("SKIP", "the trace has no hash ids")
