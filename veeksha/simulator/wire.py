"""The OpenAI wire format as the simulator speaks it: request validation and response bytes.

Requests are decoded with msgspec into plain objects and checked by hand, so every problem
becomes an OpenAI-style error (``{"error": {"message", "type", "param", "code"}}``) with a 4xx
status instead of an exception. Streamed chunks are built from per-request byte templates:
``head`` (id, object, created, model) is encoded once per request, every content chunk is
``prefix + text + suffix``. Output text uses only builtin-vocabulary words (plain ASCII letters),
so it never needs JSON escaping.

Token accounting, with the builtin tokenizer (one token per whitespace-separated word):
chat prompts count the words of every message's content (text parts of a content list
included; no template tokens, unless ``chat_template`` wraps them: ``SPECIAL_TOKENS``);
completion prompts count the words of ``prompt`` (or the ids of a token-id prompt). The
prompt's token sequence for the prefix cache is the concatenation of those words, in message
order. With the ``subword`` tokenizer (``veeksha.simulator.subword``)
each content (or the prompt) is tokenized on its own and the ids concatenated, and answers use
only words that are one subword token wherever they stand, so an answer of n tokens is n tokens
again when a later turn sends it back. An image part of a content list is
``ceil(width / P) * ceil(height / P)`` tokens of its own where it stands, P being
``image_patch_px`` (``veeksha.simulator.vision``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from veeksha.generate.tokenizer import BUILTIN_VOCAB
from veeksha.simulator.vision import (
    IMAGE_PATCH_PX,
    IMAGE_PLACEHOLDER,
    UNSUPPORTED_PARTS,
    Image,
    ImageProblem,
    read_image,
)

#: ``reasoning_field`` values whose thinking is in the content (no reasoning parser): ``inline``
#: opens it with ``<think>``, ``template`` leaves that to the prompt's chat template
INLINE_FIELDS = ("inline", "template")

__all__ = [
    "INLINE_FIELDS",
    "ApiError",
    "GenRequest",
    "OutputText",
    "Templates",
    "chat_text",
    "chat_tokens",
    "error_body",
    "json_object",
    "parse_generation",
    "special_tokens",
]

Kind = Literal["chat", "completion"]
#: A text's prompt tokens (the builtin tokenizer's words, or the subword tokenizer's ids).
Tokenize = Callable[[str], list[Any]]

_decode = msgspec.json.Decoder().decode
encode = msgspec.json.Encoder().encode


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; an :class:`ApiError` 400 otherwise."""
    try:
        body = _decode(raw)
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


