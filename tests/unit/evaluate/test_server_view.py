"""The server's view read from server_metrics.parquet: counters are increases over the run, a
server restart (its counters begin again from 0) counted as a reset, as Prometheus does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from veeksha.evaluate.server_view import increase, load_server_view
from veeksha.record.server_metrics import ServerMetricsWriter
from veeksha.server.scraper import parse_metrics


def _page(stop: float, length: float, abort: float | None, hits: float, queries: float) -> str:
    lines = [
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{finished_reason="stop",model_name="m"}} {stop}',
        f'vllm:request_success_total{{finished_reason="length",model_name="m"}} {length}',
    ]
    if abort is not None:  # (a label set created at its first event)
        labels = 'finished_reason="abort",model_name="m"'
        lines.append(f"vllm:request_success_total{{{labels}}} {abort}")
    lines += [
        "# TYPE vllm:prefix_cache_hits_total counter",
        f'vllm:prefix_cache_hits_total{{model_name="m"}} {hits}',
        "# TYPE vllm:prefix_cache_queries_total counter",
        f'vllm:prefix_cache_queries_total{{model_name="m"}} {queries}',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{model_name="m"} 2',
    ]
    return "\n".join(lines) + "\n"


def _view(tmp_path: Path, pages: list[str]):  # type: ignore[no-untyped-def]
    writer = ServerMetricsWriter(tmp_path, {})
    for i, page in enumerate(pages):
        writer.add(i * 0.5 - 0.1, parse_metrics(page))
    writer.close({})
    view = load_server_view(tmp_path)
    assert view is not None
    return view


def test_a_server_restart_mid_run_counts_what_it_finished_before_and_after(
    tmp_path: Path,
) -> None:
    # 10 finished before the run; 17 more (stop 15, length 2) before the restart at 1 s, then
    # 21 after it (its counters begin again from 0), one of them aborted
    pages = [
        _page(8, 2, None, 100, 1000),
        _page(20, 3, None, 150, 1500),
        _page(23, 4, None, 200, 2000),
        _page(5, 0, None, 10, 300),  # restarted
        _page(19, 1, 1, 60, 1000),
    ]
    view = _view(tmp_path, pages)
    assert view.delta("finished") == 17 + 21
    section = view.section()
    assert section["finished"] == 38
    assert section["prefix_hit_rate"] == pytest.approx((100 + 60) / (1000 + 1000))
    assert section["running_peak"] == 2  # (a gauge is read as it is)


def test_without_a_restart_the_increase_is_the_last_minus_the_first(tmp_path: Path) -> None:
    view = _view(tmp_path, [_page(8, 2, None, 0, 0), _page(30, 4, 2, 0, 0)])
    assert view.delta("finished") == 26  # (the abort series, new, counts from 0)


def test_increase_reads_a_drop_as_a_reset() -> None:
    assert increase(np.array([10.0, 14.0, 3.0, 5.0])) == 4 + 3 + 2
    assert increase(np.array([10.0, 14.0])) == 4
    assert increase(np.array([2.0, 5.0]), start=0.0) == 5
    assert increase(np.array([])) == 0
