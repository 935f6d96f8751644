"""Named random streams: reproducible, independent, keyed, seed 0 valid."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from veeksha.generate.rng import STREAM_NAMES, RandomStreams, stable_key


def _draw(streams: RandomStreams, name: str, *keys: int | str) -> list[int]:
    return streams.stream(name, *keys).integers(0, 1 << 30, 8).tolist()


def test_same_seed_same_stream() -> None:
    assert _draw(RandomStreams(7), "lengths") == _draw(RandomStreams(7), "lengths")


def test_seed_zero_is_valid_and_distinct_from_one() -> None:
    assert _draw(RandomStreams(0), "graphs") != _draw(RandomStreams(1), "graphs")


def test_named_streams_are_independent() -> None:
    streams = RandomStreams(3)
    draws = {tuple(_draw(streams, name)) for name in STREAM_NAMES}
    assert len(draws) == len(STREAM_NAMES)


def test_keyed_substreams_are_pure_functions_of_their_key() -> None:
    streams = RandomStreams(5)
    forward = [_draw(streams, "content", i) for i in range(5)]
    backward = [_draw(streams, "content", i) for i in reversed(range(5))][::-1]
    assert forward == backward
    assert len({tuple(d) for d in forward}) == 5
    assert _draw(streams, "content", "corpus") != _draw(streams, "content", 0)


def test_name_hash_is_stable_across_processes() -> None:
    code = "from veeksha.generate.rng import stable_key; print(stable_key('arrivals'))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert int(out) == stable_key("arrivals")


def test_negative_seed_or_key_rejected() -> None:
    with pytest.raises(ValueError, match="seed"):
        RandomStreams(-1)
    with pytest.raises(ValueError, match="non-negative"):
        RandomStreams(1).stream("graphs", -3)


def test_stream_is_a_numpy_generator() -> None:
    assert isinstance(RandomStreams(0).stream("arrivals"), np.random.Generator)
