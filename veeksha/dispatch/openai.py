"""OpenAI wire format: request bodies, an incremental SSE parser, and response interpretation.

Nothing here does I/O: the worker feeds raw bytes in and reads plain values out, so every edge
case (events split across reads, CRLF, comments, ``[DONE]``) is unit-testable without a socket.

Request bodies (``RequestBuilder``)
    chat (``/v1/chat/completions``): ``messages`` as OpenAI chat messages, roles as given
    (``user``/``assistant``). completions (``/v1/completions``): the conversation flattened into
    one ``prompt`` by joining the message contents with ``"\\n"`` (roles are dropped: a
    completions model sees plain text). Then the requested length under ``max_tokens_param`` (and
    ``min_tokens_param`` when set), ``ignore_eos: true`` when enabled (omitted otherwise, since
    strict servers reject unknown keys), ``stream``, ``stream_options.include_usage`` when
    streaming, and the additional sampling parameters. With the prompt fallback,
    ``" Generate at least N tokens."`` is appended to the last user message (N = max_tokens).
    The constant part of the body is encoded once; per request only the prompt and the token
    counts are encoded and spliced in front of it.

Responses (``ResponseAccumulator``)
    Each SSE ``data:`` payload is one JSON chunk: content from ``choices[0].delta.content``
    (chat) or ``choices[0].text`` (completions), ``usage`` (prompt, completion and cached prompt
    tokens), and the non-standard ``timings`` object of our simulator. Every event of one read
    shares that read's timestamp; a chunk counts (``chunk_times_ns``, ``first_chunk_at_ns``)
    only when its content is non-empty. A stream is fed read by read (``feed``): after its
    first content chunk, the plain content chunks are taken by their proven byte shape
    (``veeksha.dispatch.chunkshape``) instead of a JSON decode each, with the same result. An
    ``error`` object inside a stream (as vLLM sends) is raised as a ``ResponseError`` of kind
    ``http_4xx`` or ``http_5xx`` from its ``code``. The usage counts are untrusted input: a
    count that is not an integer in [0, 2^31) is None and noted (``rejected``, see
    ``veeksha.dispatch.numbers``); a chunk whose decode fails on its usage, timings or error (a
    number beyond a double or of thousands of digits, a usage that is not an object) is decoded
    again with those raw (``_lenient``), so such a number costs its field, not the response.
    The stream ends at ``[DONE]``: nothing after it is read (``StreamOver`` says that something
    came). A UTF-8 byte order mark before the first event is dropped (the SSE specification's
    rule). Bytes that are not JSON, or not UTF-8, are the server's fault:
    ``ResponseError("malformed_response")`` with a readable message and the first bytes of the
    event.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any

import msgspec

from veeksha.dispatch.chunkshape import ChunkShape, ShapeMemory, decode_str
from veeksha.dispatch.numbers import (
    MAX_COUNT,
    Rejections,
    raw_text,
    raw_value,
    sendable_timings,
)
from veeksha.generate.images import data_url
from veeksha.redact import READ_WINDOW

__all__ = [
    "MAX_EVENT_BYTES",
    "PROMPT_FALLBACK",
    "RequestBuilder",
    "ResponseAccumulator",
    "ResponseError",
    "SSEParser",
    "StreamOver",
    "with_fallback",
]

PROMPT_FALLBACK = " Generate at least {n} tokens."
MAX_EVENT_BYTES = 16 * 1024 * 1024
"""The longest SSE line or event data a response may send; longer fails the request."""
_DONE = b"[DONE]"
_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark


class ResponseError(Exception):
    """The response cannot be used; ``kind`` is one of ``messages.ERROR_KINDS``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class StreamOver(Exception):
    """Bytes came after the stream's ``[DONE]``: the answer is complete and they are ignored,
    but the connection is in an unknown state (raised by ``ResponseAccumulator.feed``; the
    caller ends the request as answered at ``done_at_ns`` and closes the connection)."""


# ------------------------------------------------------------------------------------ requests