class ApiError(Exception):
    """A request the simulator refuses, with the status and OpenAI error fields to answer with."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> bytes:
        """The JSON error body."""
        return error_body(self.message, self.type, self.param, self.code)


def error_body(
    message: str,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> bytes:
    """An OpenAI-style error body."""
    return encode({"error": {"message": message, "type": type, "param": param, "code": code}})


@dataclass(slots=True)
class GenRequest:
    """A validated chat or completion request."""

    kind: Kind
    stream: bool
    include_usage: bool
    tokens: list[Any]  # the prompt's tokens (words, or ids of a token-id prompt)
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    seed: int | None


def _int(body: dict[str, Any], key: str, low: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ApiError(400, f"'{key}' must be an integer >= {low}", param=key)
    return value


def _split(text: str) -> list[Any]:
    return text.split()


#: The special tokens of the simulator's chat template (``chat_template: true``), ChatML's
#: shape: ``<s>`` opens the prompt; each message is ``<|im_start|>``, its role, a newline, its
#: content, ``<|im_end|>``, a newline; the generation prompt is ``<|im_start|>``, ``assistant``,
#: a newline. No text tokenizes to them: ids from ``SPECIAL_BASE`` on (words, with the builtin
#: tokenizer's split, start with a NUL). One message thus adds ``TEMPLATE_PROMPT_TOKENS`` (9)
#: with the generation prompt, and each later turn (an answer and a new message) adds
#: ``TEMPLATE_TURN_TOKENS`` (10) beside their contents.
SPECIAL_TOKENS = (
    "<s>",
    "<|im_start|>",
    "<|im_end|>",
    "<nl>",
    "<role>",
    "system",
    "user",
    "assistant",
)
SPECIAL_BASE = 1 << 24
TEMPLATE_PROMPT_TOKENS = 9
TEMPLATE_TURN_TOKENS = 10


#: How ``/apply-template`` writes each special token (``tokenize_api: llama_cpp``), and the
#: texts its ``/tokenize`` reads back as them (llama.cpp's ``parse_special``, on by default): the
#: token's name, the roles bracketed (``<|user|>``), so no prompt of words contains one.
SPECIAL_TEXTS = tuple(name if name.startswith("<") else f"<|{name}|>" for name in SPECIAL_TOKENS)
_SPECIAL_TEXT = re.compile("(" + "|".join(re.escape(text) for text in SPECIAL_TEXTS) + ")")


def _special(tokenize: Tokenize) -> Callable[[str], Any]:
    if tokenize is _split:
        return lambda name: "\0" + name
    return lambda name: SPECIAL_BASE + SPECIAL_TOKENS.index(name)


def _chat_parts(
    body: dict[str, Any], template: bool, generation_prompt: bool
) -> list[tuple[bool, str | Image]]:
    """A chat body's prompt in order: ``(True, name)`` a special token of the template (when
    ``template``), ``(False, text)`` a content (or one text part of a content list),
    ``(False, image)`` an image part of a content list (``veeksha.simulator.vision``)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    parts: list[tuple[bool, str | Image]] = []
    if template:
        parts.append((True, "<s>"))
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a 'role'", param="messages")
        if template:
            role = message["role"] if message["role"] in SPECIAL_TOKENS[5:] else "<role>"
            parts += ((True, "<|im_start|>"), (True, role), (True, "<nl>"))
        content = message.get("content")
        if isinstance(content, str):
            parts.append((False, content))
        elif isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict):
                    continue
                if isinstance(part.get("text"), str):
                    parts.append((False, part["text"]))
                elif part.get("type") == "image_url":
                    try:
                        parts.append((False, read_image(part.get("image_url"), _at(i, j))))
                    except ImageProblem as exc:
                        raise ApiError(400, str(exc), param="messages") from None
                elif part.get("type") in UNSUPPORTED_PARTS:
                    raise ApiError(
                        400,
                        f"{_at(i, j)}: content parts of type {part['type']!r} are not "
                        "supported by the simulator (text and image_url only)",
                        param="messages",
                    )
        elif content is not None:
            raise ApiError(
                400, f"messages[{i}].content must be a string or a list", param="messages"
            )
        if template:
            parts += ((True, "<|im_end|>"), (True, "<nl>"))
    if template and generation_prompt:
        parts += ((True, "<|im_start|>"), (True, "assistant"), (True, "<nl>"))
    return parts


def _at(i: int, j: int) -> str:
    return f"messages[{i}].content[{j}]"


def chat_tokens(
    body: dict[str, Any],
    tokenize: Tokenize = _split,
    template: bool = False,
    generation_prompt: bool = True,
    image_patch_px: int = IMAGE_PATCH_PX,
    limit: int | None = None,
) -> list[Any]:
    """The prompt tokens of a chat body: the contents' tokens in message order, wrapped in
    the chat template when ``template`` (see ``SPECIAL_TOKENS``); an image part's tokens
    where it stands (``veeksha.simulator.vision``, ``image_patch_px``-pixel patches). An image
    that would take the prompt beyond ``limit`` tokens is refused before its tokens are made
    (``context_length_exceeded``)."""
    special: Callable[[Any], Any] = _special(tokenize)  # (a special token's part is a str)
    tokens: list[Any] = []
    for is_special, part in _chat_parts(body, template, generation_prompt):
        if is_special:
            tokens.append(special(part))
        elif isinstance(part, str):
            tokens.extend(tokenize(part))
        else:
            words = tokenize is _split
            tokens.extend(_image_tokens(part, words, image_patch_px, len(tokens), limit))
    return tokens


def _image_tokens(
    image: Image, words: bool, patch_px: int, before: int, limit: int | None
) -> list[Any]:
    n = image.count(patch_px)
    if limit is not None and before + n > limit:
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens; the request has at least "
            f"{before + n} prompt tokens ({image.where} is an image of {image.width} × "
            f"{image.height} pixels: {n} tokens).",
            code="context_length_exceeded",
        )
    return image.words(n) if words else image.ids(n)


def chat_text(body: dict[str, Any]) -> str:
    """The chat template rendered as text, generation prompt included (the simulator's
    ``/apply-template``): each special token as its ``SPECIAL_TEXTS`` form, each content as it
    is; a content list's parts are joined by a space, an image part written as
    ``IMAGE_PLACEHOLDER`` (``<image>``). ``special_tokens`` of it is ``chat_tokens`` of the
    body, to the token, for contents without images."""
    texts = dict(zip(SPECIAL_TOKENS, SPECIAL_TEXTS, strict=True))
    parts = _chat_parts(body, True, True)
    out: list[str] = []
    for k, (is_special, part) in enumerate(parts):
        if not is_special and k and not parts[k - 1][0]:
            out.append(" ")  # (two parts of one content list)
        if isinstance(part, Image):
            out.append(IMAGE_PLACEHOLDER)
        else:
            out.append(texts[part] if is_special else part)
    return "".join(out)


