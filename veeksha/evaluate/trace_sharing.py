"""The ``prefix_sharing`` check: the server's prefix-cache hits against what the hash ids imply.

For a trace with hash ids (``shared_prefix``, ``mooncake``, ``rag``), every root request's prompt
is a sequence of **segments**: its blocks (hash id, tokens) and, for ``rag``, the question text.
Equal segments are identical token runs, so the longest prefix a request shares with an earlier
one (in tokens, the *implied* sharing) follows from the ids alone:

* **upper bound**: the longest common prefix with any request *sent* before it; a prefix cache
  can never serve more (and at most the prompt's tokens minus one). More cached tokens than that
  on more than 1 % of the requests means the prompts share more than the trace says: FAIL;
* **expected**: the longest common prefix with a request whose first chunk came before this one
  was sent (its prefill was done, so its blocks were cached). The ratio of the cached tokens the
  server reported to this figure is reported (1.0: the server saw all of the trace's sharing;
  lower: blocks evicted, a block size coarser than the trace's, or no prefix caching).

Only root requests of the first pass are judged (later turns' cached tokens come from their
history; wrapped passes use fresh ids). SKIP when the trace has no hash ids or the server reported
no cached tokens.

With several clients, each target (``api_base`` and ``model``: one server's engine) has a cache
of its own: a request shares only with the requests sent to its own target, so the bound and the
expected sharing are computed per target (clients of one target share its cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from veeksha.errors import VeekshaError
from veeksha.evaluate.health import FAIL, PASS, SKIP, HealthCheck, HealthInput, Outcome
from veeksha.evaluate.stats import column, integers
from veeksha.plural import counted
from veeksha.record import kernels as ak
from veeksha.scenario.models import TraceSessionGenerator

__all__ = ["PREFIX_SHARING", "SharedPrefixes", "segments"]

_OVER_FRACTION = 0.01

Segment = tuple[Any, int]  # (identity, tokens)


def segments(
    hash_ids: Sequence[int], block_tokens: int, block_size: int, text: str | None
) -> list[Segment]:
    """A prompt's segments: ``block_tokens`` tokens of blocks, then the text (if any)."""
    out: list[Segment] = []
    left = block_tokens
    for h in hash_ids:
        if left <= 0:
            break
        out.append((h, min(left, block_size)))
        left -= block_size
    if text:
        out.append((("text", text), len(text.split())))
    return out


class SharedPrefixes:
    """Prompts seen so far (as chained segment keys), and the longest prefix shared with them."""

    def __init__(self) -> None:
        self._longest: dict[tuple[int, Any], int] = {}  # (prefix key, next id) -> most tokens

    def add(self, prompt: list[Segment]) -> None:
        key = 0
        for ident, tokens in prompt:
            slot = (key, ident)
            if self._longest.get(slot, 0) < tokens:
                self._longest[slot] = tokens
            key = hash((key, ident, tokens))

    def shared(self, prompt: list[Segment]) -> int:
        """Tokens of the longest prefix ``prompt`` shares with a prompt added before."""
        key = 0
        total = 0
        for ident, tokens in prompt:
            seen = self._longest.get((key, ident), 0)
            total += min(seen, tokens)
            if seen < tokens:
                break
            key = hash((key, ident, tokens))
        return total


def _root_prompts(data: HealthInput) -> tuple[np.ndarray, list[list[Segment]]] | str:
    """Row indices of the first pass's root requests and their segments (or why there are
    none)."""
    from veeksha.generate.traces import open_trace

    try:
        trace = open_trace(data.scenario)
    except VeekshaError:
        return "the trace can no longer be read"
    block_size = trace.prepared.block_size
    if not block_size:
        return "the trace has no hash ids"
    requests = data.requests
    roots = integers(ak.list_value_length(requests["parents"])) == 0
    sessions = integers(requests["session_id"])
    first_pass = roots & (sessions < trace.hi - trace.lo)
    rows = np.flatnonzero(first_pass)
    if not rows.size:
        return rows, []
    content = {}
    for piece in trace.table.rows(trace.lo, trace.hi):
        if piece.content is None:
            continue
        for k in range(len(piece.bounds) - 1):
            r = int(piece.bounds[k])  # the session's first row: its root
            hashes = piece.content.hash_ids[r]
            if hashes is None:
                continue
            text = piece.content.text[r]
            own = 0 if text is None else len(text.split())
            tokens = int(piece.prompt_tokens[r]) - own
            content[piece.first + k - trace.lo] = segments(hashes, tokens, block_size, text)
    keep = [i for i in rows.tolist() if int(sessions[i]) in content]
    return np.asarray(keep, dtype=np.int64), [content[int(sessions[i])] for i in keep]


