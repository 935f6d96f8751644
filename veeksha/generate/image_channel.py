"""The image channel: which requests carry images, how many, of what sizes.

A request that starts a conversation (no history parent: a single request, a chat's first
turn, a root of an agent workflow), or every request with ``every_turn``, gets
``count_generator`` images; each has a width and a height drawn from their generators (cut to
``MAX_SIDE``) and a seed of its own, from which ``veeksha.generate.images`` makes its picture.
Tool calls carry none. The draws come from the ``images`` stream of the session block, after
every other draw of the block, so a scenario without an image channel, and every other draw of
one with it, are what they were.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from veeksha.generate.distributions import LengthSampler, make_length_sampler
from veeksha.generate.images import MAX_SIDE
from veeksha.generate.spec import SessionSpec
from veeksha.scenario.models import ImageChannel

__all__ = ["ImageSampler"]


class ImageSampler:
    """Draws the images of a block's sessions (see the module doc)."""

    def __init__(self, channel: ImageChannel) -> None:
        self.every_turn = channel.every_turn
        self.counts = make_length_sampler(channel.count_generator)
        self.widths = make_length_sampler(channel.width_generator)
        self.heights = make_length_sampler(channel.height_generator)

    @property
    def samplers(self) -> list[LengthSampler]:
        return [self.counts, self.widths, self.heights]

    def add(self, sessions: Sequence[SessionSpec], rng: np.random.Generator) -> None:
        """Give the carrying nodes of ``sessions`` their images, drawn from ``rng``."""
        carriers = [
            node
            for session in sessions
            for node in session.nodes
            if node.kind != "tool" and (self.every_turn or node.history_parent is None)
        ]
        if not carriers:
            return
        for sampler in self.samplers:
            sampler.rng = rng
        counts = np.maximum(self.counts.sample(len(carriers)), 0).astype(np.int64)
        total = int(counts.sum())
        widths = np.clip(self.widths.sample(total), 1, MAX_SIDE).astype(np.int64).tolist()
        heights = np.clip(self.heights.sample(total), 1, MAX_SIDE).astype(np.int64).tolist()
        seeds = rng.integers(0, 1 << 63, total, dtype=np.int64).tolist()
        images = list(zip(widths, heights, seeds, strict=True))
        at = 0
        for node, count in zip(carriers, counts.tolist(), strict=True):
            if count:
                node.images = tuple(images[at : at + count])
                at += count
        for session in sessions:
            session.images = any(node.images for node in session.nodes)
