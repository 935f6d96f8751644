"""Named, independent random streams derived from one scenario seed.

Every random quantity of a run draws from a stream named after what it decides: ``arrivals``
(session start gaps), ``graphs`` (session shapes), ``lengths`` (prompt body lengths), ``content``
(prompt words), ``think_times`` (waits between turns) and ``outputs`` (requested output lengths).
A stream is a numpy ``Generator`` on ``PCG64`` seeded by a ``SeedSequence`` whose entropy is the
scenario seed and whose spawn key is ``(stable hash of the name, *keys)``. Consequences:

* streams never share state, so changing one knob (say the output lengths) leaves every other
  stream's draws untouched;
* ``stream(name, k)`` is a pure function of ``(seed, name, k)``: a session's draws can be derived
  from its index, whatever order sessions are generated in;
* the name hash is BLAKE2b, not Python's per-process salted ``hash()``, so runs reproduce across
  processes and machines; seed 0 is as valid as any other.

>>> a = RandomStreams(0).stream("lengths", 7).integers(0, 1000, 3)
>>> b = RandomStreams(0).stream("lengths", 7).integers(0, 1000, 3)
>>> bool((a == b).all())
True
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import numpy as np

__all__ = ["STREAM_NAMES", "RandomStreams", "stable_key"]

STREAM_NAMES = ("arrivals", "graphs", "lengths", "content", "think_times", "outputs")


@lru_cache(maxsize=1024)
def stable_key(name: str) -> int:
    """A 64-bit key of ``name`` that is the same in every process (BLAKE2b of its UTF-8 bytes)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


def _key(part: int | str) -> int:
    if isinstance(part, str):
        return stable_key(part)
    if part < 0:
        raise ValueError(f"stream keys must be non-negative integers (got {part})")
    return part


class RandomStreams:
    """Independent named random streams from one seed.

    ``stream(name)`` is the run-wide stream of that name; ``stream(name, *keys)`` derives a
    sub-stream (keys are non-negative ints, e.g. a session or block index, or strings), which
    is a pure function of ``(seed, name, keys)``. Each call returns a fresh generator positioned
    at the start of its stream.
    """

    __slots__ = ("seed",)

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0 (got {seed})")
        self.seed = seed

    def seed_sequence(self, name: str, *keys: int | str) -> np.random.SeedSequence:
        """The ``SeedSequence`` behind ``stream(name, *keys)``."""
        spawn_key = (stable_key(name), *(_key(k) for k in keys))
        return np.random.SeedSequence(self.seed, spawn_key=spawn_key)

    def stream(self, name: str, *keys: int | str) -> np.random.Generator:
        """A fresh generator for the stream ``name`` (optionally a keyed sub-stream of it)."""
        return np.random.Generator(np.random.PCG64(self.seed_sequence(name, *keys)))

    def __repr__(self) -> str:
        return f"RandomStreams(seed={self.seed})"
