"""The ``prompt_length`` health check: were prompts as long as intended, in whose count?

Up to three comparisons, each judged against ``prompt_length_tolerance`` (tokens) on its own:

``client count vs target``
    every measured request: ``prompt_tokens_new - target_prompt_tokens`` (veeksha's tokenizer;
    prompts built from a vocabulary, builtin or a calibrated server's, count their target).
``server /tokenize vs target``
    with a calibrated server tokenizer: a seeded sample of up to 32 sent prompts' new parts,
    tokenized by the server after the run (``veeksha.engine.prompt_check``), less its
    overhead, minus the target. From ``summary.json`` → ``run.server_tokenizer.verification``
    (each of ``run.server_tokenizers`` with several: each samples its own clients' prompts).
``server usage vs expected``
    the roots that the server reported usage for: ``prompt_tokens_total - target``, less the
    median of those (the chat template's constant overhead); and each history child whose
    parent was answered, both with usage: ``total - (parent's total + parent's output +
    target)``, less the median of those (the template tokens of the turn's two new messages,
    constant per turn), compared only when the parent's client is of the child's tokenizer
    (``Scenario.tokenizer_sharing``: another's server counts the history in other tokens).
    Re-prompts (``attempt`` > 0) are not compared: their prompt adds the
    failed answer and a note to the first attempt's; a re-prompted parent's total is its first
    attempt's and its output its last attempt's (its children carry its first prompt and its
    final answer). A template only adds tokens, so a median below 0 is not taken away: a
    server that counts every prompt 122 tokens short (another tokenizer than the client's, or
    prompts cut) fails, even when every prompt has the same length. Holds where the template
    adds the same tokens to every message and the server re-tokenizes an answer to as many
    tokens as it generated (the simulator does, to the token; a real server within a token or
    two, well inside the tolerance).

    With a calibrated server tokenizer whose server counts a chat request (vLLM's ``/tokenize``
    chat form; llama.cpp's ``/apply-template`` then ``/tokenize``), the template is not
    estimated: it was measured at set-up in the server's own tokens (``summary.json`` →
    ``run.server_tokenizer.chat_template``: ``prompt_tokens`` a root, ``turn_tokens`` a turn;
    ``veeksha.generate.calibration.measure_chat_template``), and exactly that is taken away
    from the chat rows, never undecided (the medians are still reported); with several
    clients, each chat client's rows lose their own server's template, and only when every
    chat client's was measured (else the estimate below, from every chat row). A server that
    refuses a chat request (a llama-server without ``/apply-template``) leaves the estimate
    below.

    Only a chat client's rows have a template: the completions API sends the prompt as it is
    (a BOS at most), so nothing is taken away from its rows, and a server that counts them
    long fails. Nor can a median be told from another tokenizer when the prompts' lengths are
    too alike: a tokenizer counting 1.5 tokens a word adds half of every prompt, which on
    prompts of one length is a constant as well. A median above the tolerance is *undecided*
    when a share of the prompt that large, ``offset × |target − median target| / median
    target``, stays within the tolerance for every compared request (so the comparison could
    not show it); it is still taken away, but the check is WARN and says so, unless the
    server's /tokenize sample (a comparison of the prompts in its own tokenizer) was made and
    passed.

The detail names every comparison made, failing ones first, each with its own count and
maximum, e.g. ``server usage vs expected: 8 of 10 off by more than 15 tokens (max 37); client
count vs target: 0 of 30 (max 0)``, and what the usage comparison took away (``server usage
vs expected, less a template of 30 tokens a prompt and 8 a turn: ...``). FAIL when any
comparison has a request outside the tolerance; WARN when none does but an offset was
undecided; SKIP when no comparison has data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from veeksha.evaluate.health import FAIL, PASS, SKIP, WARN, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.stats import (
    Floats,
    column,
    first_rows,
    int_column,
    integers,
    median,
    of_clients,
    previous_attempts,
    status_is,
)
from veeksha.plural import counted
from veeksha.record import kernels as ak

if TYPE_CHECKING:
    from numpy.typing import NDArray

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


class _Usage(NamedTuple):
    """Compared requests of one kind (roots, or turns): the server's count less the expected
    one, their targets, and which went through the chat API (a template applies)."""

    deviation: Floats
    target: Floats
    chat: NDArray[np.bool_]
    rows: NDArray[np.intp]  # the compared rows (indices of the measured table)


def _chat_rows(data: HealthInput) -> NDArray[np.bool_]:
    """The measured rows of chat clients (the completions API applies no chat template)."""
    table = data.measured
    entries = data.scenario.client_entries()
    chat = [name for name, client in entries if client.type == "openai_chat_completions"]
    if len(chat) == len(entries):  # (one kind of client: the rows need not be looked at)
        return np.ones(table.num_rows, dtype=bool)
    if not chat:
        return np.zeros(table.num_rows, dtype=bool)
    return of_clients(table, chat)


def _with_images(table: pa.Table) -> NDArray[np.bool_]:
    """The rows whose own message carried images (the server counts their image tokens too,
    which no tokenizer here knows: they are not compared with its count); none in a run
    recorded before the column."""
    if "images" not in table.schema.names:
        return np.zeros(table.num_rows, dtype=bool)
    with_images: NDArray[np.bool_] = int_column(table, "images") > 0
    return with_images


def _server_usage(data: HealthInput, chat: NDArray[np.bool_], imaged: NDArray[np.bool_]) -> _Usage:
    """The roots with usage, but those with images (``imaged``): server total − target."""
    table = data.measured
    rows = column(table, "usage_reported") > 0
    rows &= ~imaged
    rows &= integers(ak.list_value_length(table.column("parents"))) == 0  # roots
    rows &= _first_attempts(table)
    target = column(table, "target_prompt_tokens")
    server = column(table, "prompt_tokens_total")
    server -= target
    rows &= ~np.isnan(server)
    return _Usage(server[rows], target[rows], chat[rows], np.flatnonzero(rows))


def _server_usage_turns(
    data: HealthInput, chat: NDArray[np.bool_], imaged: NDArray[np.bool_]
) -> _Usage:
    """Per history child whose parent was answered with usage (both rows' usage reported):
    its server total − (its parent's server total + the parent's output + its target). A
    re-prompted parent's children carry its first prompt and its final answer: its first
    attempt's total and its last attempt's output; a re-prompt is no child's first attempt
    (``_first_attempts``) and is not compared."""
    table = data.measured
    history = column(table, "history_parent")
    children = np.flatnonzero(~np.isnan(history) & _first_attempts(table) & ~imaged)
    if children.size == 0:
        return _Usage(np.empty(0), np.empty(0), np.zeros(0, dtype=bool), children)
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
    groups = _tokenizer_groups(data)
    if groups is not None:  # (a history in another tokenizer's tokens: its server differs)
        valid &= groups[children] == groups[firsts]
        del groups
    total = column(table, "prompt_tokens_total")
    turn = total[children] - total[firsts]
    del total
    turn -= column(table, "output_tokens")[lasts]
    target = column(table, "target_prompt_tokens")[children]
    turn -= target
    keep = valid & ~np.isnan(turn)
    return _Usage(turn[keep], target[keep], chat[children][keep], children[keep])


def _tokenizer_groups(data: HealthInput) -> NDArray[np.int64] | None:
    """Each measured row's tokenizer group (``Scenario.tokenizer_sharing``: the clients
    whose prompts one tokenizer counts; -1 for a row of no client, a tool's), or None when
    every client's prompts are counted by one."""
    sharing = data.scenario.tokenizer_sharing()
    if len(set(sharing)) < 2:
        return None
    table = data.measured
    names = [name for name, _ in data.scenario.client_entries()]
    groups = np.full(table.num_rows, -1, dtype=np.int64)
    for group in sorted(set(sharing)):
        members = [name for name, g in zip(names, sharing, strict=True) if g == group]
        groups[of_clients(table, members)] = group
    return groups


class _Offset(NamedTuple):
    """What is taken away from one kind of compared requests (see the module docstring)."""

    median: float | None  # the chat rows' median deviation (None: no chat row)
    taken: float  # the template tokens taken away from the chat rows (0: none)
    undecided: bool  # taken, though a share of the prompt that large could not have shown


def _offset(usage: _Usage, tolerance: int) -> _Offset:
    """The chat template's tokens in ``usage``'s chat rows: their median deviation, when above
    0; undecided when above the tolerance while the chat rows' targets are too alike for a
    share of the prompt that large to leave the tolerance anywhere."""
    chat = usage.chat
    if not chat.any():
        return _Offset(None, 0.0, False)
    found = median(usage.deviation[chat])
    taken = max(found, 0.0)
    undecided = False
    if taken > tolerance:
        targets = usage.target[chat]
        middle = median(targets)
        spread = float(np.abs(targets - middle).max()) if middle > 0 else 0.0
        undecided = middle <= 0 or taken * spread / middle <= tolerance
    return _Offset(found, taken, undecided)


def _measured(median_found: float | None, tokens: int) -> _Offset:
    """The template measured on the server's /tokenize: taken away exactly from the chat rows
    (none: ``median_found`` None), never undecided."""
    return _Offset(median_found, 0.0 if median_found is None else float(tokens), False)


def _server_tokenizers(data: HealthInput) -> list[dict[str, Any]]:
    """Each calibrated server tokenizer's facts (``summary.json`` → ``run.server_tokenizers``,
    with several; else ``run.server_tokenizer``)."""
    several = data.run_info.get("server_tokenizers")
    if isinstance(several, list):
        return [info for info in several if isinstance(info, dict)]
    info = data.run_info.get("server_tokenizer")
    return [info] if isinstance(info, dict) else []


class _Measured(NamedTuple):
    """The chat templates measured at set-up, per compared row of the chat clients."""

    prompt: Floats  # a prompt's template tokens, per measured row (0: not a chat row)
    turn: Floats  # a turn's
    sizes: set[tuple[int, int]]  # the templates measured (prompt, turn), for the detail


def _measured_template(data: HealthInput) -> _Measured | None:
    """The chat template's tokens a prompt and a turn of each chat client's rows, as measured
    at set-up on its server's /tokenize (``summary.json`` → ``run.server_tokenizer
    .chat_template``, ``run.server_tokenizers`` with several), else None: every chat client's
    template must have been measured (its server tokenizer's ``clients``), or none is used."""
    table = data.measured
    entries = data.scenario.client_entries()
    chat = {name for name, client in entries if client.type == "openai_chat_completions"}
    prompt = np.zeros(table.num_rows)
    turn = np.zeros(table.num_rows)
    sizes: set[tuple[int, int]] = set()
    covered: set[str] = set()
    for info in _server_tokenizers(data):
        template = info.get("chat_template")
        if not isinstance(template, dict):
            continue
        tokens, turn_tokens = template.get("prompt_tokens"), template.get("turn_tokens")
        if type(tokens) is not int or type(turn_tokens) is not int:
            continue
        names = info.get("clients")
        if not isinstance(names, list):  # (one client, or the one tokenizer of them all)
            names = [name for name, _ in entries]
        if len(names) == len(entries):
            rows: NDArray[np.bool_] | slice = slice(None)
        else:
            rows = of_clients(table, names)
        prompt[rows] = tokens
        turn[rows] = turn_tokens
        sizes.add((tokens, turn_tokens))
        covered.update(names)
    if not sizes or not chat <= covered:
        return None
    return _Measured(prompt, turn, sizes)


def _server_tokenize(data: HealthInput) -> tuple[Floats, str | None]:
    found: list[Floats] = []
    errors: list[str] = []
    for info in _server_tokenizers(data):
        verification = info.get("verification")
        if not isinstance(verification, dict):
            continue
        found.append(np.asarray(verification.get("deviations") or [], dtype=np.float64))
        error = verification.get("error")
        if error:
            errors.append(str(error))
    deviations = np.concatenate(found) if found else np.empty(0)
    return deviations, "; ".join(errors) if errors else None


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
    chat = _chat_rows(data)
    with_images = _with_images(data.measured)
    roots = _server_usage(data, chat, with_images)
    turns = _server_usage_turns(data, chat, with_images)
    del chat
    undecided = ""
    if roots.deviation.size or turns.deviation.size:
        # a template only adds tokens: a median below 0 (the server counts fewer tokens than
        # were sent: another tokenizer, or prompts cut) is not an offset to take away; and
        # only a chat request has one
        root, turn = _offset(roots, tol), _offset(turns, tol)
        measured = _measured_template(data)
        root_taken = np.where(roots.chat, root.taken, 0.0)
        turn_taken = np.where(turns.chat, turn.taken, 0.0)
        if measured is not None:  # (each server's own count of its template: exact)
            # (one template: the detail names it; several: "each client's")
            (one_prompt, one_turn) = min(measured.sizes)
            root, turn = _measured(root.median, one_prompt), _measured(turn.median, one_turn)
            root_taken = np.where(roots.chat, measured.prompt[roots.rows], 0.0)
            turn_taken = np.where(turns.chat, measured.turn[turns.rows], 0.0)
        usage = np.concatenate([roots.deviation - root_taken, turns.deviation - turn_taken])
        stats = deviation_stats(usage, tol)
        statistics["server"] = {
            "template_offset": root.median,
            "turn_offset": turn.median,
            "roots": int(roots.deviation.size),
            "turns": int(turns.deviation.size),
            "completions_requests": int((~roots.chat).sum() + (~turns.chat).sum()),
            "template_measured": measured is not None,
            **stats,
        }
        confirmed = sampled.size > 0 and not (np.abs(sampled) > tol).any()
        if (root.undecided or turn.undecided) and not confirmed:
            key = "the clients' tokenizer" if data.scenario.clients else "client.tokenizer"
            undecided = _undecided(roots, root, turns, turn, key)
            statistics["server"]["offset_undecided"] = True
        several = measured is not None and len(measured.sizes) > 1
        taken = ", less each client's measured template" if several else ""
        parts.append((SERVER_USAGE + (taken or _taken(root, turn, measured is not None)), stats))
    imaged = int(with_images.sum())
    del with_images
    if imaged:
        statistics["image_requests"] = imaged
    if not parts:
        return Outcome(SKIP, "no measured request with prompt token counts", statistics)
    parts.sort(key=lambda part: part[1]["outside_tolerance"] == 0)  # failing ones first
    failed = any(stats["outside_tolerance"] for _, stats in parts)
    detail = "; ".join(_describe(name, stats, tol) for name, stats in parts)
    if error:
        detail += f"; {SERVER_TOKENIZE}: not checked ({error})"
    if imaged:
        detail += (
            f"; {counted(imaged, 'request')} with images not held to the server's count (it"
            " counts their image tokens too)"
        )
    if failed:
        return Outcome(FAIL, detail, statistics)
    if undecided:
        return Outcome(WARN, f"{detail}; {undecided}", statistics)
    return Outcome(PASS, detail, statistics)


def _taken(root: _Offset, turn: _Offset, measured: bool = False) -> str:
    """What the usage comparison took away, for its name in the detail ("" when nothing)."""
    prompt, turn_tokens = round(root.taken), round(turn.taken)
    what = "the measured template" if measured else "a template"
    if prompt and turn_tokens:
        return f", less {what} of {prompt} tokens a prompt and {turn_tokens} a turn"
    if prompt or turn_tokens:
        kind = "prompt" if prompt else "turn"
        return f", less {what} of {counted(prompt or turn_tokens, 'token')} a {kind}"
    return ""


def _undecided(
    roots: _Usage, root: _Offset, turns: _Usage, turn: _Offset, key: str = "client.tokenizer"
) -> str:
    """Why the offset taken away may not be a template: the share of the prompt it is."""
    usage, offset = (roots, root) if root.undecided else (turns, turn)
    what = "prompt" if root.undecided else "turn's new message"
    middle = median(usage.target[usage.chat])
    share = f" ({offset.taken / middle:.0%} of its median target)" if middle > 0 else ""
    return (
        f"undecided: the server counts every {what} about {round(offset.taken)} tokens more "
        f"than sent{share}, a chat template's or another tokenizer's than the client's: "
        "prompts of so alike lengths cannot tell (vary body_length_generator, or use "
        f"{key} type server)"
    )


PROMPT_LENGTH = HealthCheck(
    "prompt_length",
    "new prompt tokens vs target: client count, server /tokenize sample, server usage",
    _prompt_length,
)
