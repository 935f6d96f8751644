"""The ``untimed_content_multi_turn`` flavor: real conversations (ShareGPT shape), real text.

One row per conversation (JSON lines, or a JSON array of rows): ``conversations`` (the
``conversation_column``) is a list of messages ``{"from": ..., "value": ...}`` (``role_key``,
``content_key``). Each user turn (``user_role_value``) answered by an assistant turn
(``assistant_role_value``) is one request of a linear chat: its prompt is the user's text, its
history the conversation so far *with the live responses*, its output length the token count of
the dataset's reply. How the other messages are handled:

* system messages (``system_role_value``), wherever they are, are joined (blank line) into one
  system message sent before the first user turn; their tokens count in its prompt;
* leading assistant turns (before any user turn) are dropped: a request starts with the user;
* consecutive user turns are joined (blank line) into one prompt, consecutive assistant turns
  into one reply;
* a trailing user turn without a reply is not sent (no reply to size its answer);
* messages of other roles are ignored; a conversation left without a user turn and its reply is
  not replayed. The dropped turns and conversations are counted in run.log's warnings, with the
  lines of their conversations.

Token counts in the cache are words (the builtin tokenizer); with ``hf`` or ``server`` tokenizers
each prompt and reply is recounted when its session is made (``content.py``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from veeksha.generate.traces.content import word_counts
from veeksha.generate.traces.flavor import TraceFlavor
from veeksha.generate.traces.reader import LINE, Field

__all__ = ["ConversationFlavor"]

_decode = msgspec.json.Decoder(list[dict[str, Any]]).decode


class ConversationFlavor(TraceFlavor):
    """ShareGPT-shaped conversations (see module doc)."""

    name = "untimed_content_multi_turn"
    fields: ClassVar = (Field("conversations", object, required=True),)

    def __init__(self, path: Any, settings: Any = None) -> None:
        super().__init__(path, settings)
        column = getattr(settings, "conversation_column", "conversations")
        self.fields = (Field(column, object, required=True),)  # type: ignore[misc]
        self.column = column
        self.role_key = getattr(settings, "role_key", "from")
        self.content_key = getattr(settings, "content_key", "value")
        self.user = getattr(settings, "user_role_value", "human")
        self.assistant = getattr(settings, "assistant_role_value", "gpt")
        self.system = getattr(settings, "system_role_value", "system")
        self.dropped_turns = 0
        self._conversations = 0  # the session key (two rows may start on one line)
        self.dropped_conversations = 0

    def stage(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        lines: list[int] = []
        groups: list[str] = []
        texts: list[str] = []
        systems: list[str | None] = []
        replies: list[str] = []
        for raw, line in zip(
            batch.column(self.column).to_pylist(), batch.column(LINE).to_pylist(), strict=True
        ):
            dropped_before = self.dropped_turns
            turns, system = self._turns(raw, line)
            if self.dropped_turns > dropped_before:
                self.note_lines("unanswered_turns", [line])
            if not turns:
                self.dropped_conversations += 1
                self.note_lines("conversations_without_reply", [line])
                continue
            self._conversations += 1
            for k, (text, reply) in enumerate(turns):
                lines.append(line)
                groups.append(str(self._conversations))
                texts.append(text)
                systems.append(system if k == 0 else None)
                replies.append(reply)
        self._note()
        text = pa.array(texts, pa.string())
        system = pa.array(systems, pa.string())
        reply = pa.array(replies, pa.string())
        prompt = pc.add(word_counts(text), word_counts(system))
        n = len(lines)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(lines, pa.int64()),
                pa.array(groups, pa.string()),
                pa.nulls(n, pa.float64()),
                prompt,
                word_counts(reply),
                text,
                system,
                reply,
            ],
            names=[
                "line",
                "group",
                "ts",
                "prompt_tokens",
                "output_tokens",
                "text",
                "system",
                "reply",
            ],
        )

    def _turns(self, raw: str, line: int) -> tuple[list[tuple[str, str]], str | None]:
        """(user text, reply) pairs and the system message of one conversation."""
        try:
            messages = _decode(raw)
        except msgspec.DecodeError:
            raise self.error(
                line,
                f"{self.column} is not a list of messages; give a list of objects with"
                f" {self.role_key!r} and {self.content_key!r}",
            ) from None
        system: list[str] = []
        runs: list[tuple[str, list[str]]] = []  # (role, texts) of consecutive same-role turns
        for i, message in enumerate(messages):
            role = message.get(self.role_key)
            content = message.get(self.content_key)
            if not isinstance(content, str):
                raise self.error(
                    line,
                    f"message {i} of {self.column} has no text {self.content_key!r}; give each"
                    " message its text (or set content_key)",
                )
            if role == self.system:
                system.append(content)
            elif role in (self.user, self.assistant):
                if runs and runs[-1][0] == role:
                    runs[-1][1].append(content)
                else:
                    runs.append((role, [content]))
        while runs and runs[0][0] == self.assistant:
            self.dropped_turns += len(runs.pop(0)[1])
        turns = []
        for k in range(0, len(runs) - 1, 2):
            turns.append(("\n\n".join(runs[k][1]), "\n\n".join(runs[k + 1][1])))
        if len(runs) % 2:
            self.dropped_turns += len(runs[-1][1])
        return turns, ("\n\n".join(system) if system else None)

    def _note(self) -> None:
        self.dropped = {
            reason: n
            for reason, n in (
                ("unanswered_turns", self.dropped_turns),
                ("conversations_without_reply", self.dropped_conversations),
            )
            if n
        }
