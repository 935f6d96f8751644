"""The ``prompt_length`` health check: were prompts as long as intended, in whose count?

Up to three comparisons, each judged against ``prompt_length_tolerance`` (tokens) on its own:

``client count vs target``
    every measured request: ``prompt_tokens_new - target_prompt_tokens`` (veeksha's tokenizer;
    prompts built from a vocabulary, builtin or a calibrated server's, count their target).
``server /tokenize vs target``
    with a calibrated server tokenizer: a seeded sample of up to 32 sent prompts' new parts,
    tokenized by the server after the run (``veeksha.engine.prompt_check``), less its
    overhead, minus the target. From ``summary.json`` → ``run.server_tokenizer.verification``.
``server usage vs expected``
    the roots that the server reported usage for: ``prompt_tokens_total - target``, less the
    median of those (the chat template's constant overhead); and each history child whose
    parent was answered, both with usage: ``total - (parent's total + parent's output +
    target)``, less the median of those (the template tokens of the turn's two new messages,
    constant per turn). Re-prompts (``attempt`` > 0) are not compared: their prompt adds the
    failed answer and a note to the first attempt's; a re-prompted parent's total is its first
    attempt's and its output its last attempt's (its children carry its first prompt and its
    final answer). A template only adds tokens, so a median below 0 is not taken away: a
    server that counts every prompt 122 tokens short (another tokenizer than the client's, or
    prompts cut) fails, even when every prompt has the same length. Holds where the template
    adds the same tokens to every message and the server re-tokenizes an answer to as many
    tokens as it generated (the simulator does, to the token; a real server within a token or
    two, well inside the tolerance).

The detail names every comparison made, failing ones first, each with its own count and
maximum, e.g. ``server usage vs expected: 8 of 10 off by more than 15 tokens (max 37); client
count vs target: 0 of 30 (max 0)``. FAIL when any comparison has a request outside the
tolerance; SKIP when no comparison has data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.stats import (
    Floats,
    column,
    first_rows,
    int_column,
    integers,
    median,
    previous_attempts,
    status_is,
)
from veeksha.plural import counted
from veeksha.record import kernels as ak

__all__ = ["PROMPT_LENGTH", "deviation_stats"]

CLIENT = "client count vs target"
SERVER_TOKENIZE = "server /tokenize vs target"
SERVER_USAGE = "server usage vs expected"


def deviation_stats(deviation: Floats, tolerance: int) -> dict[str, Any]:
    return {
        "requests": int(deviation.size),
        "outside_tolerance": int((np.abs(deviation) > tolerance).sum()),
        "mean_deviation": float(deviation.mean()),
        "max_abs_deviation": float(np.abs(deviation).max()),
    }


def _first_attempts(table: pa.Table) -> np.ndarray:
    """Rows that are a node's first attempt (a re-prompt's prompt also holds the failed answer
    and the note: neither its target nor its history; docs/agents.md, Re-prompts)."""
    if "attempt" not in table.schema.names:
        return np.ones(table.num_rows, dtype=bool)
    return int_column(table, "attempt") == 0


def _server_usage(data: HealthInput) -> Floats:
    table = data.measured
    rows = column(table, "usage_reported") > 0
    rows &= integers(ak.list_value_length(table.column("parents"))) == 0  # roots
    rows &= _first_attempts(table)
    server = column(table, "prompt_tokens_total")
    server -= column(table, "target_prompt_tokens")
    rows &= ~np.isnan(server)
    return server[rows]


def _server_usage_turns(data: HealthInput) -> Floats:
    """Per history child whose parent was answered with usage (both rows' usage reported):
    its server total − (its parent's server total + the parent's output + its target). A
    re-prompted parent's children carry its first prompt and its final answer: its first
    attempt's total and its last attempt's output; a re-prompt is no child's first attempt
    (``_first_attempts``) and is not compared."""
    table = data.measured
    history = column(table, "history_parent")
    children = np.flatnonzero(~np.isnan(history) & _first_attempts(table))
    if children.size == 0:
        return np.empty(0)
    node = int_column(table, "node_id")
    session = int_column(table, "session_id")
    width = int(max(node.max(initial=0), np.nanmax(history))) + 1
    keys = session * width + node
    edges = session[children] * width + history[children].astype(np.int64)
    pairs = previous_attempts(table, keys)
    if pairs is None:
        firsts = lasts = first_rows(keys, edges)
    else:  # (each lookup sees one row per node: its first attempt, or its last)
        first_keys, last_keys = keys.copy(), keys
        first_keys[pairs[1]] = -1
        last_keys[pairs[0]] = -1
        firsts, lasts = first_rows(first_keys, edges), first_rows(last_keys, edges)
        del first_keys
    del keys, node, session, history, edges
    found = (firsts < table.num_rows) & (lasts < table.num_rows)
    children, firsts, lasts = children[found], firsts[found], lasts[found]
    usage = column(table, "usage_reported") > 0
    answered = status_is(table, "ok")  # (a Python "ok" given to a kernel would import pandas)
    valid = usage[children] & usage[firsts] & usage[lasts] & answered[lasts]
    del usage, answered
    total = column(table, "prompt_tokens_total")
    turn = total[children] - total[firsts]
    del total
    turn -= column(table, "output_tokens")[lasts]
    turn -= column(table, "target_prompt_tokens")[children]
    return turn[valid & ~np.isnan(turn)]


def _server_tokenize(data: HealthInput) -> tuple[Floats, str | None]:
    info = data.run_info.get("server_tokenizer")
    verification = info.get("verification") if isinstance(info, dict) else None
    if not isinstance(verification, dict):
        return np.empty(0), None
    deviations = np.asarray(verification.get("deviations") or [], dtype=np.float64)
    error = verification.get("error")
    return deviations, str(error) if error else None


def _describe(name: str, stats: dict[str, Any], tolerance: int) -> str:
    outside, total = stats["outside_tolerance"], stats["requests"]
    text = f"{name}: {outside} of {total}"
    if outside:
        text += f" off by more than {counted(tolerance, 'token')}"
    return text + f" (max {stats['max_abs_deviation']:.0f})"


def _prompt_length(data: HealthInput) -> Outcome:
    tol = data.thresholds.prompt_length_tolerance
    statistics: dict[str, Any] = {"tolerance": tol}
    parts: list[tuple[str, dict[str, Any]]] = []
    client = column(data.measured, "prompt_tokens_new")
    client -= column(data.measured, "target_prompt_tokens")
    client = client[~np.isnan(client)]
    if client.size:
        stats = deviation_stats(client, tol)
        statistics.update(stats)  # (top level: the client comparison, as before)
        parts.append((CLIENT, stats))
    del client
    sampled, error = _server_tokenize(data)
    if sampled.size:
        stats = deviation_stats(sampled, tol)
        statistics["server_tokenize"] = stats
        parts.append((SERVER_TOKENIZE, stats))
    if error:
        statistics["server_tokenize_error"] = error
    roots, turns = _server_usage(data), _server_usage_turns(data)
    if roots.size or turns.size:
        root_offset = median(roots) if roots.size else None
        turn_offset = median(turns) if turns.size else None
        # a template only adds tokens: a median below 0 (the server counts fewer tokens than
        # were sent: another tokenizer, or prompts cut) is not an offset to take away
        usage = np.concatenate(
            [roots - max(root_offset or 0.0, 0.0), turns - max(turn_offset or 0.0, 0.0)]
        )
        stats = deviation_stats(usage, tol)
        statistics["server"] = {
            "template_offset": root_offset,
            "turn_offset": turn_offset,
            "roots": int(roots.size),
            "turns": int(turns.size),
            **stats,
        }
        parts.append((SERVER_USAGE, stats))
    if not parts:
        return Outcome(SKIP, "no measured request with prompt token counts", statistics)
    parts.sort(key=lambda part: part[1]["outside_tolerance"] == 0)  # failing ones first
    failed = any(stats["outside_tolerance"] for _, stats in parts)
    detail = "; ".join(_describe(name, stats, tol) for name, stats in parts)
    if error:
        detail += f"; {SERVER_TOKENIZE}: not checked ({error})"
    return Outcome(FAIL if failed else PASS, detail, statistics)


PROMPT_LENGTH = HealthCheck(
    "prompt_length",
    "new prompt tokens vs target: client count, server /tokenize sample, server usage",
    _prompt_length,
)
