"""The start-up probe against a real server given its root instead of its ``/v1`` base: every
request would be a 404 (``POST /chat/completions``), so the run is refused before it starts,
naming the base to use."""

from __future__ import annotations

import pytest

from veeksha.engine.target import check_reachable
from veeksha.errors import TargetError
from veeksha.simulator.process import SimulatorProcess


@pytest.mark.parametrize("slash", ["", "/"])
def test_a_root_without_v1_is_refused_naming_the_base(
    fast_simulator: SimulatorProcess, slash: str
) -> None:
    root = fast_simulator.root_url.rstrip("/")
    with pytest.raises(TargetError) as caught:
        check_reachable(root + slash, None, model="veeksha-sim")
    assert str(caught.value) == (
        f"GET {root}/models answered HTTP 404 and {root}/v1/models lists models: every request"
        f" would be a 404; set client.api_base to {root}/v1"
    )
    check_reachable(fast_simulator.base_url, None, model="veeksha-sim")  # (the base itself)


def test_a_404_with_nothing_under_v1_either_stays_reachable(
    fast_simulator: SimulatorProcess,
) -> None:
    # (some servers have no /models: a base that answers HTTP at all is accepted, as before)
    check_reachable(fast_simulator.base_url + "/nothing", None, model="veeksha-sim")
