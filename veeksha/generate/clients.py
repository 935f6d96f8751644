"""Which client serves each node (``client_selection``): of a synthetic session, and of a trace's
rows that name no client.

Rules (docs/agents.md): with one client every node goes to it. ``round_robin``: node ``j`` of
session ``i`` goes to client ``(i + j) mod n``, so a conversation's turns alternate between the
clients and consecutive sessions start on consecutive clients. ``weighted``: each node draws its
client from the weights, on the ``clients`` random stream (a synthetic block's sub-stream, so the
choice never reshuffles lengths, content or arrivals; a trace's own ``trace`` sub-stream, drawn
row after row in replay order as the trace's cache is built: ``TraceClients``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import NodeSpec
from veeksha.scenario.models import ClientSelection, WeightedClients

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["ClientPicker", "TraceClients"]


class ClientPicker:
    """Assigns ``NodeSpec.client`` for a block of generated nodes."""

    def __init__(self, selection: ClientSelection, names: Sequence[str]) -> None:
        self._n = len(names)
        self._probabilities: np.ndarray | None = None
        if isinstance(selection, WeightedClients) and self._n > 1:
            weights = np.array([selection.weights.get(name, 0.0) for name in names])
            self._probabilities = weights / weights.sum()

    @property
    def single(self) -> bool:
        """One client: every node keeps the default index 0."""
        return self._n == 1

    @property
    def weighted(self) -> bool:
        """The clients are drawn (``weighted``), not taken in turn."""
        return self._probabilities is not None

    def assign(
        self,
        nodes: list[NodeSpec],
        first_session: int,
        sizes: list[int],
        streams: RandomStreams,
        block: int,
    ) -> None:
        """Set the client of ``nodes`` (the block's nodes, session after session, ``sizes``
        nodes each; the block's first session is ``first_session``)."""
        if self._n == 1:
            return
        picks = self.picks(len(nodes), first_session, sizes, streams, block)
        for node, pick in zip(nodes, picks, strict=True):
            node.client = pick

    def picks(
        self, total: int, first_session: int, sizes: list[int], streams: RandomStreams, block: int
    ) -> list[int]:
        """The client index of each of a block's ``total`` nodes (as ``assign`` sets them):
        known before the nodes are made, so their prompts are sized in their clients'
        tokenizers."""
        if self._probabilities is not None:
            picked: list[int] = self.draw(streams.stream("clients", "block", block), total).tolist()
            return picked
        out: list[int] = self.round_robin(first_session, sizes).tolist()
        return out

    def draw(self, rng: np.random.Generator, total: int) -> NDArray[np.int64]:
        """``total`` clients drawn with the weights from ``rng`` (``weighted`` only)."""
        assert self._probabilities is not None
        picked: NDArray[np.int64] = rng.choice(self._n, size=total, p=self._probabilities)
        return picked

    def round_robin(
        self, first_session: int, sizes: Sequence[int] | NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """Node ``j`` of session ``first_session + k`` (``sizes[k]`` nodes) → ``(i + j) mod n``."""
        counts = np.asarray(sizes, dtype=np.int64)
        total = int(counts.sum())
        sessions = np.repeat(np.arange(first_session, first_session + counts.size), counts)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        nodes = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        out: NDArray[np.int64] = (sessions + nodes) % self._n
        return out


class TraceClients:
    """``session_generator.client_selection`` of a trace replay (docs/traces.md): the client of
    each row that names none. ``round_robin``: node ``j`` of the trace's session ``i`` (its place
    in replay order, counting every session of the file, replayed or not) goes to client
    ``(i + j) mod n``; ``weighted``: each row draws its client on the ``clients`` stream's
    ``trace`` sub-stream, row after row in replay order (``start`` begins it again). The picks
    are written into the trace's cache, so ``cache_text`` is part of the cache's key."""

    def __init__(self, selection: ClientSelection, names: Sequence[str], seed: int) -> None:
        self.names = list(names)
        self._picker = ClientPicker(selection, self.names)
        self._seed = seed
        self._rng: np.random.Generator | None = None
        text = f"client_selection={selection.model_dump_json()}|{json.dumps(self.names)}"
        if self._picker.weighted:
            text += f"|seed={seed}"  # (round robin does not depend on it)
        self._text = text

    def cache_text(self) -> str:
        """What of the selection the trace cache's key holds: the selection, the clients'
        names in order and, for ``weighted``, the seed."""
        return self._text

    def start(self) -> None:
        """Begin the draws again (a cache being built: the first row draws first)."""
        if self._picker.weighted:
            self._rng = RandomStreams(self._seed).stream("clients", "trace")

    def picks(
        self, first_session: int, sizes: Sequence[int] | NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """The client index of each row of the trace's sessions ``first_session, …``
        (``sizes[k]`` rows each, in replay order): the next rows of the trace."""
        if self._picker.weighted:
            if self._rng is None:
                self.start()
            assert self._rng is not None
            return self._picker.draw(self._rng, int(np.sum(sizes)))
        return self._picker.round_robin(first_session, sizes)
