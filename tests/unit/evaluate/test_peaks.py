"""The throughput section's peaks: the busiest one-second interval of output tokens, wherever it
starts (each ok request's tokens spread over its chunks), and the most requests in flight at one
instant."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.unit.evaluate.builders import request, requests_table
from veeksha.evaluate.metrics import measured_window
from veeksha.evaluate.peaks import peaks
from veeksha.evaluate.source import ColumnSource


def test_the_docstrings_worked_example() -> None:
    rows = [
        request(0, sent=10.0, chunks=(10.2, 10.4, 11.1, 11.3), output_tokens=4),
        request(1, sent=10.5, chunks=(10.9,), output_tokens=2),
    ]
    table = requests_table(rows)
    window = measured_window(table)
    assert window == pytest.approx((10.0, 11.3))
    assert peaks(table, window) == {
        "peak_output_tokens_per_s": pytest.approx(5.0),
        "peak_concurrent_requests": 2,
    }


def test_tokens_are_spread_over_chunks_failures_add_none_but_occupy_the_server() -> None:
    rows = [
        # 30 tokens in 3 chunks: 10 a chunk, two of them in [0, 1), one in [1, 2)
        request(0, sent=0.0, chunks=(0.2, 0.9, 1.5), output_tokens=30),
        # a failure: no tokens counted, but in flight from 0.1 to 2.5
        request(1, sent=0.1, chunks=(0.3,), completed=2.5, status="error", output_tokens=None),
        # ends exactly as the next starts: never two at once
        request(2, sent=2.5, chunks=(2.6, 2.7), output_tokens=4),
    ]
    table = requests_table(rows)
    found = peaks(table, measured_window(table))
    assert found["peak_output_tokens_per_s"] == pytest.approx(20.0)
    assert found["peak_concurrent_requests"] == 2  # (0 and 1 overlap; 1 and 2 only touch)


def test_carried_requests_count_inside_the_window_only() -> None:
    measured = requests_table([request(0, sent=5.0, chunks=(5.5, 6.2), output_tokens=2)])
    # sent before the window opened (a warmup's), 3 of its 6 chunks inside it
    carried = requests_table(
        [request(9, sent=3.0, chunks=(4.0, 4.5, 4.9, 5.1, 5.2, 5.3), output_tokens=60)]
    )
    found = peaks(measured, measured_window(measured), carried)
    assert found["peak_output_tokens_per_s"] == pytest.approx(31.0)  # 3 × 10 + 1 (5.1 to 6.1)
    assert found["peak_concurrent_requests"] == 2


def test_a_burst_across_a_whole_second_is_found_whole() -> None:
    """20 tokens at 0.9 and 1.1 s: fixed seconds from the start (vLLM's) read 10 each; the
    busiest interval holds both. A window under a second has no such interval."""
    rows = [
        request(0, sent=0.0, chunks=(0.9,), output_tokens=10),
        request(1, sent=0.0, chunks=(1.1,), output_tokens=10),
        request(2, sent=0.0, chunks=(3.0,), output_tokens=1),
    ]
    table = requests_table(rows)
    assert peaks(table, measured_window(table))["peak_output_tokens_per_s"] == pytest.approx(20)
    short = requests_table([request(0, sent=0.0, chunks=(0.3, 0.6), output_tokens=50)])
    found = peaks(short, measured_window(short))
    assert found == {"peak_output_tokens_per_s": None, "peak_concurrent_requests": 1}


def test_no_window_no_peaks_and_a_file_source_reads_as_the_table(tmp_path: Path) -> None:
    assert peaks(requests_table([]), None) == {
        "peak_output_tokens_per_s": None,
        "peak_concurrent_requests": None,
    }
    rows = [request(i, sent=i * 0.3, chunks=(i * 0.3 + 0.1, i * 0.3 + 0.2)) for i in range(50)]
    table = requests_table(rows)
    path = tmp_path / "part.parquet"
    pq.write_table(table, path, row_group_size=7)  # (batches that split the rows)
    source = ColumnSource(table.schema, files=[path])
    window = measured_window(table)
    assert peaks(source, window) == peaks(table, window)


def test_a_long_window_is_binned_coarser_and_still_finds_its_peak() -> None:
    """A window of a week: ``MAX_BINS`` bins of 0.3 s, not 60 million of 10 ms."""
    from veeksha.evaluate.peaks import MAX_BINS

    week = 7 * 86400.0
    rows = [
        request(0, sent=0.0, chunks=(100.0, 100.2, 100.4), output_tokens=30),
        request(1, sent=week - 1.0, chunks=(week,), output_tokens=1),
    ]
    table = requests_table(rows)
    found = peaks(table, measured_window(table))
    assert week / MAX_BINS == pytest.approx(0.3024)
    # the three chunks of request 0 in one interval of 3 bins (0.907 s)
    assert found["peak_output_tokens_per_s"] == pytest.approx(30 / (3 * week / MAX_BINS))
