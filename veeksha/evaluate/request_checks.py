"""Health checks of individual requests: dependency order and prompt/output lengths.

``dependencies`` (every recorded request, warmup included: order is a correctness property):
a non-root request may be dispatched no earlier than ``earliest = max(parents' completed_at) +
wait_after_ready``, and no request before its ``not_before`` (its trace row's own time,
``turn_timing: timestamps``; null elsewhere): ``earliest = max(that, not_before)``. Violations
(dispatched_at < earliest − 1 µs, or dispatched while a parent never completed) must be 0.
Lateness = dispatched_at − queue_wait − earliest (roots: from max(ready_at, not_before)); FAIL
also when any request is later than ``late_threshold_s``. A turn held by its own time is thus
late only by how long after that time it left, never by the wait its time imposed; nor is a
request late for the time it waited for its client's slot (``queue_wait``: a configured
``max_in_flight`` held it, not the generator). A parent
whose row is missing (a killed run loses its last rows) is counted as ``parents_missing``, not
as a violation.

Re-prompts (``attempt`` > 0, docs/agents.md) give a node several rows: the node is done, and its
children released, when its last attempt ended, so a parent's ``completed_at`` is its last
attempt's; an attempt after the first is ready when the one before it ended (its answer failed
validation), so its earliest is that attempt's ``completed_at``, not its parents'.

``prompt_length``: in ``veeksha.evaluate.prompt_length`` (re-exported here).

``output_length``: |output_tokens − requested_output_tokens| ≤ ``output_length_tolerance`` for
every measured ok request.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.prompt_length import PROMPT_LENGTH, deviation_stats
from veeksha.evaluate.stats import (
    Floats,
    column,
    describe,
    first_rows,
    int_column,
    integers,
    previous_attempts,
    status_is,
)
from veeksha.plural import counted
from veeksha.record import kernels as ak

__all__ = ["DEPENDENCIES", "OUTPUT_LENGTH", "PROMPT_LENGTH", "dependency_lateness"]

_EPS = 1e-6


def dependency_lateness(requests: pa.Table) -> tuple[Floats, dict[str, int]]:
    """Lateness of every dispatched request and the violation counts (see the module docstring).

    Returns (lateness in seconds of the dispatched requests whose parents' rows are all there;
    counts: ``dispatched``, ``violations``, ``parent_not_completed``, ``parents_missing``).
    """
    counts = {"dispatched": 0, "violations": 0, "parent_not_completed": 0, "parents_missing": 0}
    if requests.num_rows == 0:
        return np.empty(0), counts
    # Each edge (child row, parent node) looks its parent's row up by its key (session_id,
    # node_id) with numpy (a pyarrow join would import pandas through acero). Every array here
    # has a row's or an edge's length (3,000,000 rows: 24 MB an array): each is dropped once
    # used, which keeps the check's peak at a few of them.
    n = requests.num_rows
    parents = requests.column("parents")
    owners = integers(ak.list_parent_indices(parents))  # nondecreasing
    parent_nodes = integers(ak.list_flatten(parents))
    del parents
    keys = int_column(requests, "node_id")
    width = int(max(keys.max(initial=0), parent_nodes.max(initial=0))) + 1
    session = int_column(requests, "session_id")
    session *= width
    keys += session
    edge_keys = session[owners]
    del session
    edge_keys += parent_nodes
    del parent_nodes
    previous = previous_attempts(requests, keys)
    if previous is not None:  # a re-prompted parent is done at its last attempt's end
        keys[previous[0]] = -1  # (its earlier attempts' rows are never a parent's row)
    parent_row = first_rows(keys, edge_keys)
    del keys, edge_keys
    found = parent_row < n
    parent_done = column(requests, "completed_at")
    parent_done = np.where(found, parent_done[np.minimum(parent_row, n - 1)], np.nan)
    del parent_row
    # per child (a run of equal owners): its latest parent completion (NaN only when none
    # completed), whether a parent did not complete, whether a parent's row is missing
    starts = np.flatnonzero(np.diff(owners, prepend=-1))
    rows = owners[starts]  # the children: rows with at least one parent, ascending
    del owners
    first_attempt = np.ones(rows.size, dtype=bool)
    if previous is not None:  # (a re-prompt's parents are its first attempt's: counted once)
        first_attempt[np.isin(rows, previous[1])] = False
    if starts.size:
        latest = np.fmax.reduceat(parent_done, starts)
        not_completed = np.logical_or.reduceat(np.isnan(parent_done), starts)
        missing = np.logical_or.reduceat(~found, starts)
    else:
        latest, not_completed, missing = np.empty(0), np.empty(0, bool), np.empty(0, bool)
    del parent_done, found, starts
    # the earliest a request may leave: children, their latest parent's completion plus their
    # think time; roots, their ready time (the columns read one at a time, in place)
    earliest = column(requests, "wait_after_ready")
    earliest[rows] += latest
    del latest
    is_root = np.ones(n, dtype=bool)
    is_root[rows] = False
    np.copyto(earliest, column(requests, "ready_at"), where=is_root)
    del is_root
    if "not_before" in requests.schema.names:  # (a run recorded before the column: none)
        # (where defined: a request whose parent never completed has no earliest)
        np.fmax(earliest, column(requests, "not_before"), out=earliest, where=~np.isnan(earliest))
    if previous is not None:  # a re-prompt: ready when the attempt before it ended
        earliest[previous[1]] = column(requests, "completed_at")[previous[0]]
    dispatched = column(requests, "dispatched_at")
    counts["dispatched"] = int((~np.isnan(dispatched)).sum())
    sent_child = ~np.isnan(dispatched[rows]) & first_attempt
    counts["parents_missing"] = int((missing & sent_child).sum())
    not_completed &= sent_child & ~missing
    counts["parent_not_completed"] = int(not_completed.sum())
    early = dispatched < earliest - _EPS
    counts["violations"] = int(np.nansum(early)) + counts["parent_not_completed"]
    del early
    lateness = np.subtract(dispatched, earliest, out=dispatched)
    del earliest
    if "queue_wait" in requests.schema.names:  # (the wait for a capped client's slot)
        np.subtract(lateness, np.nan_to_num(column(requests, "queue_wait")), out=lateness)
    return lateness[~np.isnan(lateness)], counts


def _dependencies(data: HealthInput) -> Outcome:
    lateness, counts = dependency_lateness(data.requests)
    if counts["dispatched"] == 0:
        return Outcome(SKIP, "no dispatched request", counts)
    limit = data.thresholds.late_threshold_s
    late = int((lateness > limit).sum())
    statistics: dict[str, Any] = counts | {"late": late, "late_threshold_s": limit}
    statistics["lateness"] = {"unit": "s", **describe(lateness)}
    failed = counts["violations"] > 0 or late > 0
    detail = f"{counts['violations']} dispatched before their dependencies allowed, {late} later "
    if lateness.size:
        detail += f"than {limit:g} s; max lateness {lateness.max() * 1000:.3f} ms"
    else:
        detail += f"than {limit:g} s"
    return Outcome(FAIL if failed else PASS, detail, statistics)


def _output_length(data: HealthInput) -> Outcome:
    table = data.measured
    tol = data.thresholds.output_length_tolerance
    ok = status_is(table, "ok")
    deviation = column(table, "output_tokens") - column(table, "requested_output_tokens")
    deviation = deviation[ok & ~np.isnan(deviation)]
    if deviation.size == 0:
        return Outcome(SKIP, "no measured ok request with output token counts", {})
    statistics = {"tolerance": tol, **deviation_stats(deviation, tol)}
    outside = statistics["outside_tolerance"]
    detail = (
        f"{counted(outside, 'ok request')} off the requested length by more than "
        f"{counted(tol, 'token')}"
    )
    return Outcome(FAIL if outside else PASS, detail, statistics)


DEPENDENCIES = HealthCheck(
    "dependencies",
    "no request dispatched before max(parents' completed_at) + wait_after_ready (and its"
    " not_before), none too late",
    _dependencies,
)
OUTPUT_LENGTH = HealthCheck(
    "output_length", "actual vs requested output tokens within tolerance", _output_length
)