class RequestBuilder:
    """Encodes request bodies for one endpoint; build once per worker, call ``body`` per request."""

    __slots__ = ("_chat", "_embeddings", "_fallback", "_max_key", "_min_key", "_tail")

    def __init__(
        self,
        *,
        chat: bool,
        model: str | None,
        stream: bool,
        max_tokens_param: str,
        min_tokens_param: str | None = None,
        ignore_eos: bool = True,
        prompt_fallback: bool = False,
        extra_params: dict[str, Any] | None = None,
        embeddings: bool = False,
    ) -> None:
        self._chat = chat
        self._embeddings = embeddings  # (the prompt is the input; nothing to generate)
        self._fallback = prompt_fallback and not embeddings
        encode = msgspec.json.encode
        self._max_key = b"," + encode(max_tokens_param) + b":"
        self._min_key = b"," + encode(min_tokens_param) + b":" if min_tokens_param else None
        static: dict[str, Any] = {}
        if model is not None:
            static["model"] = model
        if ignore_eos and not embeddings:
            static["ignore_eos"] = True
        if not embeddings:
            static["stream"] = stream
        if stream and not embeddings:
            static["stream_options"] = {"include_usage": True}
        for key, value in (extra_params or {}).items():
            if key == "stream_options" and isinstance(value, dict) and stream:
                static[key] = {**static[key], **value}
            else:
                static[key] = value
        # '{"model":...}' → ',"model":...}' : the part after the per-request keys.
        self._tail = b"," + encode(static)[1:] if static else b"}"

    def body(
        self,
        messages: list[tuple[str, str]],
        max_tokens: int,
        images: list[tuple[int, int, int, int]] | None = None,
    ) -> bytes:
        """The JSON body for one request: the conversation and its requested output length;
        ``images`` (message index, width, height, seed) go in their messages as ``image_url``
        parts before the text (chat only: a completions client never gets images). An
        embeddings request's ``input`` is the conversation flattened, as a completions prompt."""
        if self._embeddings:  # (its prompt as a completions client sends it; no output)
            prompt = messages[0][1] if len(messages) == 1 else "\n".join([c for _, c in messages])
            return b'{"input":' + msgspec.json.encode(prompt) + self._tail
        if self._fallback:
            messages = with_fallback(messages, max_tokens)
        if self._chat:
            if images:
                head = b'{"messages":' + msgspec.json.encode(_with_images(messages, images))
            else:
                head = b'{"messages":' + msgspec.json.encode(
                    [{"role": role, "content": content} for role, content in messages]
                )
        else:
            # (one message, the usual prompt: its text as is, without a join)
            prompt = messages[0][1] if len(messages) == 1 else "\n".join([c for _, c in messages])
            head = b'{"prompt":' + msgspec.json.encode(prompt)
        n = str(max_tokens).encode()
        if self._min_key is None:
            return b"".join((head, self._max_key, n, self._tail))
        return b"".join((head, self._max_key, n, self._min_key, n, self._tail))


def _with_images(
    messages: list[tuple[str, str]], images: list[tuple[int, int, int, int]]
) -> list[dict[str, Any]]:
    """Chat messages whose messages with images have a content of parts: each image as a
    ``data:`` URL (``veeksha.generate.images``), then the text."""
    parts: dict[int, list[dict[str, Any]]] = {}
    for at, width, height, seed in images:
        url = data_url(width, height, seed)
        parts.setdefault(at, []).append({"type": "image_url", "image_url": {"url": url}})
    out: list[dict[str, Any]] = []
    for i, (role, content) in enumerate(messages):
        own = parts.get(i)
        if own is None:
            out.append({"role": role, "content": content})
        else:
            out.append({"role": role, "content": [*own, {"type": "text", "text": content}]})
    return out


def with_fallback(messages: list[tuple[str, str]], max_tokens: int) -> list[tuple[str, str]]:
    """``messages`` with :data:`PROMPT_FALLBACK` appended to the last user message (a new
    list; ``messages`` as is when none is a user's): what the prompt fallback sends."""
    for i in range(len(messages) - 1, -1, -1):
        role, content = messages[i]
        if role == "user":
            out = list(messages)
            out[i] = (role, content + PROMPT_FALLBACK.format(n=max_tokens))
            return out
    return messages


# ------------------------------------------------------------------------------------ SSE parser


