"""``veeksha diff``'s matching: the points both results measured, the newest result of a
folder, and nothing comparable as bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veeksha.errors import ConfigurationError
from veeksha.experiment.microbench.diff import compare


def _write(folder: Path, document: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{document['benchmark']}_results.json").write_text(json.dumps(document))


def _stress(levels: list[float], tput: float, created: str, traffic: str = "concurrency") -> dict:
    points = [{"level": v, "output_tokens_per_s": tput * v, "e2e_p50_ms": 100.0} for v in levels]
    return {"benchmark": "stress", "traffic": traffic, "created_at": created, "points": points}


def test_levels_measured_by_both_are_compared_and_the_newest_result_wins(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "old", _stress([1, 2], 1.0, "2026-01-01T00:00:00+00:00"))
    _write(tmp_path / "a" / "new", _stress([1, 2, 4], 10.0, "2026-02-01T00:00:00+00:00"))
    _write(tmp_path / "b", _stress([2, 4, 8], 15.0, "2026-02-01T00:00:00+00:00"))
    decode = {"benchmark": "decode", "points": [], "fits": []}
    _write(tmp_path / "b" / "d", decode)  # only on one side: not compared
    pairs, changes, notes = compare(tmp_path / "a", tmp_path / "b")
    assert list(pairs) == ["stress"]
    tput = {c.point: c.change for c in changes if c.metric == "output_tokens_per_s"}
    assert tput == {"c=2": pytest.approx(0.5), "c=4": pytest.approx(0.5)}
    assert any("2 stress results; using the newest" in note for note in notes)


def test_different_traffic_or_no_common_benchmark_is_nothing_comparable(tmp_path: Path) -> None:
    _write(tmp_path / "a", _stress([1], 1.0, "x"))
    _write(tmp_path / "b", _stress([1], 1.0, "x", traffic="rate"))
    with pytest.raises(ConfigurationError, match=r"nothing comparable.*concurrency against rate"):
        compare(tmp_path / "a", tmp_path / "b")
    (tmp_path / "c" / "x").mkdir(parents=True)
    (tmp_path / "c" / "x" / "prefill_results.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match=r"prefill_results\.json: not a readable results"):
        compare(tmp_path / "a", tmp_path / "c")