def special_tokens(text: str, tokenize: Tokenize) -> list[Any]:
    """``text``'s tokens with the special tokens' texts (``SPECIAL_TEXTS``) read as those
    tokens and the text between them tokenized piece by piece (llama.cpp's ``parse_special``)."""
    special = _special(tokenize)
    index = dict(zip(SPECIAL_TEXTS, SPECIAL_TOKENS, strict=True))
    tokens: list[Any] = []
    for k, piece in enumerate(_SPECIAL_TEXT.split(text)):
        if k % 2:
            tokens.append(special(index[piece]))
        elif piece:
            tokens.extend(tokenize(piece))
    return tokens


def _completion_tokens(body: dict[str, Any], tokenize: Tokenize = _split) -> list[Any]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenize(prompt)
    if isinstance(prompt, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in prompt
    ):
        return list(prompt)
    raise ApiError(
        400,
        "'prompt' must be a string, a list of token ids, or a list of one of them",
        param="prompt",
    )


def parse_generation(
    kind: Kind,
    raw: bytes,
    model: str,
    default_max_tokens: int,
    max_model_len: int,
    tokenize: Tokenize = _split,
    template: bool = False,
    image_patch_px: int = IMAGE_PATCH_PX,
) -> GenRequest:
    """Validate the body of ``/v1/chat/completions`` or ``/v1/completions`` (a chat's image
    parts counted with ``image_patch_px``-pixel patches)."""
    body = json_object(raw)
    name = body.get("model")
    if not isinstance(name, str):
        raise ApiError(400, "'model' is required", param="model")
    if name != model:
        raise ApiError(
            404,
            f"The model '{name}' does not exist; this server serves '{model}'.",
            param="model",
            code="model_not_found",
        )
    if kind == "chat":
        tokens = chat_tokens(body, tokenize, template, True, image_patch_px, max_model_len)
    else:
        tokens = _completion_tokens(body, tokenize)
    n = _int(body, "n", 1)
    if n not in (None, 1):
        raise ApiError(400, "only n=1 is supported", param="n")
    max_tokens = _int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", 1)
    if max_tokens is None:
        max_tokens = default_max_tokens
    min_tokens = _int(body, "min_tokens", 0) or 0
    if min_tokens > max_tokens:
        raise ApiError(400, "'min_tokens' must not exceed the maximum tokens", param="min_tokens")
    if len(tokens) + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens; the request has "
            f"{len(tokens)} prompt tokens and asks for {max_tokens} output tokens.",
            code="context_length_exceeded",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    include_usage = bool(options and options.get("include_usage"))
    ignore_eos = body.get("ignore_eos", False) is True
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError(400, "'seed' must be an integer", param="seed")
    return GenRequest(kind, stream, include_usage, tokens, max_tokens, min_tokens, ignore_eos, seed)


class OutputText:
    """Seeded output words: a fixed pseudo-random word sequence, read from a drawn offset.

    Every word is ``b" word"``; the first token of an answer drops the leading space, so the
    answer is ``n`` whitespace-separated vocabulary words and counts as exactly ``n`` tokens.
    """

    __slots__ = ("_encode", "_rng", "strs", "words")

    SIZE = 1 << 16

    def __init__(
        self,
        seed: int,
        stream: str = "",
        vocab: Sequence[str] = BUILTIN_VOCAB,
        encode: Tokenize | None = None,
    ) -> None:
        table = random.Random(f"veeksha-sim-words-{seed}")
        self._encode = encode  # the tokens of an answer's text (None: its words)
        self.strs = table.choices(vocab, k=self.SIZE)
        self.words = [b" " + w.encode() for w in self.strs]
        self._rng = random.Random(f"veeksha-sim-lengths-{seed}-{stream}")

    def draw(self, n: int, min_tokens: int, exact: bool, seed: int | None) -> tuple[int, int]:
        """(output length, offset) of one answer; ``seed`` is the request's own seed if any."""
        rng = self._rng if seed is None else random.Random(seed)
        length = n if exact or min_tokens >= n else rng.randint(max(min_tokens, 1), n)
        return length, rng.randrange(self.SIZE)

    def slice(self, offset: int, start: int, stop: int) -> list[bytes]:
        """Words ``start..stop`` of the answer at ``offset``; the answer's first word unspaced."""
        words = self.words
        size = self.SIZE
        a = (offset + start) % size
        if a + (stop - start) <= size:
            out = words[a : a + stop - start]
        else:
            out = [words[(offset + i) % size] for i in range(start, stop)]
        if start == 0 and out:
            out[0] = out[0][1:]
        return out

    def tokens(self, offset: int, n: int) -> list[Any]:
        """The first ``n`` words of the answer at ``offset``, as tokens."""
        if self._encode is not None:
            return self._encode(" ".join(self._words(offset, n)))
        return self._words(offset, n)

    def _words(self, offset: int, n: int) -> list[str]:
        strs = self.strs
        if offset + n <= self.SIZE:
            return strs[offset : offset + n]
        return [strs[(offset + i) % self.SIZE] for i in range(n)]

    def text(self, offset: int, n: int) -> str:
        """The answer's text: ``n`` words joined by single spaces."""
        return " ".join(self._words(offset, n))

    def text_range(self, offset: int, start: int, stop: int) -> str:
        """Words ``start..stop`` of the answer at ``offset``, joined by single spaces."""
        strs, size = self.strs, self.SIZE
        return " ".join(strs[(offset + i) % size] for i in range(start, stop))


