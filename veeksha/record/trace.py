"""trace.jsonl: one JSON line per dispatched request, with its session context.

The event loop only appends a reference (``TraceWriter.add``, no encoding, no I/O); the results
writer thread (``ResultWriter(..., trace=...)``) calls ``flush`` at every tick, which encodes the
pending entries with msgspec in one batch and appends them with a single ``write`` call, so a
killed process leaves whole lines only (all but the last second's).

A line (``include_content`` adds ``messages``)::

    {"phase":"measured","session_id":3,"node_id":1,"request_id":17,"parents":[0],
     "history_parent":0,"wait_after_ready":0.8,"dispatched_at":12.5,
     "target_prompt_tokens":25,"requested_output_tokens":200,
     "messages":[["user","..."],["assistant","..."],["user","..."]]}

``dispatched_at`` is seconds since the run's t0: when the request was to leave (the later of its
hand-over and its ready time; requests.parquet's is the worker's own reading, µs later). The lengths
are always written: they make the file a replayable trace (``flavor: timed_synthetic_session``,
docs/traces.md). A run with several clients adds ``client`` (the name of the client that served the
request) and a node with a priority adds ``priority``, so the replay goes to the same clients in the
same order. A tool node's line (no request was sent) has ``"kind":"tool"`` and ``latency_s`` instead
of a client (with ``include_content``, its result as ``result`` instead of ``messages``); a
re-prompt (a failed validation's next attempt) repeats its node's line with ``attempt`` (1, 2, ...),
so the replay sends as many attempts. A node with a validation adds ``valid`` (whether the answer
passed; left out when there was no answer to check), so the replay ends the node as it ended: with a
failed last answer when its re-prompts ran out. Such a line is written once its answer is checked;
the lines after it wait for it, so the file stays in hand-over order (a replay breaks ties between
equal start times by file order). A node of an ``agent_rounds`` graph adds ``agent``, ``round`` and
``transcript`` (the node ids whose turns its messages merge, in order; the turns of nodes of its own
agent are its ``assistant`` messages), so the replay sends the same merged messages. A request
whose message carried images (the image channel) adds ``images``: each of its own message's as
``[width, height, seed]`` (its history's are its history parent's lines'); ``messages`` hold the
texts only. A request the scenario's ``abandonment`` chose adds ``abandon_after``: the seconds
after it was sent that its worker drops the connection (its user gives up), so the replay
abandons it after as long (a request answered sooner completes).

``messages`` are the ones sent: with a client's ``use_min_tokens_prompt_fallback``, the last user
message ends with the ``" Generate at least N tokens."`` its worker appended (N =
``requested_output_tokens``), appended again here at ``flush`` (the same text, off the worker).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

import msgspec

from veeksha.dispatch.messages import WorkItem
from veeksha.generate.spec import NodeSpec

__all__ = ["TraceEntry", "TraceWriter", "read_trace"]


class TraceEntry(msgspec.Struct, omit_defaults=True):
    """One line of trace.jsonl; ``messages`` is present only with ``include_content``."""

    phase: str
    session_id: int
    node_id: int
    request_id: int
    parents: tuple[int, ...]
    history_parent: int | None
    wait_after_ready: float
    dispatched_at: float
    target_prompt_tokens: int | None = None
    requested_output_tokens: int | None = None
    client: str | None = None
    priority: int | None = None
    kind: str | None = None  # only "tool" is written (an LLM line omits it)
    latency_s: float | None = None
    attempt: int | None = None
    valid: bool | None = None  # its answer passed the node's validation (a checked node only)
    agent: str | None = None  # agent_rounds graphs only: the speaking agent,
    round: int | None = None  # its round
    transcript: tuple[int, ...] | None = None  # and the nodes whose turns its messages merge
    result: str | None = None
    messages: list[tuple[str, str]] | None = None
    images: tuple[tuple[int, int, int], ...] | None = None  # its own message's: width, height, seed
    abandon_after: float | None = None  # seconds after it was sent that its user abandons it
    shard: int | None = None  # the shard that sent it (a distributed run's shards only)


class _Verdict:
    """A checked request's answer: ``valid`` is set (on the event loop) before ``done``."""

    __slots__ = ("done", "valid")

    def __init__(self) -> None:
        self.done = False
        self.valid: bool | None = None


# (phase, session id, node, item, attempt, verdict: None when the node has no validation)
_Line = tuple[str, int, NodeSpec, WorkItem, int, _Verdict | None]


