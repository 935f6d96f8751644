"""The health check comparing the server's view with veeksha's: ``server_agreement``.

The server's count of finished requests (``finished``: vLLM's ``request_success_total``, SGLang's
and TGI's equivalents) changes between the first scrape (just before t0) and the last (after the
traffic) by the number of requests it finished in between. veeksha's rows bound that number:

- at least every request answered ``ok`` that was sent after the first scrape and complete
  before the last (the server finished each of them in between);
- at most every request sent (with its retries): failed, cancelled and abandoned requests may or
  may not have reached the server's count, and so may requests in flight at either scrape. A
  request refused a connection (``connection_refused``) never reached the server and is left out
  (its retries, earlier attempts that were answered, are not).

Tool rows (``kind`` tool: a tool call's latency in an agent workflow) reach no server and are
left out of both bounds. With several clients on several servers, only the rows of the clients
the scraped server serves are counted (``server_view.scraped_clients``): the others' requests
went to servers whose metrics were not read; when the scraped address is none of the clients'
servers, nothing can be compared (SKIP).

A partial run (``veeksha report`` of a killed run) has no row for the requests in flight at its end
nor for those answered in its last second: a server count above the rows' upper bound is then
not judged (SKIP); one below their lower bound still FAILs.

Outside those bounds the two views disagree: another client shares the server, the scrape
reached another server (``server_metrics.url``), or requests were lost or duplicated on the way.
A disagreement FAILs only when veeksha owns the server (a managed server or the built-in
simulator with one process); on a server it does not own, counts that agree PASS (nobody else
finished requests there meanwhile) and counts that disagree SKIP, with the numbers in the detail.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.server_view import scraped_clients
from veeksha.evaluate.stats import column, llm_requests, of_clients, reached_server, status_is
from veeksha.plural import counted

__all__ = ["SERVER_AGREEMENT"]

_UNRECORDED = "so requests in flight at its end and those of its last second have no row"


def _owned(data: HealthInput) -> tuple[bool, str]:
    try:
        kind = json.loads(data.run_info.get("target") or "{}").get("kind")
    except (ValueError, AttributeError):
        kind = None
    simulated = kind == "simulator" or (
        kind == "managed" and getattr(data.scenario.server, "type", None) == "veeksha_sim"
    )
    if simulated and data.scenario.simulator.processes > 1:
        return False, "each of the simulator's processes counts only its own requests"
    if kind in ("simulator", "managed"):
        return True, ""
    return False, "veeksha does not own this server: other clients may share it"


def _agreement(data: HealthInput) -> Outcome:
    view = data.server
    if view is None or "finished" not in view.series:
        return Outcome(SKIP, "the server's metrics hold no count of finished requests", {})
    times, _ = view.series["finished"]
    if times.size < 2:
        return Outcome(SKIP, "fewer than two scrapes of the server's metrics", {})
    first, last = float(times[0]), float(times[-1])
    server = view.delta("finished")
    assert server is not None  # ("finished" is one of the series)
    requests = data.requests
    clients = scraped_clients(data.scenario, data.run_info)
    if clients is not None and not clients:
        return Outcome(
            SKIP,
            f"the server's metrics are not of any client's server (the clients' servers differ"
            f" and none is where they were scraped); it finished {counted(server, 'request')}",
            {"server_finished": server},
        )
    llm = llm_requests(requests)  # (a tool row reaches no server)
    if clients is not None:  # (the other clients' requests went to other servers)
        llm &= of_clients(requests, clients)
    sent = column(requests, "sent_at")
    done = column(requests, "completed_at")
    inside = llm & status_is(requests, "ok") & (sent >= first) & ~np.isnan(done) & (done <= last)
    retries = (
        np.nan_to_num(column(requests, "retries"))
        if "retries" in requests.schema.names
        else np.zeros(sent.size)
    )
    # each request that may have reached the server, and each of its earlier attempts (a
    # refused one's 429/503 answers before it did)
    reached = reached_server(requests, clients)
    low = int(np.count_nonzero(inside))
    high = int(np.count_nonzero(reached) + retries[llm & ~np.isnan(sent)].sum())
    stats: dict[str, Any] = {"server_finished": server, "ours_at_least": low,
                             "ours_at_most": high, "first_scrape_t": first,
                             "last_scrape_t": last}  # fmt: skip
    detail = f"the server finished {counted(server, 'request')}; veeksha's rows say {low} to {high}"
    if clients is not None:
        stats["clients"] = list(clients)
        detail += f" (its clients' rows: {', '.join(clients)}; the others go to other servers)"
    owned, why = _owned(data)
    if server is not None and low <= server <= high:
        return Outcome(PASS, detail, stats)
    if data.run_info.get("partial") and server is not None and server > high:
        # (its end was never written: requests it sent in its last second have no row)
        return Outcome(SKIP, f"{detail} (not judged: the run did not end, {_UNRECORDED})", stats)
    if not owned:
        return Outcome(SKIP, f"{detail} (not judged: {why})", stats)
    return Outcome(FAIL, detail + ": the two views disagree", stats)


SERVER_AGREEMENT = HealthCheck(
    "server_agreement",
    "The server's count of finished requests over the run lies within what veeksha sent and "
    "saw answered.",
    _agreement,
)