class Templates:
    """Pre-encoded pieces of one request's SSE chunks and its JSON body."""

    __slots__ = (
        "created",
        "head",
        "kind",
        "model",
        "prefix",
        "reasoning",
        "rid",
        "suffix",
        "thinking",
    )

    def __init__(
        self,
        kind: Kind,
        rid: str,
        created: int,
        model_json: bytes,
        model: str,
        reasoning: str = "reasoning_content",
    ) -> None:
        self.kind = kind
        self.rid = rid
        self.created = created
        self.model = model
        self.reasoning = reasoning
        obj = b"chat.completion.chunk" if kind == "chat" else b"text_completion"
        self.head = b'data: {"id":"%b","object":"%b","created":%d,"model":%b,' % (
            rid.encode(),
            obj,
            created,
            model_json,
        )
        if kind == "chat":
            self.prefix = self.head + b'"choices":[{"index":0,"delta":{"content":"'
            # (a reasoning model's chunk of thinking: simulator.reasoning_tokens; inline, in
            # the content, between <think> and </think>, as a server without a parser sends it)
            self.thinking = (
                self.prefix
                if reasoning in INLINE_FIELDS
                else self.head + b'"choices":[{"index":0,"delta":{"%b":"' % reasoning.encode()
            )
            self.suffix = b'"},"logprobs":null,"finish_reason":null}]}\n\n'
        else:
            self.prefix = self.head + b'"choices":[{"index":0,"text":"'
            self.thinking = self.prefix  # (completions: no thinking apart)
            self.suffix = b'","logprobs":null,"finish_reason":null}]}\n\n'

    def role_chunk(self) -> bytes:
        """The optional first chat chunk: role only, empty content."""
        return self.head + (
            b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}]}\n\n'
        )

    def finish_chunk(self, finish_reason: bytes, timings: bytes | None) -> bytes:
        """The chunk with ``finish_reason`` (and the timings when no usage chunk follows)."""
        if self.kind == "chat":
            choice = b'"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"%b"}]'
        else:
            choice = b'"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"%b"}]'
        tail = b',"timings":%b}\n\n' % timings if timings is not None else b"}\n\n"
        return self.head + choice % finish_reason + tail

    def usage_chunk(self, usage: bytes, timings: bytes) -> bytes:
        """The final chunk of ``stream_options.include_usage``: no choices, usage, timings."""
        return self.head + b'"choices":[],"usage":%b,"timings":%b}\n\n' % (usage, timings)

    def body(
        self,
        text: str,
        finish_reason: str,
        usage: dict[str, Any],
        timings: dict[str, Any],
        thinking: str | None = None,
    ) -> bytes:
        """The non-streaming JSON response (``thinking``: a reasoning model's, chat only)."""
        if self.kind == "chat":
            message: dict[str, str | None] = {"role": "assistant", "content": text}
            if thinking is not None and self.reasoning in INLINE_FIELDS:
                opening = "" if self.reasoning == "template" else "<think>"
                message["content"] = f"{opening}{thinking}</think>\n\n{text}"
            elif thinking is not None:
                message = {"role": "assistant", self.reasoning: thinking, "content": text or None}
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            obj = "text_completion"
        return encode(
            {
                "id": self.rid,
                "object": obj,
                "created": self.created,
                "model": self.model,
                "choices": [choice],
                "usage": usage,
                "timings": timings,
            }
        )


def usage(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int, reasoning_tokens: int = -1
) -> dict[str, Any]:
    """The OpenAI ``usage`` object (``reasoning_tokens`` given when ≥ 0: a reasoning model)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if reasoning_tokens >= 0:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return out
