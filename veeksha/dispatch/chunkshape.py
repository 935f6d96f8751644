"""A stream's content chunks by their fixed shape: many events' texts without decoding each.

An OpenAI server writes every content chunk of one stream with the same bytes around the text::

    data: {"id":"cmpl-1","object":"text_completion",...,"choices":[{"index":0,"text":"  ← head
    jepu                                                                                 ← text
    ","logprobs":null,"finish_reason":null}]}\\n\\n                                        ← tail

``ChunkShape.learn`` finds ``head`` and ``tail`` around the text of one chunk already decoded
(the text, as msgspec encodes it, occurs exactly once); the caller proves them by decoding the
same chunk with another text (``probe``) in full. ``ChunkShape.split`` takes a read that
starts with ``head`` at an event boundary, cuts candidate texts out of its events and proves
them: the read must start with ``head + text1 + tail + head + text2 + tail ...`` byte for byte,
and each text must be a whole JSON string body (no unescaped quote, no raw control byte, valid
escapes and UTF-8). msgspec, the decoder of the full path, checks that: all the texts of a read
in one decode when every byte of them is one character (no escape, no multi-byte UTF-8), else
each text by itself. A string body cannot hide an event boundary, a quote or another field, so
each of those chunks is the proven shape with another text: no usage, timings or error. What
``split`` cannot prove it declines (``None``), and the read takes the general path.

Why: at 34 events a response, decoding every event was a worker's largest CPU cost; a slice and
one string decode per read replace them (measured in docs/architecture.md).

A client's streams share their shape but for a few values: a server writes each stream's own
``id`` and ``created`` (and the same keys, structure and constants) before the text. Learning
it anew on every stream (its first events decoded one by one, then a probe) cost more than the
rest of a short stream's parsing. ``ShapeMemory`` keeps the head proven on an earlier stream as
a pattern in which every value that is a plain string (printable ASCII, no quote or backslash)
or an integer (at most 15 digits) may differ, and everything else (keys, structure, literals,
other values, whitespace) must be the same bytes. A new stream's first event that matches it
has the proven head's token structure and keys, and the values that differ are in fields the
accumulator never reads (the proof showed no usage, timings or error, and one choice whose
text is the slot; a plain string or a small integer is valid in any JSON value): the shape is
proven for it without a decode (``recall``). Anything else is learned as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec

__all__ = ["ChunkShape", "ShapeMemory", "decode_str"]

decode_str = msgspec.json.Decoder(str).decode
"""A JSON string's text (msgspec, as inside a chunk's full decode)."""
_decode_str = decode_str
_PROBES = ("x", "y")


class ChunkShape:
    """The bytes before (``head``, with ``data: ``) and after (``tail``, with the blank line) the
    text of one stream's plain content chunks."""

    __slots__ = ("_after", "_la", "_lb", "_sep", "head", "head_len", "min_len", "tail", "tail_len")

    def __init__(self, before: bytes, after: bytes) -> None:
        self.head = b"data: " + before  # (ends with the text's opening quote)
        self.tail = after + b"\n\n"  # (starts with its closing quote)
        self.head_len = len(self.head)
        self.tail_len = len(self.tail)
        self.min_len = self.head_len + self.tail_len  # of one chunk (an empty text)
        self._after = after
        self._sep = self.tail + self.head
        self._lb = len(before)
        self._la = len(after)

    @staticmethod
    def learn(payload: bytes, text: str) -> tuple[bytes, bytes, str] | None:
        """(before, after, probe) around ``text``'s one JSON string in ``payload``, or None.

        ``before + probe + after`` is the payload with another text; the caller decodes it in
        full to prove the shape. None when the text is not found exactly once as msgspec encodes
        it, or the pieces hold a line end (they could not be one SSE data line).
        """
        quoted = msgspec.json.encode(text)
        start = payload.find(quoted) + 1
        if not start or payload.find(quoted, start) >= 0:
            return None
        if payload.find(b"\n") >= 0 or payload.find(b"\r") >= 0:
            return None
        return payload[:start], payload[start + len(quoted) - 2 :], _PROBES[text == _PROBES[0]]

    def split(self, data: bytes) -> tuple[str, int, bytes] | None:
        """(text, non-empty chunks, rest) of the content chunks ``data`` starts with, or None.

        ``data`` starts with ``head`` at an event boundary. ``rest`` follows the last content
        chunk of this shape (other events, or an incomplete one), for the general path.
        """
        tail = self.tail
        # Candidates from the SSE events' separator (cheaper to find than ``tail + head``);
        # whatever they are, the read is proven to start with exactly those chunks below.
        pieces = data[6:].split(b"\n\ndata: ")
        if pieces[-1].endswith(tail):
            pieces[-1] = pieces[-1][:-2]
        k = len(pieces)
        after = self._after
        while k and not pieces[k - 1].endswith(after):  # events after ours (finish, usage)
            k -= 1
        if not k:
            return None
        lb = self._lb
        end = -self._la
        texts = [piece[lb:end] for piece in (pieces if k == len(pieces) else pieces[:k])]
        shaped = b"".join((self.head, self._sep.join(texts), tail))
        if not data.startswith(shaped):
            return None
        text = _plain(b"".join(texts))
        if text is None:
            try:
                text = "".join([_decode_str(b'"%b"' % t) for t in texts])
            except (msgspec.MsgspecError, UnicodeDecodeError):
                return None
        return text, k - texts.count(b""), data[len(shaped) :]