class SSEParser:
    """Incremental Server-Sent Events parser: raw bytes in, ``data`` payloads out.

    Handles events split anywhere across reads, several events per read, LF, CRLF and lone CR
    line ends, comments (``:...``) and multi-line data (joined with ``\\n``). Fields other than
    ``data`` (``event``, ``id``, ``retry``) are ignored. ``[DONE]`` is returned like any payload.

    Example::

        p = SSEParser()
        p.feed(b'data: {"a"')          # → []
        p.feed(b': 1}\\n\\ndata: [DO')  # → [b'{"a": 1}']
        p.feed(b'NE]\\n\\n')             # → [b'[DONE]']

    Work is linear in the bytes fed: a line not ended yet is kept as the list of its pieces,
    each read's bytes are searched once for a line end, and the pieces are joined once, when the
    line ends. A line, or an event's data, longer than ``max_line`` bytes (``MAX_EVENT_BYTES``,
    16 MiB) raises ``ResponseError("malformed_response")`` instead of growing without bound.
    (A read of whole ``data: X`` events takes the fast path unchecked: it cannot be longer than
    the read, at most 256,000 bytes on uvloop.)
    """

    __slots__ = ("_data", "_data_size", "_max", "_pending", "_pending_size")

    def __init__(self, max_line: int = 0) -> None:
        self._pending: list[bytes] = []  # the unended line's pieces (only the last may end in CR)
        self._pending_size = 0
        self._data: list[bytes] | None = None  # the data lines of the event so far
        self._data_size = 0  # their bytes, counted from the second line on
        self._max = max_line or MAX_EVENT_BYTES

    def feed(self, chunk: bytes) -> list[bytes]:
        """Consume one read; return the payloads of the events it completed, in order."""
        pending = self._pending
        if not pending:
            if self._data is None and chunk[:6] == b"data: " and chunk[-2:] == b"\n\n":
                # The shape every OpenAI server sends: whole ``data: X\n\n`` events, LF only.
                # When the read's only line ends are the events' own, its payloads are the
                # pieces between the ``\n\ndata: `` separators: one split and two memchr scans
                # instead of a loop over lines (same payloads as the general path below).
                payloads = chunk[6:-2].split(b"\n\ndata: ")
                joined = payloads[0] if len(payloads) == 1 else b"".join(payloads)
                if joined.find(b"\n") < 0 and joined.find(b"\r") < 0:  # (`in` costs more)
                    return payloads
        elif chunk.find(b"\n") < 0 and chunk.find(b"\r") < 0 and pending[-1][-1:] != b"\r":
            # The unended line goes on: keep the piece (joined once, when the line ends).
            self._pending_size += len(chunk)
            if self._pending_size > self._max:
                raise self._too_long("line")
            pending.append(chunk)
            return []
        else:
            pending.append(chunk)
            chunk = b"".join(pending)
            self._pending = []
        tail = b""
        if chunk.find(b"\r") >= 0:
            if chunk[-1] == 13:  # a CR at the end may be the first half of a CRLF
                chunk, tail = chunk[:-1], b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = chunk.split(b"\n")
        last = lines.pop() + tail
        if last:
            self._pending = [last]
            self._pending_size = len(last)
        if len(chunk) > self._max and max(len(last), max(map(len, lines), default=0)) > self._max:
            raise self._too_long("line")
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data is not None:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = None
                continue
            if line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
            elif line == b"data":
                value = b""
            else:
                continue  # comments (':...') and other fields are ignored
            if data is None:
                data = [value]
            else:  # a multi-line data field: its size is bounded too
                size = (self._data_size if len(data) > 1 else len(data[0])) + 1 + len(value)
                if size > self._max:
                    self._data = None
                    raise self._too_long("event")
                self._data_size = size
                data.append(value)
        self._data = data
        return events

    def _too_long(self, what: str) -> ResponseError:
        self._pending = []
        return ResponseError(
            "malformed_response",
            f"an SSE {what} longer than {self._max:,} bytes (the limit of one event)",
        )

    def idle(self) -> bool:
        """Whether the next byte starts a new line of a new event (nothing is pending)."""
        return not self._pending and self._data is None

    def close(self) -> list[bytes]:
        """End of stream: return a last event left without its blank line (lenient)."""
        events = self.feed(b"\n\n") if (self._pending or self._data is not None) else []
        self._pending = []
        self._data = None
        return events


# ------------------------------------------------------------------------ response interpretation


# gc=False: decoded JSON cannot form reference cycles, and untracked structs are cheaper to make.
class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    # a reasoning model's thinking, streamed before its answer: vLLM's and SGLang's reasoning
    # parsers, DeepSeek's API and llama.cpp say ``reasoning_content``, newer vLLM ``reasoning``
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    message: _Delta | None = None
    text: str | None = None


class _TextChoice(msgspec.Struct, gc=False):
    text: str | None = None


# Usage counts are decoded as any JSON value and bounded by ``Rejections.count`` (untrusted input).
class _PromptDetails(msgspec.Struct, gc=False):
    cached_tokens: Any = None


class _CompletionDetails(msgspec.Struct, gc=False):
    reasoning_tokens: Any = None


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: Any = None
    completion_tokens: Any = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    timings: dict[str, Any] | None = None
    error: Any = None


class _TextChunk(msgspec.Struct, gc=False):
    """A completions chunk: only ``text`` is read from a choice (fewer fields to fill)."""

    choices: list[_TextChoice] | None = None
    usage: _Usage | None = None
    timings: dict[str, Any] | None = None
    error: Any = None


class _LenientChunk(msgspec.Struct, gc=False):
    """A chunk whose usage, timings and error are kept raw: the second decode of a chunk whose
    first failed on one of them (``_lenient``)."""

    choices: list[_Choice] | None = None
    usage: msgspec.Raw = msgspec.Raw()  # (empty: absent; msgspec takes no ``Raw | None``)
    timings: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


class _Embedding(msgspec.Struct, gc=False):
    embedding: Any = None


class _Embeddings(msgspec.Struct, gc=False):
    """An /v1/embeddings answer: its vectors and usage (the rest, such as ``object``, is not
    read)."""

    data: list[_Embedding] | None = None
    usage: _Usage | None = None
    error: Any = None


