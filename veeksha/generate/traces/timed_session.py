"""The ``timed_synthetic_session`` flavor: sessions of any DAG, with think times.

Columns: ``session_id`` (required), ``new_input_length`` (the new prompt tokens of the request;
alias ``target_prompt_tokens``; without it, ``input_length`` is taken), ``output_length`` (alias
``requested_output_tokens``), and the topology:

* ``session_context``: ``{node_id, parent_nodes, history_parent, wait_after_ready}`` per row (a
  JSON object; in CSV, its JSON text) giving any DAG; or the same keys at the top level of the
  row, as veeksha's own trace.jsonl writes them (``node_id``, ``parents``, ``history_parent``,
  ``wait_after_ready``), so a recorded run replays as itself;
* legacy rows without either form a linear chat with history, ordered by ``turn_idx`` if given,
  else by file order, with ``wait_after_previous_response_s`` as the think time.

Optional ``client`` (the name of the scenario's client that serves the row; null: the first) and
``priority`` (an integer for ``runtime.priority: node``; null: 0): columns of the row, or keys of
its ``session_context`` (which win), as veeksha's own trace.jsonl writes them for a run with
several clients, so a recorded run replays to the same clients.

Optional node keys (columns of the row, or keys of its ``session_context``, which win), as
trace.jsonl writes them: ``kind`` (``llm``, the default, or ``tool``: no request; the node takes
``latency_s`` seconds, required, and its result, the next prompt's text, is ``result`` if given,
else a placeholder of the row's prompt tokens), ``attempt`` (a re-prompt: the node's line
again with 1, 2, ...; a node with ``n`` such rows is replayed with ``n`` re-prompts),
``valid`` (true or false: whether that attempt's answer passed the recording's validation; a
node whose last attempt says false is replayed with that answer failing too) and
``abandon_after`` (seconds, 0 or more: its user abandoned the request that long after it was
sent, as the scenario's ``abandonment`` does, and the replay abandons it so; a re-prompted
node's is its first row's; refused on a tool row).

Optional ``timestamp`` (alias ``arrival_time``, or ``dispatched_at`` as in trace.jsonl):
seconds; a session arrives at its earliest row (and with ``turn_timing: timestamps`` each node
also waits for its own row's time).

Checked per session, each error with the line of the offending row: a row with and a row
without topology in one session, a node id given twice, a parent that is not a node of the
session, a history parent that is not one of the node's parents, a negative think time, a
cycle. Node ids need not be 0..n-1: nodes are renumbered in topological order (smallest id
first among the ready ones, so veeksha's own ids are kept).

Examples: docs/traces.md.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, ClassVar

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.arrow import from_numpy, numbers
from veeksha.generate.traces.flavor import TraceFlavor, check_lengths
from veeksha.generate.traces.reader import LINE, Field
from veeksha.generate.traces.request_log import CLIENT, PRIORITY

__all__ = ["TimedSessionFlavor"]

_NO_WAIT = float("nan")


class TimedSessionFlavor(TraceFlavor):
    """Rows of sessions with a DAG topology (see module doc)."""

    name = "timed_synthetic_session"
    fields: ClassVar = (
        Field("session_id", str, required=True),
        Field("new_input_length", int, aliases=("target_prompt_tokens",)),
        Field("input_length", int),
        Field("output_length", int, aliases=("requested_output_tokens",), required=True),
        Field("session_context", object),
        Field("node_id", int),
        Field("parents", object, aliases=("parent_nodes",)),
        Field("history_parent", int),
        Field("wait_after_ready", float),
        Field("turn_idx", int),
        Field("wait_after_previous_response_s", float),
        Field("timestamp", float, aliases=("arrival_time", "dispatched_at")),
        CLIENT,
        PRIORITY,
        Field("kind", str),
        Field("latency_s", float),
        Field("result", str),
        Field("attempt", int),
        Field("valid", object),
        Field("agent", object),
        Field("round", object),
        Field("transcript", object),
        Field("images", object),
        Field("abandon_after", object),
    )

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        prompt = pc.coalesce(batch.column("new_input_length"), batch.column("input_length"))
        lines = numbers(batch.column(LINE), np.int64)
        missing = np.flatnonzero(numbers(pc.is_null(prompt).cast(pa.int64()), np.int64))
        if missing.size:
            raise self.error(
                int(lines[missing[0]]),
                "no new_input_length (or input_length) in this row; every row needs one",
            )
        check_lengths(self, batch, ("new_input_length", "input_length", "output_length"))
        contexts = batch.column("session_context").to_pylist()
        top_nodes = batch.column("node_id").to_pylist()
        top_parents = batch.column("parents").to_pylist()
        top_history = batch.column("history_parent").to_pylist()
        top_wait = batch.column("wait_after_ready").to_pylist()
        nodes: list[int | None] = []
        parents: list[str | None] = []
        history: list[int | None] = []
        waits: list[float | None] = []
        clients: list[str | None] = batch.column("client").to_pylist()
        priorities: list[int | None] = batch.column("priority").to_pylist()
        kinds: list[Any] = batch.column("kind").to_pylist()
        latencies: list[Any] = batch.column("latency_s").to_pylist()
        results: list[Any] = batch.column("result").to_pylist()
        attempts: list[Any] = batch.column("attempt").to_pylist()
        valids: list[Any] = batch.column("valid").to_pylist()
        agents: list[Any] = [_decoded(v) for v in batch.column("agent").to_pylist()]
        rounds: list[Any] = [_decoded(v) for v in batch.column("round").to_pylist()]
        transcripts: list[Any] = [_decoded(v) for v in batch.column("transcript").to_pylist()]
        images: list[Any] = [_decoded(v) for v in batch.column("images").to_pylist()]
        abandons: list[Any] = [_decoded(v) for v in batch.column("abandon_after").to_pylist()]
        tool_latency: list[float | None] = [None] * len(contexts)
        for i, raw in enumerate(contexts):
            line = int(lines[i])
            context: dict[str, Any] | None = None
            if raw is not None:
                context = self._context(raw, line)
                clients[i], priorities[i] = self._routing(context, line, clients[i], priorities[i])
                kinds[i] = context.get("kind", kinds[i])
                latencies[i] = context.get("latency_s", latencies[i])
                results[i] = context.get("result", results[i])
                attempts[i] = context.get("attempt", attempts[i])
                valids[i] = context.get("valid", valids[i])
                agents[i] = context.get("agent", agents[i])
                rounds[i] = context.get("round", rounds[i])
                transcripts[i] = context.get("transcript", transcripts[i])
                images[i] = context.get("images", images[i])
                abandons[i] = context.get("abandon_after", abandons[i])
            elif top_nodes[i] is not None:
                context = {
                    "node_id": top_nodes[i],
                    "parent_nodes": None if top_parents[i] is None else _json(top_parents[i]),
                    "history_parent": top_history[i],
                    "wait_after_ready": top_wait[i],
                }
            if kinds[i] is not None or latencies[i] is not None or attempts[i] is not None:
                tool_latency[i], attempts[i] = self._node_kind(
                    kinds[i], latencies[i], results[i], attempts[i], line
                )
            if valids[i] is not None:
                valids[i] = self._valid(valids[i], tool_latency[i] is not None, line)
            if agents[i] is not None or rounds[i] is not None or transcripts[i] is not None:
                agents[i], rounds[i], transcripts[i] = self._speaker(
                    agents[i], rounds[i], transcripts[i], line
                )
            if images[i] is not None:
                images[i] = self.images(images[i], line)
            if abandons[i] is not None:
                abandons[i] = self._abandon_after(abandons[i], tool_latency[i] is not None, line)
            if context is None:
                nodes.append(None)
                parents.append(None)
                history.append(None)
                waits.append(None)
                continue
            node, parent_list, hist, wait = self._topology(context, line)
            nodes.append(node)
            parents.append(msgspec.json.encode(parent_list).decode())
            history.append(hist)
            waits.append(wait)
        legacy_wait = numbers(batch.column("wait_after_previous_response_s"), np.float64, 0.0)
        if (legacy_wait < 0).any():
            bad = int(np.flatnonzero(legacy_wait < 0)[0])
            raise self.error(
                int(lines[bad]), "wait_after_previous_response_s is negative; write 0 or more"
            )
        return pa.RecordBatch.from_arrays(
            [
                batch.column(LINE),
                batch.column("session_id"),
                pc.cast(batch.column("timestamp"), pa.float64()),
                pc.cast(prompt, pa.int64()),
                batch.column("output_length"),
                pa.array(nodes, pa.int64()),
                pa.array(parents, pa.string()),
                pa.array(history, pa.int64()),
                pa.array(waits, pa.float64()),
                batch.column("turn_idx"),
                from_numpy(legacy_wait),
                pa.array(clients, pa.string()),
                pa.array(priorities, pa.int64()),
                pa.array(tool_latency, pa.float64()),
                pa.array(
                    [
                        r if t is not None else None
                        for r, t in zip(results, tool_latency, strict=True)
                    ],
                    pa.string(),
                ),
                pa.array(attempts, pa.int64()),
                pa.array(valids, pa.bool_()),
                pa.array(agents, pa.string()),
                pa.array(rounds, pa.int32()),
                pa.array(transcripts, pa.string()),
                pa.array(images, pa.list_(pa.int64())),
                pa.array(abandons, pa.float64()),
            ],
            names=[
                "line",
                "group",
                "ts",
                "prompt_tokens",
                "output_tokens",
                "node",
                "node_parents",
                "node_history",
                "node_wait",
                "turn",
                "turn_wait",
                "client",
                "priority",
                "tool_latency",
                "text",
                "attempt",
                "valid",
                "agent",
                "round",
                "node_transcript",
                "images",
                "abandon_after",
            ],
        )

    # -------------------------------------------------------------------------- per row

    def _context(self, raw: str, line: int) -> dict[str, Any]:
        try:
            value = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            raise self.error(
                line, f"session_context {raw[:40]!r} is not a JSON object; write one"
            ) from None
        if not isinstance(value, dict):
            raise self.error(line, "session_context must be a JSON object")
        missing = {"node_id", "parent_nodes"} - set(value)
        if missing:
            raise self.error(
                line, f"session_context has no {', '.join(sorted(missing))}; add the key"
            )
        return value

    def _routing(
        self, context: dict[str, Any], line: int, client: str | None, priority: int | None
    ) -> tuple[str | None, int | None]:
        """The row's client and priority, ``session_context``'s keys winning over columns."""
        if context.get("client") is not None:
            client = context["client"]
            if not isinstance(client, str) or not client:
                raise self.error(line, f"client {client!r} must be a client's name (a string)")
        if context.get("priority") is not None:
            priority = _integer(context["priority"])
            if priority is None:
                raise self.error(
                    line, f"priority {context['priority']!r} is not an integer; write one"
                )
        return client, priority

    def _node_kind(
        self, kind: Any, latency: Any, result: Any, attempt: Any, line: int
    ) -> tuple[float | None, int | None]:
        """The row's tool latency (None: an LLM request) and re-prompt number (None: 0)."""
        number = None if attempt is None else _integer(attempt)
        if attempt is not None and (number is None or number < 0):
            raise self.error(line, f"attempt {attempt!r} must be an integer, 0 or more")
        if kind is None or kind == "llm":
            if latency is not None:
                raise self.error(
                    line, 'latency_s is given on an LLM row; add "kind": "tool" or drop it'
                )
            return None, number or None
        if kind != "tool":
            raise self.error(line, f"kind {kind!r} is not a node kind; write llm or tool")
        if number:
            raise self.error(
                line, f"attempt {number} on a tool row; a tool is never re-prompted, drop it"
            )
        if result is not None and not isinstance(result, str):
            raise self.error(line, f"result {result!r} must be the tool's result text")
        seconds = _number(latency)
        if seconds is None or not math.isfinite(seconds) or seconds < 0:
            raise self.error(
                line,
                f"latency_s = {latency!r}: a tool row needs latency_s, 0 or more seconds;"
                " write its duration",
            )
        return seconds, None

    def _valid(self, value: Any, tool: bool, line: int) -> bool | None:
        """The row's ``valid`` (true or false; a column's JSON or CSV text; empty: not given)."""
        flag = value
        if isinstance(value, str):
            text = value.strip()
            try:
                flag = msgspec.json.decode(text) if text else None
            except msgspec.DecodeError:
                flag = text
            if isinstance(flag, str):  # (CSV: True, FALSE, ...)
                flag = {"true": True, "false": False}.get(flag.lower(), flag)
        if flag is not None and not isinstance(flag, bool):
            raise self.error(line, f"valid {flag!r} must be true or false; write one of them")
        if flag is not None and tool:
            raise self.error(
                line, "valid is given on a tool row; a tool's result is never checked, drop it"
            )
        return flag

    def _abandon_after(self, value: Any, tool: bool, line: int) -> float:
        """The row's ``abandon_after``: seconds after its request was sent that its user
        abandoned it (a JSON number; in a CSV, its text: ``nan`` or ``inf`` is not one)."""
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise self.error(
                line,
                f"abandon_after = {value!r} must be 0 or more seconds (a number); write the"
                " seconds after the request was sent that its user abandoned it",
            )
        if tool:
            raise self.error(
                line,
                "abandon_after is given on a tool row; a tool sends no request to abandon, drop it",
            )
        return float(value)

    def _speaker(
        self, agent: Any, round_: Any, transcript: Any, line: int
    ) -> tuple[str | None, int | None, str | None]:
        """The row's ``agent``, ``round`` and ``transcript`` (as JSON text, for ``link``)."""
        if agent is not None and (not isinstance(agent, str) or not agent):
            raise self.error(line, f"agent {agent!r} must be the agent's id (a string)")
        number = None if round_ is None else _integer(round_)
        if round_ is not None and (isinstance(round_, str) or number is None or number < 0):
            raise self.error(line, f"round {round_!r} must be an integer, 0 or more")
        text = None
        if transcript is not None:
            if not isinstance(transcript, list) or any(
                isinstance(t, bool) or not isinstance(t, int) for t in transcript
            ):
                raise self.error(
                    line,
                    f"transcript {transcript!r} must be a list of node ids (integers); write"
                    " the ids of the earlier nodes whose turns the node's messages merge",
                )
            if agent is None:
                raise self.error(
                    line, "transcript is given without agent; add the node's agent (its id)"
                )
            text = msgspec.json.encode(transcript).decode()
        return agent, number, text

    def _topology(
        self, context: dict[str, Any], line: int
    ) -> tuple[int, list[int], int | None, float]:
        node = _integer(context.get("node_id"))
        if node is None:
            raise self.error(line, f"node_id {context.get('node_id')!r} is not an integer")
        raw_parents = context.get("parent_nodes")
        if isinstance(raw_parents, str):
            raw_parents = msgspec.json.decode(raw_parents)
        raw_parents = raw_parents or []
        if not isinstance(raw_parents, list):
            raise self.error(line, "parent_nodes must be a list of node ids (or null)")
        parent_list = [_integer(p) for p in raw_parents]
        if any(p is None for p in parent_list):
            raise self.error(line, f"parent_nodes {raw_parents!r} must be integers")
        hist = context.get("history_parent")
        history = None if hist is None else _integer(hist)
        if hist is not None and history is None:
            raise self.error(line, f"history_parent {hist!r} is not an integer")
        wait_raw = context.get("wait_after_ready")
        wait = 0.0 if wait_raw is None else float(wait_raw)
        if math.isnan(wait) or wait < 0:
            raise self.error(line, f"wait_after_ready = {wait_raw!r} must be 0 or more seconds")
        return node, parent_list, history, wait  # type: ignore[return-value]

    # --------------------------------------------------------------------------- per session

    def link(self, session: pa.Table) -> pa.Table:
        lines = session.column("line").to_pylist()
        nodes = session.column("node").to_pylist()
        with_context = [n is not None for n in nodes]
        if any(with_context) and not all(with_context):
            bad = with_context.index(not with_context[0])
            raise self.error(
                lines[bad],
                "some rows of this session give their topology (session_context or node_id)"
                " and others do not; give it on every row of a session or on none",
            )
        if not with_context[0]:
            if session.column("attempt").null_count < session.num_rows:
                raise self.error(
                    lines[0], "attempt is given in a session without node ids; give node_id"
                )
            if session.column("node_transcript").null_count < session.num_rows:
                raise self.error(
                    lines[0], "transcript is given in a session without node ids; give node_id"
                )
            return self._linear(session)
        session = self._fold_attempts(session)
        lines = session.column("line").to_pylist()
        nodes = session.column("node").to_pylist()
        parents = [msgspec.json.decode(p) for p in session.column("node_parents").to_pylist()]
        history = session.column("node_history").to_pylist()
        waits = session.column("node_wait").to_pylist()
        row_of: dict[int, int] = {}
        for r, node in enumerate(nodes):
            if node in row_of:
                raise self.error(
                    lines[r],
                    f"node_id {node} appears twice in session {session.column('group')[0]}"
                    f" (first on line {lines[row_of[node]]}); give each node once",
                )
            row_of[node] = r
        for r, node in enumerate(nodes):
            for p in parents[r]:
                if p not in row_of:
                    raise self.error(
                        lines[r],
                        f"node {node} has parent {p}, which is not a node of its session;"
                        " fix parent_nodes",
                    )
                if p == node:
                    raise self.error(lines[r], f"node {node} is its own parent; fix parent_nodes")
            if history[r] is not None and history[r] not in parents[r]:
                raise self.error(
                    lines[r],
                    f"history_parent {history[r]} of node {node} is not one of its parent_nodes"
                    f" {parents[r]}; add it to parent_nodes or fix history_parent",
                )
        order = self._topological(nodes, parents, lines)
        local = {nodes[r]: i for i, r in enumerate(order)}
        offsets = [0]
        values: list[int] = []
        for r in order:
            values.extend(sorted(local[p] for p in parents[r]))
            offsets.append(len(values))
        ordered = session.take(from_numpy(np.asarray(order, dtype=np.int64)))
        ordered = ordered.append_column(
            "transcript", self._transcripts(session, order, local, lines)
        )
        return self._linked(
            ordered,
            pa.ListArray.from_arrays(
                from_numpy(np.asarray(offsets, dtype=np.int32)),
                from_numpy(np.asarray(values, dtype=np.int32)),
            ),
            pa.array(
                [None if history[r] is None else local[history[r]] for r in order], pa.int32()
            ),
            from_numpy(np.asarray([waits[r] for r in order], dtype=np.float64)),
        )

    def _transcripts(
        self, session: pa.Table, order: list[int], local: dict[int, int], lines: list[int]
    ) -> pa.Array:
        """Each row's transcript (in ``order``) as node indices within the session; null on
        every row of a session without one."""
        column = session.column("node_transcript")
        if column.null_count == session.num_rows:
            return pa.nulls(session.num_rows, pa.list_(pa.int32()))
        raw = column.to_pylist()
        nodes = session.column("node").to_pylist()
        if column.null_count:
            bad = raw.index(None)
            raise self.error(
                lines[bad],
                f"node {nodes[bad]} has no transcript while other rows of its session have"
                " one; give it on every row of an agent_rounds session (or on none)",
            )
        out: list[list[int]] = [[] for _ in order]
        for i, r in enumerate(order):
            me = local[nodes[r]]
            for t in msgspec.json.decode(raw[r]):
                if local.get(t, me) >= me:
                    raise self.error(
                        lines[r],
                        f"the transcript of node {nodes[r]} names node {t}, which is not an"
                        " earlier node of its session; fix transcript (ids of earlier nodes)",
                    )
                out[i].append(local[t])
        return pa.array(out, pa.list_(pa.int32()))

    def _fold_attempts(self, session: pa.Table) -> pa.Table:
        """The session without its re-prompt rows (``attempt`` ≥ 1), each node's count of them
        in the ``reprompts`` column (the highest attempt number; null: none) and its last
        attempt's ``valid``."""
        attempts = session.column("attempt").to_pylist()
        if not any(attempts):
            return session
        nodes = session.column("node").to_pylist()
        lines = session.column("line").to_pylist()
        valids = session.column("valid").to_pylist()
        keep = [r for r, a in enumerate(attempts) if not a]
        first = {nodes[r] for r in keep}
        last: dict[int, int] = {}  # node -> the row of its highest attempt
        for r, a in enumerate(attempts):
            if a:
                if nodes[r] not in first:
                    raise self.error(
                        lines[r],
                        f"attempt {a} of node {nodes[r]} comes without the node's first attempt"
                        " (its row without attempt); add that row or drop this one",
                    )
                if nodes[r] not in last or a > (attempts[last[nodes[r]]] or 0):
                    last[nodes[r]] = r
        for r, a in enumerate(attempts):
            if valids[r] and nodes[r] in last and (a or 0) < attempts[last[nodes[r]]]:
                raise self.error(
                    lines[r],
                    f"attempt {a or 0} of node {nodes[r]} is valid, yet the node has attempt"
                    f" {attempts[last[nodes[r]]]}: a valid answer is not re-prompted; fix valid"
                    " or drop the later attempts",
                )
        kept = session.take(from_numpy(np.asarray(keep, dtype=np.int64)))
        column = pa.array(
            [attempts[last[nodes[r]]] if nodes[r] in last else None for r in keep], pa.int32()
        )
        valid = pa.array(
            [valids[last[nodes[r]]] if nodes[r] in last else valids[r] for r in keep], pa.bool_()
        )
        kept = kept.set_column(kept.schema.get_field_index("valid"), "valid", valid)
        return kept.append_column("reprompts", column)

    def _topological(
        self, nodes: list[int], parents: list[list[int]], lines: list[int]
    ) -> list[int]:
        """Rows in topological order, smallest node id first among the ready (Kahn)."""
        row_of = {node: r for r, node in enumerate(nodes)}
        waiting = [len(set(ps)) for ps in parents]
        children: dict[int, list[int]] = {}
        for r, ps in enumerate(parents):
            for p in set(ps):
                children.setdefault(row_of[p], []).append(r)
        ready = [(nodes[r], r) for r in range(len(nodes)) if waiting[r] == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            _, r = heapq.heappop(ready)
            order.append(r)
            for c in children.get(r, ()):
                waiting[c] -= 1
                if waiting[c] == 0:
                    heapq.heappush(ready, (nodes[c], c))
        if len(order) < len(nodes):
            stuck = min((r for r in range(len(nodes)) if waiting[r] > 0), key=lambda r: lines[r])
            raise self.error(
                lines[stuck],
                f"node {nodes[stuck]} is on a cycle of parent_nodes; a session must be a DAG",
            )
        return order

    def _linear(self, session: pa.Table) -> pa.Table:
        turns = session.column("turn").to_pylist()
        n = session.num_rows
        order = list(range(n))
        if any(t is not None for t in turns):
            order.sort(key=lambda r: (turns[r] is None, turns[r] or 0))
        ordered = session.take(from_numpy(np.asarray(order, dtype=np.int64)))
        waits = numbers(ordered.column("turn_wait"), np.float64, 0.0)
        waits[0] = 0.0
        return self._linked(
            ordered,
            pa.ListArray.from_arrays(
                from_numpy(np.asarray([0, *range(n)], dtype=np.int32)),
                from_numpy(np.arange(n - 1, dtype=np.int32)),
            ),
            pa.array([None, *range(n - 1)], pa.int32()),
            from_numpy(waits),
        )

    @staticmethod
    def _linked(table: pa.Table, parents: pa.Array, history: pa.Array, wait: pa.Array) -> pa.Table:
        return (
            table.append_column("parents", parents)
            .append_column("history", history)
            .append_column("wait", wait)
        )


def _decoded(text: str | None) -> Any:
    """A JSON column's value (its text, when it is not JSON: a CSV cell)."""
    if text is None or not text.strip():
        return None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text.strip()


def _json(value: Any) -> Any:
    return msgspec.json.decode(value) if isinstance(value, str) else value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None
