"""Fitting trace requests into the server's context window (``client.max_model_len``).

A request's **context** is what the server holds for it: its history (the prompts and outputs of
its history chain), its own prompt and its requested output. A request whose context exceeds the
limit is **oversized**; ``session_generator.oversized`` says what happens to it:

* ``skip``: its session is not replayed (its history or its children would be broken), and its
  rows are counted;
* ``truncate``: its output is clipped to fit (at least 1 token); a request whose prompt alone
  leaves no room is clipped too when it is a root whose prompt comes from the corpus (a root's
  prompt of a dataset's text or of hash-id blocks is not cut), else its session is skipped as
  above. Clipping a request shortens the history of the requests after it;
* ``send``: nothing is checked here (the server answers 400).

A tool node (a row with a ``tool_latency``) sends nothing, so it is never oversized nor clipped;
its result (its prompt tokens) follows its history in its history children's context.
A node with a transcript (``agent_rounds``) holds its transcript's turns instead of a history:
each turn's answer (its requested output; a tool's result) plus one token for another speaker's
name, as veeksha counts the merged messages (``SessionState.outgoing``).

With several clients (``clients:``) each row is held to the window of the client it names (none:
the first's, or the one ``client_selection`` wrote into its ``client`` before the fit; a client
without ``max_model_len`` is not checked): ``ContextLimit.clients``, each
row's window from ``ContextLimit.windows``. A row's context is its own client's to hold, whichever
clients served its history.

The check is vectorised for one-request sessions and linear chats (the common big traces); a
Python step per session is paid only for the sessions that do not fit, and for DAG flavors
(which link per session anyway).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.arrow import mask

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = ["UNCHECKED", "ContextLimit", "fit_roots", "fit_session", "linear_contexts"]

#: the window of a row whose client gives none (or names no client of the scenario, which
#: ``open_trace`` refuses): larger than any context
UNCHECKED = 1 << 62


@dataclass(frozen=True)
class ContextLimit:
    """``client.max_model_len`` and whether oversized requests are clipped (else skipped);
    ``key``: the key it comes from, as messages name it (not part of the trace cache's key,
    which is ``cache_text``). With several clients, ``clients`` gives each client's (name,
    window or None, key) in the clients' order, and ``tokens`` is the smallest window given."""

    tokens: int
    truncate: bool
    key: str = field(default="client.max_model_len", repr=False, compare=False)
    clients: tuple[tuple[str, int | None, str], ...] = field(default=(), repr=False)

    def cache_text(self) -> str:
        """What of the limit the trace cache's key holds: the repr (one client's, as ever),
        and with several clients each one's window (a change of one rebuilds the cache)."""
        if not self.clients:
            return repr(self)
        return repr(self) + "|" + ",".join(f"{name}={tokens}" for name, tokens, _ in self.clients)

    def row_clients(self, table: pa.Table | pa.RecordBatch) -> NDArray[np.int64]:
        """Each row's client index (``client`` column; null or empty: 0, the first; a name of
        no client: -1, whose window is ``UNCHECKED``)."""
        n = table.num_rows
        out = np.zeros(n, dtype=np.int64)
        if not self.clients or "client" not in table.schema.names:
            return out
        column = table.column("client")
        if column.null_count == n:
            return out
        named = mask(pc.not_equal(column, ""))  # (null: false)
        out[named] = -1
        for index, (name, _, _) in enumerate(self.clients):
            out[mask(pc.equal(column, name))] = index
        return out

    def windows(self, clients: NDArray[np.int64]) -> NDArray[np.int64]:
        """The window of each row of client index ``clients`` (``row_clients``)."""
        if not self.clients:
            return np.full(clients.size, self.tokens, dtype=np.int64)
        table = [UNCHECKED if t is None else t for _, t, _ in self.clients] + [UNCHECKED]
        out: NDArray[np.int64] = np.asarray(table, dtype=np.int64)[clients]
        return out

    def key_of(self, client: int) -> str:
        """The key of client ``client``'s window, as messages name it."""
        if not self.clients or client < 0:
            return self.key
        return self.clients[client][2]


def fit_roots(
    prompt: NDArray[np.int64],
    output: NDArray[np.int64],
    fixed: NDArray[np.bool_],
    limit: ContextLimit,
    windows: NDArray[np.int64] | None = None,
) -> tuple[NDArray[np.bool_], NDArray[np.int64], NDArray[np.int64], int]:
    """One-request sessions: (kept, prompt, output, rows clipped). ``fixed``: the prompt cannot
    be cut (text or hash-id blocks); ``windows``: each row's window (None: ``limit.tokens``)."""
    tokens = limit.tokens if windows is None else windows
    over = prompt + output > tokens
    if not over.any():
        return np.ones(prompt.size, dtype=np.bool_), prompt, output, 0
    if not limit.truncate:
        return ~over, prompt, output, 0
    room = tokens - prompt
    output = np.where(over, np.minimum(output, np.maximum(room, 1)), output)
    cut = over & (room < 1)
    keep = ~(cut & fixed)
    prompt = np.where(cut & ~fixed, tokens - 1, prompt)
    return keep, prompt, output, int((over & keep).sum())


def linear_contexts(
    prompt: NDArray[np.int64], output: NDArray[np.int64], firsts: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Each request's context in linear chats whose rows start at ``firsts`` (every row's
    history is the row before it in its chat): a cumulative sum restarted at each chat."""
    total = np.cumsum(prompt + output)
    before = np.zeros(prompt.size, dtype=np.int64)
    if firsts.size > 1:
        starts = firsts[1:]
        before[starts] = total[starts - 1]
    before = np.maximum.accumulate(before)
    contexts: NDArray[np.int64] = total - before
    return contexts


def fit_session(
    prompt: list[int],
    output: list[int],
    history: list[int | None],
    fixed: list[bool],
    limit: ContextLimit,
    tool: list[bool] | None = None,
    merged: tuple[list[list[int] | None], list[str | None]] | None = None,
    windows: list[int] | None = None,
    over: list[int] | None = None,
) -> tuple[bool, int]:
    """One session's requests in topological order, clipped in place when ``limit.truncate``:
    (whether it fits, requests clipped). ``tool``: the rows that are tool nodes; ``merged``:
    the rows' transcripts and agents (``agent_rounds``); ``windows``: each row's window (None:
    ``limit.tokens``); ``over`` is given each row over its window (clipped, or the one that
    does not fit)."""
    context: list[int] = []
    clipped = 0
    for r in range(len(prompt)):
        tokens = limit.tokens if windows is None else windows[r]
        h = history[r]
        before = 0 if h is None else context[h]
        turns = None if merged is None else merged[0][r]
        if turns is not None and merged is not None:
            agents = merged[1]
            before = sum(
                (prompt[t] if tool is not None and tool[t] else output[t])
                + (agents[t] != agents[r])
                for t in turns
            )
        if tool is not None and tool[r]:
            context.append(before + prompt[r])
            continue
        if before + prompt[r] + output[r] > tokens:
            if over is not None:
                over.append(r)
            if not limit.truncate:
                return False, 0
            room = tokens - before - prompt[r]
            if room < 1:
                if h is not None or turns or fixed[r]:
                    return False, 0
                prompt[r] = tokens - 1
                room = 1
            output[r] = min(output[r], room)
            clipped += 1
        context.append(before + prompt[r] + output[r])
    return True, clipped
