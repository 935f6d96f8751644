"""``runtime.distributed``: the Ray settings a driver reads (the engine ignores them)."""

from __future__ import annotations

import pytest

from tests.unit.scenario.helpers import issues_of, load


def test_defaults_and_values() -> None:
    assert load("seed: 1\n").runtime.distributed is None
    dist = load("runtime:\n  distributed: {}\n").runtime.distributed
    assert dist is not None
    assert (dist.backend, dist.address, dist.shards, dist.workers_per_shard) == (
        "ray",
        "auto",
        None,
        None,
    )
    for address in ("local", "10.0.0.5:6379", "head-node.internal:6379", "ray://[::1]:10001"):
        text = f"runtime:\n  distributed: {{address: '{address}', shards: 2}}\n"
        assert load(text).runtime.distributed.address == address  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("line", "key", "needle"),
    [
        ("    address: nohost", "address", "not auto, local, host:port"),
        ("    address: 'h:99999'", "address", "not auto, local, host:port"),
        ("    shards: 0", "shards", "greater than or equal to 1"),
        ("    workers_per_shard: -2", "workers_per_shard", "greater than or equal to 1"),
        ("    backend: dask", "backend", "ray"),
        ("    nodes: 3", "nodes", ""),
    ],
)
def test_bad_values_are_reported_at_their_line(line: str, key: str, needle: str) -> None:
    text = f"seed: 1\nruntime:\n  distributed:\n{line}\n"
    issues = issues_of(text)
    assert len(issues) == 1, [str(i) for i in issues]
    issue = issues[0]
    assert issue.line == 4
    assert f"runtime.distributed.{key}" in str(issue)
    assert needle in str(issue)
