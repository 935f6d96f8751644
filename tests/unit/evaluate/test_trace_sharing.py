"""The prefix_sharing check on hand-made rows: cached tokens within what the hash ids allow
pass, with their hit ratio; more than the ids allow fails; no hash ids or no numbers skip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.unit.generate.traces.helpers import trace_scenario, write_jsonl
from veeksha.evaluate.health import HealthInput
from veeksha.evaluate.trace_sharing import PREFIX_SHARING

IDS = [[0, 1], [0, 1], [0, 2], [3, 4]]


def _input(
    tmp_path: Path,
    cached: list[int | None],
    ids: list[list[int]] = IDS,
    clients: list[dict[str, Any]] | None = None,
) -> HealthInput:
    """The rows of ``ids`` sent one a second; with ``clients``, row i is client i mod n's."""
    rows = [{"input_length": 16, "output_length": 2, "hash_ids": h} for h in ids]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    extra: dict[str, Any] = {} if clients is None else {"clients": clients}
    scenario = trace_scenario(
        path, generator={"flavor": {"type": "shared_prefix", "block_size": 8}}, **extra
    )
    n = len(ids)
    columns: dict[str, Any] = {
        "session_id": pa.array(range(n), pa.int64()),
        "parents": pa.array([[]] * n, pa.list_(pa.int32())),
        "sent_at": pa.array([float(i) for i in range(n)]),
        "first_chunk_at": pa.array([i + 0.5 for i in range(n)]),
        "prompt_tokens_total": pa.array([16] * n, pa.int32()),
        "cached_tokens": pa.array(cached, pa.int32()),
    }
    if clients is not None:
        columns["client"] = pa.array([clients[i % len(clients)]["name"] for i in range(n)])
    requests = pa.table(columns)
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


def test_each_target_shares_only_within_its_own_cache(tmp_path: Path) -> None:
    """Rows alternate between clients a and b on two servers: row 1 ([0, 1]) shares nothing
    with anything its own server saw, row 2 ([0, 2]) its first block with row 0 (was: the
    sharing across the two servers was expected, 15 more tokens, and the ratio read 8/23)."""
    two = [
        {"name": "a", "api_base": "http://127.0.0.1:1/v1", "model": "m"},
        {"name": "b", "api_base": "http://127.0.0.1:2/v1", "model": "m"},
    ]
    result = PREFIX_SHARING(_input(tmp_path, [0, 0, 8, 0], clients=two))
    assert result.status == "PASS"
    assert result.statistics["implied_tokens"] == 8
    assert result.statistics["hit_ratio"] == 1.0
    assert result.statistics["caches"] == 2
    assert result.detail.endswith("; each of 2 targets' caches apart")
    # a hit on b of what only a had seen is above what b's cache can hold
    over = PREFIX_SHARING(_input(tmp_path, [0, 15, 8, 0], clients=two))
    assert over.statistics["over_implied"] == 1
    # two clients of one target (its api_base and model) share its cache
    same = [two[0], {**two[1], "api_base": two[0]["api_base"]}]
    shared = PREFIX_SHARING(_input(tmp_path, [0, 15, 8, 0], clients=same))
    assert shared.statistics["implied_tokens"] == 15 + 8
    assert (shared.statistics["caches"], shared.statistics["over_implied"]) == (1, 0)