class TraceWriter:
    """Appends trace.jsonl lines; ``add`` is cheap, ``flush`` (off the event loop) does the I/O.

    Only one thread may call ``flush``/``close`` (the results writer thread, or the owner when
    used alone); ``add`` may run concurrently on the event loop.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        include_content: bool,
        *,
        t0_ns: int,
        clients: list[str] | None = None,
        shard: int | None = None,
        prompt_fallback: list[bool] | None = None,
    ) -> None:
        self.path = Path(path)
        # (by client index: the clients whose worker appends the prompt fallback; the line
        # gets the same text here, off the worker's path, so ``messages`` is what was sent)
        self._fallback: list[bool] | None = None
        self._with_fallback: Callable[[list[tuple[str, str]], int], list[tuple[str, str]]]
        if include_content and prompt_fallback and any(prompt_fallback):
            from veeksha.dispatch.openai import with_fallback

            self._fallback, self._with_fallback = prompt_fallback, with_fallback
        self._shard = shard
        # client names by index, written only when there are several
        self._clients = clients if clients is not None and len(clients) > 1 else None
        self.include_content = include_content
        self._t0_ns = t0_ns
        self._pending: deque[_Line] = deque()
        self._awaiting: dict[int, _Verdict] = {}  # request id -> verdict, until it is checked
        self._encoder = msgspec.json.Encoder()
        self._fd: int | None = os.open(
            self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644
        )
        self.lines_written = 0

    def add(
        self, phase: str, session_id: int, node: NodeSpec, item: WorkItem, attempt: int = 0
    ) -> None:
        """Record that ``item`` (the request of ``node``; its ``attempt``: 0, or the re-prompt's
        number) was dispatched. O(1), no I/O. The line of a node with a validation waits for
        ``judged``."""
        verdict = None
        if node.validation is not None:
            verdict = self._awaiting[item.request_id] = _Verdict()
        self._pending.append((phase, session_id, node, item, attempt, verdict))

    def judged(self, request_id: int, valid: bool | None) -> None:
        """The answer of request ``request_id`` was checked (``valid``; None: no answer, or a
        request withdrawn before it left). A no-op for a request whose line does not wait."""
        verdict = self._awaiting.pop(request_id, None)
        if verdict is not None:
            verdict.valid = valid
            verdict.done = True

    def _entry(
        self,
        phase: str,
        session_id: int,
        node: NodeSpec,
        item: WorkItem,
        attempt: int,
        verdict: _Verdict | None,
    ) -> TraceEntry:
        entry = TraceEntry(
            phase=phase,
            session_id=session_id,
            node_id=node.node_id,
            request_id=item.request_id,
            parents=node.parents,
            history_parent=node.history_parent,
            wait_after_ready=node.wait_after_ready_s,
            # (handed over ahead: when it was due to leave, its release time)
            dispatched_at=(max(item.dispatched_at_ns, item.not_before_ns) - self._t0_ns) / 1e9,
            target_prompt_tokens=node.prompt_tokens,
            requested_output_tokens=item.max_tokens,
        )
        if self._shard is not None:
            entry.shard = self._shard
        if node.transcript is not None:
            entry.agent = node.agent
            entry.round = node.round
            entry.transcript = node.transcript
        if node.kind != "llm":  # a tool: no request, no client
            entry.kind = node.kind
            entry.latency_s = node.latency_s
            if self.include_content:
                entry.result = node.prompt
            return entry
        if self._clients is not None:
            entry.client = self._clients[node.client]
        if node.priority:
            entry.priority = node.priority
        if attempt:
            entry.attempt = attempt
        if node.images:
            entry.images = node.images
        if node.abandon_after_s is not None:
            entry.abandon_after = node.abandon_after_s
        if verdict is not None and verdict.done:
            entry.valid = verdict.valid
        if self.include_content:
            entry.messages = item.messages
            if self._fallback is not None and self._fallback[node.client]:
                entry.messages = self._with_fallback(item.messages, item.max_tokens)
        return entry

    def flush(self, final: bool = False) -> int:
        """Encode and append the pending lines up to the first whose answer is not checked yet
        (``final``: every line, unchecked ones without ``valid``); returns how many.

        Raises OSError on failure; the lines stay pending unless part of them reached the file.
        """
        pending = self._pending
        count = len(pending)
        if not count or self._fd is None:
            return 0
        if final or not self._awaiting:  # (every verdict of these lines is in: none waits)
            batch = [pending.popleft() for _ in range(count)]
        else:
            batch = []
            for _ in range(count):
                verdict = pending[0][5]
                if verdict is not None and not verdict.done:
                    break
                batch.append(pending.popleft())
            count = len(batch)
            if not count:
                return 0
        encoded = self._encoder.encode_lines([self._entry(*args) for args in batch])
        data = memoryview(encoded)
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            if len(data) == len(encoded):  # nothing written: keep the lines for a retry
                pending.extendleft(reversed(batch))
            raise
        self.lines_written += count
        return count

    def close(self) -> None:
        """Flush and close the file (idempotent)."""
        if self._fd is None:
            return
        try:
            self.flush(final=True)
        finally:
            os.close(self._fd)
            self._fd = None


def read_trace(path: str | os.PathLike[str]) -> list[TraceEntry]:
    """Every whole line of a trace.jsonl (a torn last line, if any, is skipped)."""
    decoder = msgspec.json.Decoder(TraceEntry)
    entries = []
    with open(path, "rb") as file:
        for line in file:
            if line.endswith(b"\n"):
                entries.append(decoder.decode(line))
    return entries
