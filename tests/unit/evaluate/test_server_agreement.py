"""The server_agreement check: the server's finished count against the bounds of veeksha's rows."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from veeksha.evaluate.health import HealthInput
from veeksha.evaluate.server_checks import SERVER_AGREEMENT
from veeksha.evaluate.server_view import ServerView
from veeksha.scenario.models import Scenario

# 4 ok requests inside the scrapes, one failed, one sent before the first scrape (warm-up)
ROWS = pa.table(
    {
        "sent_at": [0.1, 0.2, 0.3, 0.4, 0.5, -0.5],
        "completed_at": [0.6, 0.7, 0.8, 0.9, None, 0.2],
        "status": ["ok", "ok", "ok", "ok", "error", "ok"],
        "retries": [0, 0, 0, 1, 0, 0],
    }
)


def _check(finished: tuple[float, float], kind: str = "managed", processes: int = 1) -> tuple:
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array(finished))})
    scenario = Scenario.model_validate(
        {"server": {"type": "veeksha_sim"}, "simulator": {"processes": processes}}
    )
    info = {"target": json.dumps({"kind": kind})}
    result = SERVER_AGREEMENT(HealthInput(ROWS, ROWS, ROWS, scenario, info, view))
    return result.status, result.detail, result.statistics


@pytest.mark.parametrize("finished", [4, 5, 7])
def test_counts_within_the_rows_bounds_pass(finished: int) -> None:
    status, _, stats = _check((10, 10 + finished))
    assert status == "PASS"
    assert (stats["ours_at_least"], stats["ours_at_most"]) == (4, 7)


@pytest.mark.parametrize("finished", [3, 8])
def test_counts_outside_fail_when_veeksha_owns_the_server(finished: int) -> None:
    status, detail, _ = _check((10, 10 + finished))
    assert status == "FAIL"
    assert "disagree" in detail


def test_another_servers_count_is_only_reported() -> None:
    status, detail, _ = _check((0, 100), kind="endpoint")
    assert status == "SKIP"
    assert "other clients may share it" in detail
    assert _check((0, 100), processes=2)[0] == "SKIP"


def test_no_finished_count_is_a_skip() -> None:
    scenario = Scenario()
    result = SERVER_AGREEMENT(HealthInput(ROWS, ROWS, ROWS, scenario, {}, ServerView()))
    assert result.status == "SKIP"


def test_tool_rows_reach_no_server_and_are_left_out() -> None:
    # an agent workflow: the 6 rows above as LLM requests (null kind: a table without agents
    # has none) plus 3 tool calls, ok and inside the scrapes, that no server saw
    rows = pa.concat_tables(
        [
            ROWS.append_column("kind", pa.array([None, "llm", "llm", "llm", "llm", "llm"])),
            pa.table(
                {
                    "sent_at": [0.1, 0.2, 0.3],
                    "completed_at": [0.15, 0.25, 0.35],
                    "status": ["ok"] * 3,
                    "retries": [0] * 3,
                    "kind": ["tool"] * 3,
                }
            ),
        ]
    )
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 14.0]))})
    scenario = Scenario.model_validate({"server": {"type": "veeksha_sim"}})
    info = {"target": json.dumps({"kind": "managed"})}
    result = SERVER_AGREEMENT(HealthInput(rows, rows, rows, scenario, info, view))
    assert result.status == "PASS", result.detail
    assert (result.statistics["ours_at_least"], result.statistics["ours_at_most"]) == (4, 7)


def test_refused_connections_never_reached_the_server_and_are_left_out() -> None:
    # the 6 rows above, plus 3 requests refused a connection (the server was down) inside the
    # scrapes: the server finished none of them; one of them had a 503 answer before (a retry)
    refused = pa.table(
        {
            "sent_at": [1.0, 1.1, 1.2],
            "completed_at": [1.0, 1.1, 1.5],
            "status": ["error"] * 3,
            "retries": [0, 0, 1],
            "error_kind": ["connection_refused"] * 3,
        }
    )
    rows = pa.concat_tables(
        [ROWS.append_column("error_kind", pa.array(["", "", "", "", "http_5xx", ""])), refused]
    )
    scenario = Scenario.model_validate({"server": {"type": "veeksha_sim"}})
    info = {"target": json.dumps({"kind": "managed"})}

    def check(finished: float) -> tuple[str, dict]:
        view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, finished]))})
        result = SERVER_AGREEMENT(HealthInput(rows, rows, rows, scenario, info, view))
        return result.status, result.statistics

    status, stats = check(14.0)
    assert status == "PASS"
    # at most: the 6 sent rows and their retry (7), and the refused one's earlier 503 answer
    assert (stats["ours_at_least"], stats["ours_at_most"]) == (4, 8)
    assert check(19.0)[0] == "FAIL"  # 9 finished, more than the 8 that could reach it: disagree


@pytest.mark.parametrize(("finished", "status"), [(8, "SKIP"), (3, "FAIL")])
def test_a_partial_runs_rows_bound_the_count_from_below_only(finished: int, status: str) -> None:
    # a killed run's report: requests in flight at the kill and answered in its last second
    # have no row, so a server that finished more than the rows say is not a disagreement
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 10 + finished]))})
    scenario = Scenario.model_validate({"server": {"type": "veeksha_sim"}})
    info = {"target": json.dumps({"kind": "managed"}), "partial": True}
    result = SERVER_AGREEMENT(HealthInput(ROWS, ROWS, ROWS, scenario, info, view))
    assert result.status == status, result.detail
    if status == "SKIP":
        assert "not judged: the run did not end" in result.detail


def _two_servers(scraped_url: str | None) -> dict:
    """run.target and run.server_metrics of a run whose clients `big` (the built-in simulator)
    and `small` (another server) are on two servers; the metrics scraped from ``scraped_url``."""
    clients = [
        {"name": "big", "kind": "simulator", "api_base": "http://127.0.0.1:4000/v1"},
        {"name": "small", "kind": "endpoint", "api_base": "http://127.0.0.1:5000/v1"},
    ]
    target = {"kind": "simulator", "api_base": "http://127.0.0.1:4000/v1", "clients": clients}
    return {"target": json.dumps(target), "server_metrics": {"url": scraped_url}}


# the 6 rows above are the big client's; 5 more ok requests, inside the scrapes, the small one's
TWO_CLIENTS = pa.concat_tables(
    [
        ROWS.append_column("client", pa.array(["big"] * 6)),
        pa.table(
            {
                "sent_at": [0.1, 0.2, 0.3, 0.4, 0.5],
                "completed_at": [0.6, 0.7, 0.8, 0.9, 1.0],
                "status": ["ok"] * 5,
                "retries": [0] * 5,
                "client": ["small"] * 5,
            }
        ),
    ]
)


def test_with_clients_on_several_servers_only_the_scraped_servers_clients_count() -> None:
    """The metrics are the first client's server's (the built-in simulator, which finished the
    big client's 4 to 7 requests); the small client's 5 went to another server, whose metrics
    were not read: counting them made the bounds 9 to 12 and the check FAIL on a server that
    agrees."""
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 15.0]))})
    info = _two_servers("http://127.0.0.1:4000/metrics")
    result = SERVER_AGREEMENT(
        HealthInput(TWO_CLIENTS, TWO_CLIENTS, TWO_CLIENTS, Scenario(), info, view)
    )
    assert result.status == "PASS", result.detail
    assert (result.statistics["ours_at_least"], result.statistics["ours_at_most"]) == (4, 7)
    assert result.statistics["clients"] == ["big"]
    assert "big; the others go to other servers" in result.detail
    # the same server counting 10 is still a disagreement about the big client's requests
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 20.0]))})
    result = SERVER_AGREEMENT(
        HealthInput(TWO_CLIENTS, TWO_CLIENTS, TWO_CLIENTS, Scenario(), info, view)
    )
    assert result.status == "FAIL"


def test_metrics_scraped_from_none_of_the_clients_servers_are_not_judged() -> None:
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 15.0]))})
    info = _two_servers("http://10.0.0.9:9100/metrics")
    result = SERVER_AGREEMENT(
        HealthInput(TWO_CLIENTS, TWO_CLIENTS, TWO_CLIENTS, Scenario(), info, view)
    )
    assert result.status == "SKIP"
    assert "not of any client's server" in result.detail


def test_clients_sharing_one_server_all_count() -> None:
    # both clients (two models) on the one built-in simulator: all 11 rows are its requests
    info = _two_servers("http://127.0.0.1:4000/metrics")
    target = json.loads(info["target"])
    target["clients"][1]["api_base"] = "http://127.0.0.1:4000/v1"
    info["target"] = json.dumps(target)
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 19.0]))})
    result = SERVER_AGREEMENT(
        HealthInput(TWO_CLIENTS, TWO_CLIENTS, TWO_CLIENTS, Scenario(), info, view)
    )
    assert result.status == "PASS", result.detail
    assert (result.statistics["ours_at_least"], result.statistics["ours_at_most"]) == (9, 12)
    assert "clients" not in result.statistics


def test_every_server_scraped_counts_every_clients_rows() -> None:
    # both servers scraped (the run's default with clients on two servers): their finished
    # counts together (10 → 21: 4 to 7 of the big client's, 5 of the small one's) against all rows
    info = _two_servers("http://127.0.0.1:4000/metrics")
    target = json.loads(info["target"])
    other = target["clients"][1]["api_base"].removesuffix("/v1") + "/metrics"
    info["server_metrics"]["servers"] = [
        {"url": "http://127.0.0.1:4000/metrics", "status": "ok"},
        {"url": other, "status": "ok"},
    ]
    view = ServerView(series={"finished": (np.array([-0.1, 2.0]), np.array([10.0, 21.0]))})
    result = SERVER_AGREEMENT(
        HealthInput(TWO_CLIENTS, TWO_CLIENTS, TWO_CLIENTS, Scenario(), info, view)
    )
    assert result.status == "PASS", result.detail
    assert (result.statistics["ours_at_least"], result.statistics["ours_at_most"]) == (9, 12)
    assert "clients" not in result.statistics
