"""The scenario's ``abandonment`` section: requests whose user gives up before the answer ends.

A chat user closes the tab or presses stop, an agent's own timeout fires: the client drops the
connection while the server is still working on the request. How a server frees what it held
(a batch slot, KV blocks, a queued prefill) and how the other requests' latencies feel it is
what this section lets a run measure (docs/scenario.md, "Abandoned requests").
"""

from pydantic import Field

from veeksha.scenario.base import StrictModel, factory
from veeksha.scenario.generators import FixedInterval, IntervalGenerator


class Abandonment(StrictModel, defer_build=False):
    """Which requests their user abandons, and how long after each was sent (ours)."""

    probability: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of requests (each drawn on its own, tool calls excepted) whose user "
        "abandons them; 0: none.",
    )
    after_generator: IntervalGenerator = Field(
        default_factory=factory(FixedInterval),
        description="Seconds from a request's sent_at to its abandonment (an interval "
        "generator); a request answered sooner completes as usual.",
    )