def _a_vector(value: Any) -> bool:
    """A vector as a server writes one: a non-empty list of numbers, or base64 text."""
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(type(x) in (int, float) for x in value)


_decode_embeddings = msgspec.json.Decoder(_Embeddings).decode
_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_text_chunk = msgspec.json.Decoder(_TextChunk).decode
_decode_lenient = msgspec.json.Decoder(_LenientChunk).decode
_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_JOIN_EVERY = 64
# A reasoning model's thinking inline in its content (``<think>…</think>``, a server without a
# reasoning parser): where a stream is (``ResponseAccumulator._inline``).
_UNSEEN, _THINKING, _THOUGHT, _PLAIN = range(4)
_THINK, _THOUGHT_END = "<think>", "</think>"
_LEARN_TRIES = 3
_PEEL_EVENTS = 4
_pack_q = struct.Struct("=q").pack  # an array('q') item's bytes
_decode_str = decode_str


class ResponseAccumulator:
    """What one response said so far: text parts, chunk times, usage, server timings.

    A streamed body is fed read by read (``feed``, then ``end``): its SSE events go through an
    ``SSEParser`` and ``on_events``, except the runs of plain content chunks of the stream's
    learned ``ChunkShape``, whose texts are taken without decoding each event (see
    ``veeksha.dispatch.chunkshape``; the result is the same, the tests compare both paths).
    The shape is learned from the first content chunk (at most ``_LEARN_TRIES`` attempts a
    response) and proven by a full decode of the same chunk with another text; with a
    ``ShapeMemory`` shared by a client's streams, a shape proven on an earlier stream is
    recalled for this one's own head without a decode, and a shape learned here is remembered.

    Memory per held stream is kept small, since thousands may be in flight: ``chunk_times_ns``
    is an ``array('q')`` (8 bytes a chunk instead of a list slot and an int object, ~40), and
    ``parts`` is joined into one string every ``_JOIN_EVERY`` parts (an ASCII token then costs
    its characters, not a ~55-byte str object and a list slot). ``chunk_count`` is the number
    of non-empty chunks; ``chunk_times()`` gives the times as a list.

    A reasoning model's chunks of thinking (``delta.reasoning_content`` or ``delta.reasoning``,
    chat only) are generated tokens like the answer's: they are chunks, stamped and counted
    (``first_chunk_at_ns`` is the first token of either), and ``reasoning_chunks`` counts them;
    their text is not the answer's (``parts`` holds the answer only, as the next turn of a
    conversation sends it back). ``first_answer_at_ns`` is the first answer chunk's read, set
    once a response has thought (None when it did not, or never answered). A server without a
    reasoning parser streams the thinking inline, in the content, between ``<think>`` and
    ``</think>`` (the first content chunk opens it): those chunks are chunks of thinking too,
    and the answer's text is what follows the block. A stream in such a block is read event by
    event (no chunk shape is learned or recalled in it); any other pays one test a decoded
    content chunk. With ``thinking_opened`` (``client.thinking_opened``: the chat template
    opened the block in the prompt, and the stream holds only ``</think>``), every stream
    starts inside the block.
    """

    __slots__ = (
        "_bom",
        "_inline",
        "_memory",
        "_opened",
        "_parser",
        "_shape",
        "_tries",
        "cached_tokens",
        "chat",
        "chunk_times_ns",
        "completion_tokens",
        "done",
        "done_at_ns",
        "embeddings",
        "first_answer_at_ns",
        "first_chunk_at_ns",
        "parts",
        "prompt_tokens",
        "reasoning_chunks",
        "reasoning_tokens",
        "rejected",
        "server_timings",
    )

    def __init__(
        self,
        chat: bool,
        memory: ShapeMemory | None = None,
        thinking_opened: bool = False,
        embeddings: bool = False,
    ) -> None:
        self.chat = chat
        self.embeddings = embeddings  # (an /v1/embeddings answer: ``on_body`` reads its vectors)
        self._opened = thinking_opened  # (the template opened <think>: the content starts in it)
        self._memory = memory
        self.parts: list[str] = []
        self.chunk_times_ns = array("q")
        self.first_chunk_at_ns: int | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.reasoning_tokens: int | None = None  # usage.completion_tokens_details'
        self.reasoning_chunks = 0
        self.first_answer_at_ns: int | None = None
        self.server_timings: dict[str, Any] | None = None
        self.rejected: Rejections | None = None  # the server's numbers not taken, and why
        self.done = False  # [DONE] seen (or the whole body of a non-streamed answer)
        self.done_at_ns = 0  # the time of the read that carried it
        self._parser = SSEParser()
        self._shape: ChunkShape | None = None
        self._tries = _LEARN_TRIES
        self._bom = 0  # bytes of a byte order mark taken at the stream's start; -1: past it
        # thinking inline in the content: _THINKING, _THOUGHT, _PLAIN
        self._inline = _THINKING if thinking_opened else _UNSEEN

    @property
    def output_text(self) -> str:
        return "".join(self.parts)

    @property
    def chunk_count(self) -> int:
        return len(self.chunk_times_ns)

    def chunk_times(self) -> list[int]:
        return self.chunk_times_ns.tolist()

    @property
    def rejected_numbers(self) -> str:
        """The notes of the server's numbers not taken (``field=raw (why); ...``), or ''."""
        return "" if self.rejected is None else self.rejected.text()

    def feed(self, data: bytes, t_ns: int) -> None:
        """Interpret one read of a streamed body, all its events stamped ``t_ns``."""
        parser = self._parser
        shape = self._shape
        if shape is None:
            if self._bom >= 0:  # the stream's first bytes
                if data[0] != 0xEF and not self._bom:
                    self._bom = -1  # (the usual start: no byte order mark)
                else:
                    data = self._skip_bom(data)
                    if not data:
                        return
            if self._tries and parser.idle() and data[:6] == b"data: ":
                data = self._peel(data, t_ns)
                shape = self._shape
            if shape is None or not data:
                if data:
                    self._general(data, t_ns)
                return
        if data.startswith(shape.head) and not parser._pending and parser._data is None:  # idle
            if data.endswith(shape.tail) and len(data) >= shape.min_len:
                # The usual read of a token stream: one content chunk. The slice is its text
                # with the quotes around it; it is that chunk's when it is one JSON string.
                try:
                    text = _decode_str(data[shape.head_len - 1 : 1 - shape.tail_len])
                except (msgspec.MsgspecError, UnicodeDecodeError):
                    pass  # (several chunks, or not a string)
                else:
                    if text:  # (_add, inline)
                        parts = self.parts
                        parts.append(text)
                        self.chunk_times_ns.append(t_ns)
                        if self.first_chunk_at_ns is None:
                            self.first_chunk_at_ns = t_ns
                        if len(parts) >= _JOIN_EVERY:
                            parts[:] = ["".join(parts)]
                    return
            found = shape.split(data)
            if found is not None:
                text, n, data = found
                if n:
                    self._add(text, n, t_ns)
                if not data:
                    return
        self._general(data, t_ns)

    def end(self, t_ns: int) -> None:
        """The streamed body ended (its last read at ``t_ns``): an unterminated event counts."""
        if self.done:
            return
        events = self._parser.close()
        if events:
            self.on_events(events, t_ns)

    def _general(self, data: bytes, t_ns: int) -> None:
        if self.done:  # (after [DONE] every read comes here: the shape is dropped then)
            raise StreamOver
        events = self._parser.feed(data)
        if events:
            self.on_events(events, t_ns)

    def _skip_bom(self, data: bytes) -> bytes:
        """``data`` without the part of a UTF-8 byte order mark that starts the stream (the SSE
        specification drops it), also when the mark comes split across reads."""
        taken = self._bom
        rest = _BOM[taken:]
        if data[: len(rest)] == rest:
            self._bom = -1
            return data[len(rest) :]
        if rest.startswith(data):  # still a part of the mark: wait for the next read
            self._bom = taken + len(data)
            return b""
        self._bom = -1  # no mark: the bytes taken for one are the stream's own
        return _BOM[:taken] + data if taken else data

    def _peel(self, data: bytes, t_ns: int) -> bytes:
        """Interpret the first events of ``data`` one by one while they are single ``data:``
        lines, until a shape is recalled or learned (at most ``_PEEL_EVENTS``); return the
        rest."""
        memory = self._memory
        for _ in range(_PEEL_EVENTS):
            if memory is not None:
                shape = memory.recall(data)
                if shape is not None and (inline := self._inline) != _PLAIN:
                    # Not while the stream may think inline: in a block of thinking, or at its
                    # first content chunk when that one is empty or may open one (then it is
                    # decoded, and the next event may recall the shape).
                    at = shape.head_len
                    if (
                        inline != _UNSEEN
                        or data[at : at + 1] == b'"'
                        or data.find(b"think", at, at + 24) >= 0
                    ):
                        shape = None
                    else:
                        self._inline = _PLAIN
                if shape is not None:  # (the events from here on go to its split)
                    self._shape = shape
                    if self.reasoning_chunks and self.first_answer_at_ns is None:
                        self.first_answer_at_ns = t_ns  # (its first event: an answer chunk)
                    break
            end = data.find(b"\n")  # an event that is one line ``data: X``: its payload is X
            payload = data[6:end]
            if end < 0 or data[end + 1 : end + 2] != b"\n" or data[:6] != b"data: ":
                break
            if payload.find(b"\r") >= 0:
                break
            self.on_events([payload], t_ns)
            data = data[end + 2 :]
            if self._shape is not None or not self._tries:
                break
        return data

    def _answer_after_thinking(self, text: str) -> str | None:
        """The answer's part of content chunk ``text`` of a stream that may think inline; None
        when the chunk is thinking (or the break between the thinking and the answer)."""
        state = self._inline
        if state == _UNSEEN:
            opened = text.lstrip()
            if not opened.startswith(_THINK):
                self._inline = _PLAIN
                return text
            state = self._inline = _THINKING
            text = opened[len(_THINK) :]
        if state == _THINKING:
            end = text.find(_THOUGHT_END)
            if end < 0:
                return None
            self._inline = _THOUGHT
            text = text[end + len(_THOUGHT_END) :]
        answer = text.lstrip()
        if not answer:
            return None
        self._inline = _PLAIN
        return answer

    def _add(self, text: str, n: int, t_ns: int) -> None:
        """``n`` non-empty content chunks of one read, their texts joined in ``text``."""
        self.parts.append(text)
        self._stamp(n, t_ns)

    def _stamp(self, n: int, t_ns: int) -> None:
        """``n`` non-empty chunks (their texts already in ``parts``) arrived at ``t_ns``."""
        if n == 1:
            self.chunk_times_ns.append(t_ns)
        else:
            self.chunk_times_ns.frombytes(_pack_q(t_ns) * n)
        if self.first_chunk_at_ns is None:
            self.first_chunk_at_ns = t_ns
        parts = self.parts
        if len(parts) >= _JOIN_EVERY:
            parts[:] = ["".join(parts)]

    def _learn(self, payload: bytes, text: str) -> None:
        """Learn this stream's ``ChunkShape`` from a plain content chunk, proven by a decode."""
        self._tries -= 1
        found = ChunkShape.learn(payload, text)
        if found is None:
            return
        before, after, probe = found
        try:
            chunk = (_decode_chunk if self.chat else _decode_text_chunk)(
                before + probe.encode() + after
            )
        except msgspec.MsgspecError:
            return
        if (
            chunk.usage is None
            and chunk.timings is None
            and chunk.error is None
            and chunk.choices is not None
            and len(chunk.choices) == 1
            and self._answer(chunk) == probe
        ):
            self._shape = ChunkShape(before, after)
            if self._memory is not None:
                self._memory.remember(before, after)

    def on_events(self, events: list[bytes], t_ns: int) -> None:
        """Interpret the SSE payloads of one read, all stamped ``t_ns``."""
        parts = self.parts
        n = 0  # the non-empty chunks of this read
        chat = self.chat
        decode = _decode_chunk if chat else _decode_text_chunk
        last = events[-1]
        ends = last == _DONE  # the usual end, last of its read: not left to a failed decode
        try:
            for payload in events[:-1] if ends else events:
                try:
                    chunk = decode(payload)
                except msgspec.MsgspecError as exc:
                    if payload == _DONE:  # the stream is over (later reads: see _general)
                        self._over(t_ns, payload is not last)
                        break
                    chunk = self._lenient(payload, exc)
                except UnicodeDecodeError as exc:
                    raise _not_utf8(payload, exc) from None
                if chunk.usage is not None or chunk.timings is not None or chunk.error is not None:
                    self._absorb(chunk)
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                if chat:
                    assert type(choice) is _Choice
                    delta = choice.delta if choice.delta is not None else choice.message
                    if delta is None:
                        continue
                    text = delta.content
                    if not text:
                        if delta.reasoning_content or delta.reasoning:
                            self.reasoning_chunks += 1
                            n += 1
                        continue
                    if self._inline != _PLAIN:
                        answer = self._answer_after_thinking(text)
                        if answer is None:  # (thinking inline)
                            self.reasoning_chunks += 1
                            n += 1
                            continue
                        if answer is not text:  # (the rest of a block's last chunk: no shape)
                            text = answer
                            parts.append(text)
                            n += 1
                            if self.first_answer_at_ns is None:
                                self.first_answer_at_ns = t_ns
                            continue
                    if self.reasoning_chunks and self.first_answer_at_ns is None:
                        self.first_answer_at_ns = t_ns
                else:
                    text = choice.text
                    if not text:
                        continue
                if (
                    self._tries
                    and self._shape is None
                    and len(chunk.choices) == 1
                    and chunk.usage is None
                    and chunk.timings is None
                ):
                    self._learn(payload, text)
                parts.append(text)
                n += 1
        finally:  # (also when an event fails: the chunks before it keep their times)
            if n:
                self._stamp(n, t_ns)
        if ends:
            self._over(t_ns, False)

    def _over(self, t_ns: int, more: bool) -> None:
        """``[DONE]`` came at ``t_ns``: the stream is over (later reads: see ``_general``);
        ``StreamOver`` if ``more`` came after it in the same read (or is pending)."""
        self.done = True
        self.done_at_ns = t_ns
        self._shape = None
        self._tries = 0
        parser = self._parser
        if more or parser._pending or parser._data is not None:
            raise StreamOver from None

    def on_body(self, body: bytes, t_ns: int) -> None:
        """Interpret a whole non-streamed JSON response read at ``t_ns``."""
        if body[:3] == _BOM:  # (JSON readers may ignore one: RFC 8259)
            body = body[3:]
        if self.embeddings:
            self._on_embeddings(body, t_ns)
            return
        try:
            chunk = _decode_chunk(body)
        except msgspec.MsgspecError as exc:
            chunk = self._lenient(body, exc)
        except UnicodeDecodeError as exc:
            raise _not_utf8(body, exc) from None
        self._absorb(chunk)
        text = self._answer(chunk)
        if text and self.chat:
            text = _without_thinking(text, self._opened)
        self.done = True
        self.done_at_ns = t_ns
        self.first_chunk_at_ns = t_ns
        if text:
            self.parts.append(text)
            self.chunk_times_ns.append(t_ns)

    def _on_embeddings(self, body: bytes, t_ns: int) -> None:
        """An /v1/embeddings answer: its usage (``prompt_tokens``; nothing is generated, so
        ``completion_tokens`` is 0), and a vector for the input, else ``malformed_response``."""
        try:
            answer = _decode_embeddings(body)
        except msgspec.MsgspecError as exc:
            raise _malformed(body, exc) from None
        except UnicodeDecodeError as exc:
            raise _not_utf8(body, exc) from None
        if answer.error is not None:
            raise _server_error(answer.error)
        vectors = answer.data or []
        if not vectors or not all(_a_vector(item.embedding) for item in vectors):
            raise ResponseError("malformed_response", "no embedding vector in the answer")
        usage = answer.usage
        prompt = None if usage is None else usage.prompt_tokens
        if type(prompt) is int and 0 <= prompt < MAX_COUNT:
            self.prompt_tokens = prompt
        elif prompt is not None:
            self._usage(prompt, 0, None, None)
        self.completion_tokens = 0
        self.done = True
        self.done_at_ns = t_ns
        self.first_chunk_at_ns = t_ns

    def _answer(self, chunk: _Chunk | _TextChunk) -> str | None:
        """The answer's text in ``chunk``'s first choice (not a reasoning model's thinking)."""
        if not chunk.choices:
            return None
        choice = chunk.choices[0]
        if type(choice) is _TextChoice or not self.chat:
            return choice.text
        assert type(choice) is _Choice
        delta = choice.delta if choice.delta is not None else choice.message
        return delta.content if delta is not None else None

    def _absorb(self, chunk: _Chunk | _TextChunk) -> None:
        """Take ``chunk``'s usage and server timings; raise its error."""
        if chunk.error is not None:
            raise _server_error(chunk.error)
        if chunk.usage is not None:
            usage = chunk.usage
            prompt, completion = usage.prompt_tokens, usage.completion_tokens
            details = usage.prompt_tokens_details
            cached = None if details is None else details.cached_tokens
            if (  # the usual usage, taken as it is (inline: once a response, on every response)
                type(prompt) is int
                and type(completion) is int
                and 0 <= prompt < MAX_COUNT
                and 0 <= completion < MAX_COUNT
                and (cached is None or (type(cached) is int and 0 <= cached <= prompt))
            ):
                self.prompt_tokens, self.completion_tokens = prompt, completion
                if details is not None:
                    self.cached_tokens = cached
            else:
                self._usage(prompt, completion, details, cached)
            if usage.completion_tokens_details is not None:
                self._reasoning_tokens(usage.completion_tokens_details.reasoning_tokens)
        if chunk.timings is not None:  # (a value the link cannot carry: worker.sendable)
            self.server_timings = chunk.timings

    def _reasoning_tokens(self, given: Any) -> None:
        """``usage.completion_tokens_details.reasoning_tokens``: a count no larger than the
        completion's, else noted in ``rejected``; absent or null, nothing."""
        if given is None:
            return
        completion = self.completion_tokens
        if (
            type(given) is int
            and 0 <= given < MAX_COUNT
            and (completion is None or given <= completion)
        ):
            self.reasoning_tokens = given
            return
        rejected = self.rejected
        if rejected is None:
            rejected = self.rejected = Rejections()
        count = rejected.count("reasoning_tokens", given)
        if count is not None and completion is not None and count > completion:
            rejected.add(
                "reasoning_tokens", str(count), f"more than completion_tokens {completion}"
            )
            count = None
        self.reasoning_tokens = count

    def _usage(
        self, prompt: Any, completion: Any, details: _PromptDetails | None, cached: Any
    ) -> None:
        """A usage with something else than counts: take the counts (``Rejections.count``),
        note the others."""
        rejected = self.rejected
        if rejected is None:
            rejected = self.rejected = Rejections()
        self.prompt_tokens = rejected.count("prompt_tokens", prompt)
        self.completion_tokens = rejected.count("completion_tokens", completion)
        if details is not None:
            cached = rejected.count("cached_tokens", cached)
            if cached is not None and self.prompt_tokens is not None and cached > prompt:
                rejected.add("cached_tokens", str(cached), f"more than prompt_tokens {prompt}")
                cached = None
            self.cached_tokens = cached

    def _lenient(self, payload: bytes, exc: msgspec.MsgspecError) -> _Chunk:
        """The chunk ``payload`` whose decode failed with ``exc``, when only its usage, timings
        or error were at fault (a number msgspec cannot hold, a count that is not one, a usage
        that is not an object): those are read leniently, what cannot be read is noted in
        ``rejected``. Else the response is malformed (``ResponseError``)."""
        try:
            raw = _decode_lenient(payload)
        except msgspec.MsgspecError:
            raise _malformed(payload, exc) from None
        rejected = self.rejected
        if rejected is None:
            rejected = self.rejected = Rejections()
        chunk = _Chunk(choices=raw.choices)
        if _given(raw.usage):
            fields = _fields(raw.usage)
            if fields is None:
                rejected.add("usage", raw_text(raw_value(raw.usage)), "not an object")
            else:
                details = fields.get("prompt_tokens_details")
                details_fields = None if details is None else _fields(details)
                if details is not None and details_fields is None and _given(details):
                    text = raw_text(raw_value(details))
                    rejected.add("prompt_tokens_details", text, "not an object")
                done = fields.get("completion_tokens_details")
                done_fields = None if done is None else _fields(done)
                if done is not None and done_fields is None and _given(done):
                    text = raw_text(raw_value(done))
                    rejected.add("completion_tokens_details", text, "not an object")
                chunk.usage = _Usage(
                    _raw_field(fields, "prompt_tokens"),
                    _raw_field(fields, "completion_tokens"),
                    None
                    if details_fields is None
                    else _PromptDetails(_raw_field(details_fields, "cached_tokens")),
                    None
                    if done_fields is None
                    else _CompletionDetails(_raw_field(done_fields, "reasoning_tokens")),
                )
        if _given(raw.timings):
            fields = _fields(raw.timings)
            if fields is None:
                rejected.add("timings", raw_text(raw_value(raw.timings)), "not an object")
            else:
                timings = {key: raw_value(value) for key, value in fields.items()}
                chunk.timings = sendable_timings(timings)  # (a RawText is not sendable)
        if _given(raw.error):
            chunk.error = raw_value(raw.error)
        return chunk


