"""A count of one reads in the singular in every health check's detail and in the report:
``the server finished 1 request``, never ``1 requests`` (veeksha.plural)."""

from __future__ import annotations

import json
import re

import numpy as np

from tests.unit.evaluate.builders import request, requests_table, session, sessions_table
from veeksha.evaluate.checks import run_health_checks
from veeksha.evaluate.health import HealthInput
from veeksha.evaluate.report import carried_note
from veeksha.evaluate.server_view import ServerView
from veeksha.evaluate.stats import measured_rows
from veeksha.scenario.models import Scenario

# "1" then a plural noun, maybe after one word ("1 measured sessions"): what must not be read
ONE_PLURAL = re.compile(r"(?<![\d.])1 (?:[a-z-]+ )?(?:request|session|answer|gap|turn|token)s\b")


def test_a_run_of_one_request_says_each_count_in_the_singular() -> None:
    # 3 tokens where 1 was asked for: off by 2, more than the tolerance of 1
    answer = request(0, 0, chunks=(0.2, 0.3, 0.5), requested=1)
    rows = requests_table([answer | {"server_numbers_rejected": ""}])
    sessions = sessions_table([session(0, 0.0, 0.5)])
    scenario = Scenario.model_validate(
        {
            "server": {"type": "veeksha_sim"},
            "traffic_scheduler": {
                "type": "rate",
                "interval_generator": {"type": "poisson", "arrival_rate": 10},
            },
            "health_checks": {"output_length_tolerance": 1},
        }
    )
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 11.0]))})
    info = {"target": json.dumps({"kind": "managed"})}
    data = HealthInput(rows, measured_rows(rows), sessions, scenario, info, view)
    details = {r.name: r.detail for r in run_health_checks(data).results}
    assert details["server_agreement"] == (
        "the server finished 1 request; veeksha's rows say 1 to 1"  # (was "1 requests")
    )
    assert details["dispatch_rate"] == "1 measured session, need 6"
    assert details["server_numbers"] == "every number of 1 answer taken"
    assert details["output_length"] == (
        "1 ok request off the requested length by more than 1 token"
    )
    assert [name for name, text in details.items() if ONE_PLURAL.search(text)] == []


def test_the_reports_note_of_one_carried_request_is_singular() -> None:
    note = carried_note({"throughput": {"carried_over_requests": 1}})
    assert note is not None
    assert note.startswith("requests/s and tokens/s count 1 request sent before the window")
