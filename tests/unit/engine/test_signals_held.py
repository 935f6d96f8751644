"""``engine.run_stop.signals_held``: Ctrl-C while a run writes its end (rows, evaluation,
summary)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from veeksha.engine.run_stop import signals_held


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    signal.getsignal(signal.SIGINT)  # (the handler runs by the next bytecode at the latest)


def test_one_signal_is_held_until_the_end_is_written(tmp_path: Path) -> None:
    said: list[str] = []
    written: list[bool] = []
    # (the signal, then the end written)
    with pytest.raises(KeyboardInterrupt), signals_held(said.append, tmp_path):  # noqa: PT012
        _ctrl_c()
        written.append(True)  # (the end goes on being written)
    assert written
    assert said == [
        "SIGINT while the run's results are written: they are finished first (again: stop at"
        " once, `veeksha report RUN_DIR` evaluates later)",
        f"the run's results are written: {tmp_path}",
    ]


def test_a_second_signal_stops_at_once_and_says_what_may_be_missing(tmp_path: Path) -> None:
    # Was: a bare "interrupted" on the console and nothing in run.log, while plots or the
    # report (even summary.json) may be missing and the metadata says the run was whole
    said: list[str] = []
    reached: list[bool] = []
    with pytest.raises(KeyboardInterrupt), signals_held(said.append, tmp_path):  # noqa: PT012
        _ctrl_c()
        _ctrl_c()
        reached.append(True)
    assert not reached
    assert said[1] == (
        "SIGINT again: stopped at once; the rows are kept, but the evaluation may be missing"
        f" or incomplete: `veeksha report {tmp_path}` evaluates the run again"
    )


def test_the_handlers_of_before_the_traffic_come_back(tmp_path: Path) -> None:
    def before(signum: int, frame: object) -> None:
        raise AssertionError("not called here")

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with signals_held(lambda _: None, tmp_path, (signal.SIGTERM,), {signal.SIGTERM: before}):
            assert signal.getsignal(signal.SIGTERM) not in (before, previous)
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)
