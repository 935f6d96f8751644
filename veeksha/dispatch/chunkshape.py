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
"""

from __future__ import annotations

import msgspec

__all__ = ["ChunkShape", "decode_str"]

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
