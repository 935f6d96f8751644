"""Counts in words: one of a thing is singular, every other count plural."""

from __future__ import annotations

import numpy as np

from veeksha.plural import counted, noun


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert [counted(n, "request") for n in (0, 1, 2)] == ["0 requests", "1 request", "2 requests"]
    assert counted(1.0, "session") == "1 session"
    assert counted(0.5, "session") == "0.5 sessions"
    assert counted(np.int64(1), "measured session") == "1 measured session"
    assert counted(1, "entry", "entries") == "1 entry"
    assert counted(3, "entry", "entries") == "3 entries"
    assert noun(1, "answer") == "answer"
    assert noun(np.float64(2.0), "answer") == "answers"