def _plain(raw: bytes) -> str | None:
    """``raw`` as text if it is JSON string bodies that are their own text, joined; else None.

    One decode of the joined bodies: when no character took more than one byte (no escape, no
    multi-byte UTF-8), every byte was a character other than a quote, a backslash or a control
    character, which makes each piece, wherever the pieces were cut, a valid body by itself.
    """
    try:
        text = _decode_str(b'"%b"' % raw)
    except (msgspec.MsgspecError, UnicodeDecodeError):
        return None
    return text if len(text) == len(raw) else None


# A JSON token of a head: a whole string, a number, or a run of anything else (structure,
# literals, whitespace, the slot's opening quote).
_TOKEN = re.compile(
    rb'"(?:[^"\\]|\\.)*"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|[^"0-9-]+|.',
    re.DOTALL,
)
_PLAIN = re.compile(rb"[ !#-\[\]-~]*")  # a string body that is its own text, printable ASCII
_INTEGER = re.compile(rb"-?(?:0|[1-9][0-9]{0,14})")
_SPACE = b" \t\r\n"


class ShapeMemory:
    """The ``ChunkShape`` head last proven on a stream of one client, as a pattern whose plain
    string values and integers may differ on the next stream (see the module docstring)."""

    __slots__ = ("_after", "_match", "_misses")

    #: Streams in a row that had to learn their shape although one was remembered, after which
    #: the client's heads are taken to differ in more than plain values (a float, an escaped
    #: string that changes): nothing more is remembered, since building and compiling a pattern
    #: costs 45-330 µs a stream, more than the learning it would save.
    GIVE_UP = 4

    def __init__(self) -> None:
        self._match: Callable[[bytes], re.Match[bytes] | None] | None = None
        self._after = b""
        self._misses = 0

    def remember(self, before: bytes, after: bytes) -> None:
        """Keep the shape ``before``/``after`` just proven by a decode (``ChunkShape.learn``);
        a stream that learns while a shape is remembered is one the memory missed."""
        if self._match is not None:
            m = self._match(b"data: " + before)
            if m is not None and m.end() == len(before) + 6:  # the remembered head after all
                self._after = after  # (learned here when a read cut its first events apart)
                return
            self._misses += 1
            if self._misses >= self.GIVE_UP:
                self._match = None  # (and, with _misses kept, never again for this client)
                return
        elif self._misses >= self.GIVE_UP:
            return
        parts = [b"data: "]
        for m in _TOKEN.finditer(before):
            token = m.group()
            if token[0] == 34 and len(token) > 1:  # a whole string: a key stays as it is
                key = before[m.end() :].lstrip(_SPACE)[:1] == b":"
                if not key and _PLAIN.fullmatch(token, 1, len(token) - 1):
                    parts.append(b'"[ !#-\\[\\]-~]*"')
                    continue
            elif _INTEGER.fullmatch(token):
                parts.append(b"-(?:0|[1-9][0-9]{0,14})" if token[0] == 45 else _INT_PATTERN)
                continue
            parts.append(re.escape(token))
        self._match = re.compile(b"".join(parts), re.DOTALL).match
        self._after = after

    def recall(self, data: bytes) -> ChunkShape | None:
        """The remembered shape with ``data``'s own head, if ``data`` starts with one."""
        match = self._match
        if match is None:
            return None
        m = match(data)
        if m is None:
            return None
        self._misses = 0
        return ChunkShape(data[6 : m.end()], self._after)


_INT_PATTERN = b"(?:0|[1-9][0-9]{0,14})"