def _without_thinking(text: str, opened_before: bool = False) -> str:
    """An answer's ``text`` without the block of thinking it opens with, if any
    (``<think>…</think>``: a reasoning model's, inline; cut off inside it: nothing is left);
    ``opened_before``: the chat template opened the block, so the text starts inside it."""
    opened = text.lstrip()
    if opened.startswith(_THINK):
        opened = opened[len(_THINK) :]
    elif not opened_before:
        return text
    end = opened.find(_THOUGHT_END)
    return "" if end < 0 else opened[end + len(_THOUGHT_END) :].lstrip()


def _given(raw: msgspec.Raw) -> bool:
    """Whether a raw member was given and is not ``null``."""
    return len(raw) > 0 and bytes(raw) != b"null"


def _fields(raw: msgspec.Raw) -> dict[str, msgspec.Raw] | None:
    """The members of a raw JSON object (raw), or None if it is not an object."""
    try:
        return _decode_fields(raw)
    except msgspec.MsgspecError:
        return None


def _raw_field(fields: dict[str, msgspec.Raw], name: str) -> Any:
    raw = fields.get(name)
    return None if raw is None else raw_value(raw)


def _malformed(payload: bytes, exc: msgspec.MsgspecError) -> ResponseError:
    snippet = payload[:READ_WINDOW].decode("utf-8", "replace")  # cut after masking (the worker)
    return ResponseError("malformed_response", f"{exc}: {snippet!r}")


def _not_utf8(payload: bytes, exc: UnicodeDecodeError) -> ResponseError:
    bad = exc.object[exc.start : exc.end]
    snippet = payload[:200].decode("utf-8", "replace")
    return ResponseError(
        "malformed_response", f"invalid UTF-8 in the response ({bad!r}: {exc.reason}): {snippet!r}"
    )


def _server_error(error: Any) -> ResponseError:
    message = str(error)
    code = None
    if isinstance(error, dict):
        message = str(error.get("message", error))
        code = error.get("code")
    try:
        status = int(code) if code is not None else 500
    except (TypeError, ValueError):
        status = 500
    kind = "http_4xx" if 400 <= status < 500 else "http_5xx"
    return ResponseError(kind, f"error in response: {message[:READ_WINDOW]}")  # (see _malformed)
