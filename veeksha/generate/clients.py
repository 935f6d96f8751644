"""Which client serves each node of a synthetic session (``client_selection``).

Rules (docs/agents.md): with one client every node goes to it. ``round_robin``: node ``j`` of
session ``i`` goes to client ``(i + j) mod n``, so a conversation's turns alternate between the
clients and consecutive sessions start on consecutive clients. ``weighted``: each node draws its
client from the weights, on the ``clients`` random stream of its block (so the choice never
reshuffles lengths, content or arrivals).
"""

from __future__ import annotations

import numpy as np

from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import NodeSpec
from veeksha.scenario.models import ClientSelection, WeightedClients

__all__ = ["ClientPicker"]


class ClientPicker:
    """Assigns ``NodeSpec.client`` for a block of generated nodes."""

    def __init__(self, selection: ClientSelection, names: list[str]) -> None:
        self._n = len(names)
        self._probabilities: np.ndarray | None = None
        if isinstance(selection, WeightedClients) and self._n > 1:
            weights = np.array([selection.weights.get(name, 0.0) for name in names])
            self._probabilities = weights / weights.sum()

    @property
    def single(self) -> bool:
        """One client: every node keeps the default index 0."""
        return self._n == 1

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
            rng = streams.stream("clients", "block", block)
            picked: list[int] = rng.choice(self._n, size=total, p=self._probabilities).tolist()
            return picked
        n = self._n
        out: list[int] = []
        for offset, size in enumerate(sizes):
            session = first_session + offset
            out.extend((session + j) % n for j in range(size))
        return out
