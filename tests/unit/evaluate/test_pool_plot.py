"""The three pools over time: interval counting and session starts."""

from __future__ import annotations

import numpy as np

from veeksha.evaluate.pool_plot import _session_starts, pool_levels


def test_levels_count_the_intervals_holding_each_instant() -> None:
    starts = np.array([0.0, 1.0, 1.0, np.nan])
    ends = np.array([2.0, 3.0, 1.0, 5.0])  # [1, 1) holds nothing; the NaN row is left out
    times = np.array([0.0, 0.5, 1.0, 2.0, 2.5, 3.0])
    assert pool_levels(starts, ends, times).tolist() == [1, 1, 2, 1, 1, 0]


def test_a_rows_session_start_is_its_sessions_first_ready_time() -> None:
    session = np.array([3, 1, 3, 1, 2])
    ready = np.array([5.0, 2.0, 4.0, np.nan, 7.0])
    assert _session_starts(session, ready).tolist() == [4.0, 2.0, 4.0, 2.0, 7.0]
