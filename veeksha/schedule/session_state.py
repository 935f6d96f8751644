"""Per-session progress: which nodes are ready, done or cancelled, and each node's conversation.

Pure state machine: the engine feeds it events with timestamps (integer ns) and gets back the
nodes that became ready, with their ready times. No I/O, no clock.

Vocabulary: a node is *pending* until every parent is terminal, then *ready* at
``max(parent completed_at) + wait_after_ready`` (roots: at the session's start), or at its
*not-before* time if that is later (``NodeSpec.not_before_s`` after the session's start: a trace
row's own timestamp, ``turn_timing: timestamps``), *in flight* once
dispatched, and finally *ok*, *failed* or *cancelled*. A node's ``completed_at`` is when its
request ended: an answer's last byte, or the moment a failure was seen (a timeout's give-up),
never an earlier last byte, so children wait from when their parent really ended. With
``cancel_on_failure`` a failed node cancels every node of its session that was not yet
dispatched; otherwise it counts as done for its children, which inherit its user message
without an answer. A dispatched request cancelled by the run's end (``complete(...,
cancelled=True)``) is *cancelled*, like the nodes that were never sent, but was *dispatched*.

Worked example (linear a → b, wait 1 s, cancel on failure)::

    s = SessionState(spec, started_at_ns=0, cancel_on_failure=True)
    s.start()                          -> [(0, 0)]              # a ready at 0
    s.complete(0, 5e8, ok=True, ...)   -> [(1, 1_500_000_000)]  # b ready 1 s after a ended
    s.complete(1, 2e9, ok=False, ...)  -> []; s.done is True; s.status == "error"

With b's ``not_before_s = 3.0`` (its row's timestamp 3 s after a's), a's answer at 0.5 s makes
b ready at 3 s, not 1.5 s; an answer at 2.5 s, at 3.5 s (the answer plus the think time wins).
"""

from __future__ import annotations

from enum import IntEnum

from veeksha.generate.spec import SessionSpec

__all__ = ["Conversation", "Image", "NodeState", "SessionState"]

Conversation = tuple[tuple[str, str], ...]
#: an image of a conversation: (index of its message, width, height, seed)
Image = tuple[int, int, int, int]


class NodeState(IntEnum):
    """Lifecycle of one node."""

    PENDING = 0
    READY = 1
    IN_FLIGHT = 2
    OK = 3
    FAILED = 4
    CANCELLED = 5


# Members as module constants: an enum attribute lookup costs ~0.1 µs in Python 3.11, and the
# hot path does several per request.
_PENDING, _READY, _IN_FLIGHT, _OK, _FAILED, _CANCELLED = NodeState
_TERMINAL = (_OK, _FAILED, _CANCELLED)