def _caches(data: HealthInput, rows: np.ndarray) -> np.ndarray:
    """Per judged row, the index of its target's prefix cache: one per ``api_base`` and
    ``model`` among the scenario's clients (a row of an unknown client: the first's)."""
    target: dict[tuple[str, str], int] = {}
    of_client: dict[str, int] = {}
    for name, client in data.scenario.client_entries():
        key = (client.api_base or "", client.model or "")
        of_client[name] = target.setdefault(key, len(target))
    if len(target) == 1 or "client" not in data.requests.schema.names:
        return np.zeros(len(rows), dtype=np.int64)
    names = data.requests.column("client").take(rows).to_pylist()
    return np.asarray([of_client.get(str(n), 0) for n in names], dtype=np.int64)


def _prefix_sharing(data: HealthInput) -> Outcome:
    if not isinstance(data.scenario.session_generator, TraceSessionGenerator):
        return Outcome(SKIP, "not a trace replay", {})
    found = _root_prompts(data)
    if isinstance(found, str):
        return Outcome(SKIP, found, {})
    rows, prompts = found
    caches = _caches(data, rows)
    cached_all = column(data.requests, "cached_tokens")
    cached = cached_all[rows] if rows.size else cached_all[:0]
    reported = ~np.isnan(cached)
    if not reported.any():
        return Outcome(SKIP, "the server reported no cached tokens", {})
    sent = column(data.requests, "sent_at")[rows]
    first = column(data.requests, "first_chunk_at")[rows]
    total = column(data.requests, "prompt_tokens_total")[rows]
    order = np.argsort(sent, kind="stable")
    by_first = [int(i) for i in np.argsort(first, kind="stable") if not np.isnan(first[i])]
    count = int(caches.max()) + 1 if caches.size else 1
    upper_seen = [SharedPrefixes() for _ in range(count)]
    expected_seen = [SharedPrefixes() for _ in range(count)]
    upper = np.zeros(len(rows))
    expected = np.zeros(len(rows))
    j = 0
    for i in order.tolist():
        while j < len(by_first) and first[by_first[j]] < sent[i]:
            done = by_first[j]
            expected_seen[caches[done]].add(prompts[done])
            j += 1
        cap = max(0.0, total[i] - 1) if not np.isnan(total[i]) else np.inf
        upper[i] = min(upper_seen[caches[i]].shared(prompts[i]), cap)
        expected[i] = min(expected_seen[caches[i]].shared(prompts[i]), cap)
        upper_seen[caches[i]].add(prompts[i])
    ok = reported
    over = int(np.count_nonzero(cached[ok] > upper[ok]))
    observed_sum = float(np.nansum(cached[ok]))
    expected_sum = float(expected[ok].sum())
    ratio = observed_sum / expected_sum if expected_sum > 0 else None
    statistics: dict[str, Any] = {
        "requests": int(ok.sum()),
        "cached_tokens": observed_sum,
        "implied_tokens": expected_sum,
        "hit_ratio": ratio,
        "over_implied": over,
        "caches": len(np.unique(caches[ok])),
    }
    shown = "n/a" if ratio is None else f"{ratio:.3f}"
    answered = counted(int(ok.sum()), "request")
    detail = (
        f"{observed_sum:.0f} cached prompt tokens reported where the hash ids imply"
        f" {expected_sum:.0f} (ratio {shown}); {over} of {answered} above the"
        " shared prefix the ids allow"
    )
    if statistics["caches"] > 1:
        detail += f"; each of {statistics['caches']} targets' caches apart"
    bad = over > max(1, _OVER_FRACTION * int(ok.sum()))
    return Outcome(FAIL if bad else PASS, detail, statistics)


PREFIX_SHARING = HealthCheck(
    "prefix_sharing",
    "server prefix-cache hits vs the sharing the trace's hash ids imply",
    _prefix_sharing,
)
