"""Which requests of a session their user abandons, and when (the scenario's ``abandonment``).

Each session's draws come from its own stream, keyed by the session's id
(``RandomStreams.stream("abandonment", session_id)``): the same seed abandons the same requests
after the same delays whatever made the session (a generator, a trace), in whichever order
sessions are made, on one host or many, and no other draw of the run moves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from veeksha.generate.distributions import make_interval_sampler
from veeksha.generate.rng import RandomStreams
from veeksha.generate.spec import NodeSpec, SessionSpec, map_nodes
from veeksha.scenario.abandonment import Abandonment

__all__ = ["Abandoner"]


class Abandoner:
    """Marks each session's abandoned requests (``NodeSpec.abandon_after_s``).

    Each request (tool calls aside, which send none) is abandoned with ``probability``, after a
    delay drawn from ``after_generator``; both draws are made for every request, so whether one
    request is abandoned does not move another's delay.
    """

    __slots__ = ("_config", "_streams")

    def __init__(self, config: Abandonment, seed: int) -> None:
        self._config = config
        self._streams = RandomStreams(seed)

    def __call__(self, spec: SessionSpec) -> SessionSpec:
        """``spec`` with its abandoned nodes marked: a new spec (a source may hand out one spec
        more than once), or ``spec`` itself when none is."""
        rng = self._streams.stream("abandonment", spec.session_id)
        n = len(spec.nodes)
        chosen = rng.random(n) < self._config.probability
        delays = make_interval_sampler(self._config.after_generator, rng).sample(n)

        def mark(node: NodeSpec) -> NodeSpec:
            i = node.node_id
            if chosen[i] and node.kind != "tool":
                return dataclasses.replace(node, abandon_after_s=float(delays[i]))
            return node

        return map_nodes(spec, mark)

    def source(self, make: Callable[[int], SessionSpec]) -> Callable[[int], SessionSpec]:
        """The session source ``make`` with each session's abandoned requests marked."""
        return lambda index: self(make(index))