class SessionState:
    """Progress of one session through its DAG; yields ready nodes as parents complete."""

    __slots__ = (
        "_answers",
        "_cancelled_log",
        "_completed_at",
        "_conversation",
        "_dispatched_cancelled",
        "_history_tokens",
        "_images",
        "_remaining",
        "_retry",
        "_unfinished_parents",
        "abandoned",
        "attempts",
        "cancel_on_failure",
        "ended_at_ns",
        "phase",
        "ready_at_ns",
        "spec",
        "started_at_ns",
        "states",
    )

    def __init__(
        self,
        spec: SessionSpec,
        started_at_ns: int,
        cancel_on_failure: bool,
        phase: str = "measured",
    ) -> None:
        self.spec = spec
        self.started_at_ns = started_at_ns
        self.cancel_on_failure = cancel_on_failure
        self.phase = phase
        n = len(spec.nodes)
        self.states = [_PENDING] * n
        self._unfinished_parents = [len(node.parents) for node in spec.nodes]
        self._completed_at: list[int] = [0] * n
        self.ready_at_ns: list[int | None] = [None] * n
        self._cancelled_log: list[int] = []
        self._dispatched_cancelled: list[int] = []  # dispatched, then cancelled by the run
        # The conversation a node's children inherit: its messages plus its answer, and the
        # token count of that whole conversation (veeksha's count, used when usage is absent).
        self._conversation: dict[int, Conversation] = {}
        self._history_tokens: dict[int, int] = {}
        # the images of a node's kept conversation: (message index, width, height, seed)
        self._images: dict[int, tuple[Image, ...]] = {}
        self._remaining = n
        self.abandoned = 0  # failed nodes whose user abandoned them (the scenario's abandonment)
        self.ended_at_ns: int | None = None
        # agent_rounds: each answered node's answer and its tokens, for the transcripts
        self._answers: dict[int, tuple[str, int]] | None = (
            {} if n and spec.nodes[0].transcript is not None else None
        )
        # re-prompts: a node's attempts so far (absent: its first); what its next one sends, the
        # tokens of that but the node's own prompt, and its first attempt's whole prompt (what
        # its history children carry: its first prompt and its final answer)
        self.attempts: dict[int, int] | None = None
        self._retry: dict[int, tuple[list[tuple[str, str]], int, int]] = {}

    # ----------------------------------------------------------------------------------- queries

    @property
    def session_id(self) -> int:
        return self.spec.session_id

    @property
    def done(self) -> bool:
        return self._remaining == 0

    @property
    def status(self) -> str:
        """ok | error | abandoned (a failure, each one a request its user abandoned) |
        cancelled | incomplete (some nodes never reached a terminal state)."""
        if not self.done:
            return "incomplete"
        if _FAILED in self.states:
            return "abandoned" if self.abandoned == self.states.count(_FAILED) else "error"
        if _CANCELLED in self.states:
            return "cancelled"
        return "ok"

    def take_cancelled(self) -> list[int]:
        """Nodes cancelled since the last call (so each gets exactly one row)."""
        cancelled, self._cancelled_log = self._cancelled_log, []
        return cancelled

    def count(self, state: NodeState) -> int:
        return self.states.count(state)

    def dispatched(self) -> list[int]:
        """Nodes whose request was handed to a worker: ok, failed, or cancelled in flight (a
        hand-over withdrawn before its release was never dispatched)."""
        done = [i for i, state in enumerate(self.states) if state in (_OK, _FAILED)]
        return done + self._dispatched_cancelled if self._dispatched_cancelled else done

    def messages(self, node_id: int) -> Conversation:
        """The messages to send for a node: its history parent's conversation, then its prompt."""
        node = self.spec.nodes[node_id]
        parent = node.history_parent
        if parent is None:
            inherited: Conversation = () if node.system is None else (("system", node.system),)
        else:
            inherited = self._conversation.get(parent, ())
        return (*inherited, ("user", node.prompt))

    def outgoing(self, node_id: int) -> tuple[list[tuple[str, str]], int]:
        """What a dispatch needs in one call: ``messages`` as a new list, and the tokens of the
        inherited conversation (0 without a history parent)."""
        node = self.spec.nodes[node_id]
        if self.attempts and node_id in self._retry:
            messages, tokens, _ = self._retry[node_id]
            return list(messages), tokens
        if node.transcript is not None:
            return self._transcript(node_id)
        parent = node.history_parent
        if parent is None:
            if node.system is not None:
                return [("system", node.system), ("user", node.prompt)], 0
            return [("user", node.prompt)], 0
        return (
            [*self._conversation.get(parent, ()), ("user", node.prompt)],
            self._history_tokens.get(parent, 0),
        )

    def outgoing_images(self, node_id: int, messages: list[tuple[str, str]]) -> list[Image]:
        """The images of what ``outgoing`` gave (its ``messages``), each as (message index,
        width, height, seed): those of the history it inherits, then the node's own in its user
        message (before a re-prompt's answers and notes)."""
        retries = self.attempts.get(node_id, 0) if self.attempts else 0
        return list(self._images_of(node_id, len(messages) - 1 - 2 * retries))

    def _images_of(self, node_id: int, at: int) -> tuple[Image, ...]:
        """The images of the node's conversation: its history parent's, then its own, in its
        user message at index ``at`` (a tool's result carries none)."""
        node = self.spec.nodes[node_id]
        parent = node.history_parent
        inherited = self._images.get(parent, ()) if parent is not None else ()
        if node.transcript is not None:
            inherited = ()
        if not node.images or node.kind == "tool":
            return inherited
        return (*inherited, *((at, *image) for image in node.images))

    def _transcript(self, node_id: int) -> tuple[list[tuple[str, str]], int]:
        """An agent's messages: the answers of its transcript, its own as ``assistant`` and the
        others' as ``user`` with the speaker's name, then its prompt (a failed turn, or one
        with no answer, is left out); and veeksha's token count of what precedes the prompt
        (each other speaker's name counted as one token)."""
        nodes = self.spec.nodes
        node = nodes[node_id]
        me = node.agent
        answers = self._answers or {}
        messages: list[tuple[str, str]] = []
        tokens = 0
        for earlier in node.transcript or ():
            answer = answers.get(earlier)
            if answer is None or not answer[0]:
                continue
            text, count = answer
            speaker = nodes[earlier].agent
            if speaker == me:
                messages.append(("assistant", text))
                tokens += count
            else:
                messages.append(("user", f"{speaker}: {text}"))
                tokens += count + 1
        messages.append(("user", node.prompt))
        return messages, tokens

    # ------------------------------------------------------------------------------------ events

    def start(self) -> list[tuple[int, int]]:
        """The session starts: its roots become ready at its start time (or at their
        not-before time, if later)."""
        ready = []
        nodes = self.spec.nodes
        for node_id in self.spec.roots:
            at = self.started_at_ns
            if nodes[node_id].not_before_s is not None:
                at = max(at, self.not_before_ns(node_id))
            self.states[node_id] = _READY
            self.ready_at_ns[node_id] = at
            ready.append((node_id, at))
        return ready

    def not_before_ns(self, node_id: int) -> int:
        """The instant node ``node_id`` may not be ready before (its ``not_before_s`` after the
        session's start; the session's start when it has none)."""
        seconds = self.spec.nodes[node_id].not_before_s
        if seconds is None:
            return self.started_at_ns
        return self.started_at_ns + round(seconds * 1_000_000_000)

    def reprompt(
        self,
        node_id: int,
        answer: str,
        note: str,
        answer_tokens: int,
        at_ns: int,
        conversation_tokens: int,
    ) -> int:
        """Node ``node_id`` (in flight) answered ``answer``, which failed its validation: it is
        ready again at ``at_ns`` to send what it sent, the answer (``assistant``) and the
        ``note`` (``user``). Returns its ready time.

        ``conversation_tokens``: the whole prompt of the attempt that failed (history included),
        kept from the first attempt for the node's history children. The next attempt's tokens
        besides the node's own prompt (what ``outgoing`` gives) are the failed attempt's, its
        answer and the note (counted one token a word)."""
        messages, tokens = self.outgoing(node_id)
        messages += [("assistant", answer), ("user", note)]
        retry = self._retry.get(node_id)
        first = conversation_tokens if retry is None else retry[2]
        self._retry[node_id] = (messages, tokens + answer_tokens + len(note.split()), first)
        if self.attempts is None:
            self.attempts = {}
        self.attempts[node_id] = self.attempts.get(node_id, 0) + 1
        self.states[node_id] = _READY
        self.ready_at_ns[node_id] = at_ns
        return at_ns

    def mark_dispatched(self, node_id: int) -> None:
        self.states[node_id] = _IN_FLIGHT

    def complete(
        self,
        node_id: int,
        completed_at_ns: int,
        ok: bool,
        *,
        cancelled: bool = False,
        abandoned: bool = False,
        answer: str = "",
        conversation_tokens: int = 0,
        answer_tokens: int = 0,
    ) -> list[tuple[int, int]]:
        """A dispatched node finished; returns children that became ready, with ready times.

        ``completed_at_ns`` is when its request ended (for a failure, when it was seen).
        ``cancelled``: not ok because the run cancelled it in flight (it has its row already,
        so it is not reported by ``take_cancelled``); its children are treated as after a
        failure. ``abandoned``: not ok because its user abandoned it (a failure, counted in
        ``abandoned``). ``conversation_tokens`` is the node's whole prompt (history included) and
        ``answer_tokens`` its answer, so history children can account their inherited tokens.
        """
        if cancelled:
            ok = False
            self._finish(node_id, _CANCELLED, completed_at_ns)
            self._cancelled_log.pop()  # (it has its row: not reported by take_cancelled)
            self._dispatched_cancelled.append(node_id)
        else:
            self._finish(node_id, _OK if ok else _FAILED, completed_at_ns)
            if abandoned:
                self.abandoned += 1
        nodes = self.spec.nodes
        if self._answers is not None and ok:
            self._answers[node_id] = (answer, answer_tokens)
        for child in self.spec.children[node_id]:
            if nodes[child].history_parent == node_id:
                self._keep_conversation(node_id, ok, answer, conversation_tokens, answer_tokens)
                break
        if not ok and self.cancel_on_failure:
            self.cancel_pending(completed_at_ns)
            return []
        return self._release_children(node_id)

    def _keep_conversation(
        self, node_id: int, ok: bool, answer: str, conversation_tokens: int, answer_tokens: int
    ) -> None:
        """Store what a history child of ``node_id`` inherits."""
        conversation = sent = self.messages(node_id)
        retry = self._retry.get(node_id)
        if retry is not None:  # re-prompted: its children carry its first prompt, not the last
            conversation_tokens = retry[2]
        node = self.spec.nodes[node_id]
        if node.kind == "tool":  # its result, as the user's message
            conversation = (*conversation[:-1], ("user", answer))
        elif ok and node.max_tokens:  # (one that asked for no output, an embedding: none)
            conversation = (*conversation, ("assistant", answer))
        self._conversation[node_id] = conversation
        self._history_tokens[node_id] = conversation_tokens + (answer_tokens if ok else 0)
        if self.spec.images and (images := self._images_of(node_id, len(sent) - 1)):
            self._images[node_id] = images

    def cancel_pending(self, at_ns: int) -> list[int]:
        """Cancel every node not yet dispatched (pending or ready); returns their ids."""
        cancelled = []
        for node_id, state in enumerate(self.states):
            if state in (_PENDING, _READY):
                self._finish(node_id, _CANCELLED, at_ns)
                cancelled.append(node_id)
        return cancelled

    def cancel_node(self, node_id: int, at_ns: int) -> None:
        """Cancel one node (e.g. in flight when the run stopped)."""
        if self.states[node_id] not in _TERMINAL:
            self._finish(node_id, _CANCELLED, at_ns)

    # ---------------------------------------------------------------------------------- internals

    def _finish(self, node_id: int, state: NodeState, at_ns: int) -> None:
        if self.states[node_id] in _TERMINAL:
            raise ValueError(f"node {node_id} of session {self.session_id} already finished")
        self.states[node_id] = state
        self._completed_at[node_id] = at_ns
        if state == _CANCELLED:
            self._cancelled_log.append(node_id)
        self._remaining -= 1
        if self._remaining == 0:
            # the latest end, not this one: results may come in another order than their ends
            # (a loop, as max() of a short list costs ~1.5k instructions here)
            latest = at_ns
            for t in self._completed_at:
                if t > latest:  # noqa: PLR1730 - hot path: max() costs a call
                    latest = t
            self.ended_at_ns = latest
            self._conversation.clear()
            self._images.clear()
            if self._answers is not None:
                self._answers.clear()

    def _release_children(self, node_id: int) -> list[tuple[int, int]]:
        ready = []
        nodes = self.spec.nodes
        for child in self.spec.children[node_id]:
            self._unfinished_parents[child] -= 1
            if self._unfinished_parents[child] == 0 and self.states[child] == _PENDING:
                parents = nodes[child].parents
                completed = self._completed_at
                latest = (
                    completed[parents[0]]
                    if len(parents) == 1
                    else max([completed[p] for p in parents])
                )
                node = nodes[child]
                at = latest + round(node.wait_after_ready_s * 1_000_000_000)
                if node.not_before_s is not None:  # (turn_timing: timestamps; else one test)
                    at = max(at, self.started_at_ns + round(node.not_before_s * 1_000_000_000))
                self.states[child] = _READY
                self.ready_at_ns[child] = at
                ready.append((child, at))
        return ready
