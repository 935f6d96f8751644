"""The wall-to-monotonic offset behind kernel stamps, on fake clocks: a paused bracket is not
taken, however many of the first three were paused."""

from __future__ import annotations

import pytest

from veeksha.dispatch import kernel_stamps

TRUE_OFFSET = 1_000_000


class _Clocks:
    """A monotonic and a wall clock TRUE_OFFSET apart, each read 100 ns after the last; the wall
    reads listed in ``paused`` are followed by a pause of ``pause_ns``."""

    def __init__(self, paused: set[int], pause_ns: int) -> None:
        self.now = 5_000_000_000
        self.wall_reads = 0
        self.paused = paused
        self.pause_ns = pause_ns

    def monotonic(self) -> int:
        self.now += 100
        return self.now

    def wall(self) -> int:
        self.now += 100
        self.wall_reads += 1
        value = self.now - TRUE_OFFSET
        if self.wall_reads in self.paused:
            self.now += self.pause_ns
        return value


def _offset(monkeypatch: pytest.MonkeyPatch, clocks: _Clocks) -> int:
    monkeypatch.setattr(kernel_stamps, "_monotonic_ns", clocks.monotonic)
    monkeypatch.setattr(kernel_stamps, "_realtime_ns", clocks.wall)
    return kernel_stamps.clock_offset_ns()


def test_three_clean_brackets_are_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    clocks = _Clocks(paused=set(), pause_ns=0)
    assert _offset(monkeypatch, clocks) == TRUE_OFFSET + 100
    assert clocks.wall_reads == 3


def test_every_one_of_three_paused_takes_more_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before, the narrowest of three was taken whatever its width: 300 µs on every stamp.
    clocks = _Clocks(paused={1, 2, 3}, pause_ns=300_000)
    assert _offset(monkeypatch, clocks) == TRUE_OFFSET + 100
    assert clocks.wall_reads == 4


def test_a_machine_that_pauses_every_bracket_gets_the_narrowest_of_the_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clocks = _Clocks(paused=set(range(1, 100)) - {7}, pause_ns=50_000)
    clocks_offset = _offset(monkeypatch, clocks)
    assert clocks_offset == TRUE_OFFSET + 100  # the seventh, the one unpaused
    assert clocks.wall_reads == 7

    everywhere = _Clocks(paused=set(range(1, 100)), pause_ns=50_000)
    assert _offset(monkeypatch, everywhere) == TRUE_OFFSET + 50_100  # never less than the truth
    assert everywhere.wall_reads == kernel_stamps._MAX_BRACKETS
