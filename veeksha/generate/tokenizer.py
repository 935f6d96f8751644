"""Tokenizers: how veeksha counts and builds prompt tokens.

``make_tokenizer(cfg, api_base, model)`` builds the one a scenario's ``client.tokenizer`` names:
``builtin`` (below), ``hf`` (:class:`HfTokenizerAdapter`, a local tokenizer.json) or ``server``
(:class:`ServerTokenizer`, the target's ``/tokenize``).

``BuiltinTokenizer`` is deterministic and shipped with veeksha: one token per whitespace-separated
word. Its vocabulary is a fixed list of pronounceable words (two-letter syllables, one or two of
them). The built-in simulator counts with the same tokenizer, so runs against it are exact:
a prompt built from N vocabulary words is N tokens on both sides, and a history of turns joined
with whitespace counts as the sum of its parts.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from veeksha.errors import ConfigurationError, TargetError
from veeksha.net import fetch, origin, setup_timeout
from veeksha.redact import READ_WINDOW, Redactor

if TYPE_CHECKING:
    from veeksha.scenario.models import BuiltinTokenizer as BuiltinTokenizerConfig
    from veeksha.scenario.models import HfTokenizer as HfTokenizerConfig
    from veeksha.scenario.models import ServerTokenizer as ServerTokenizerConfig

__all__ = [
    "BUILTIN_VOCAB",
    "SERVER_TOKENIZER_TIMEOUT_S",
    "BuiltinTokenizer",
    "HfTokenizerAdapter",
    "ServerTokenizer",
    "TokenizerLike",
    "builtin_vocab",
    "default_tokenize_endpoint",
    "make_tokenizer",
]

SERVER_TOKENIZER_TIMEOUT_S = 30.0
_QUOTED = 120  # characters of a failed answer quoted in the message

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


class TokenizerLike(Protocol):
    """What veeksha needs of a tokenizer: count, encode and decode text."""

    def count(self, text: str) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@cache
def builtin_vocab() -> tuple[str, ...]:
    """The builtin vocabulary: 90 one-syllable then 8,100 two-syllable words, in a fixed order."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    return tuple(syllables) + tuple(a + b for a in syllables for b in syllables)


BUILTIN_VOCAB = builtin_vocab()
_UNKNOWN_BASE = len(BUILTIN_VOCAB)
_UNKNOWN_SPACE = 1 << 20


class BuiltinTokenizer:
    """One token per whitespace-separated word; ids are vocabulary indices.

    Words outside the vocabulary get a stable id above the vocabulary (crc32 based) and decode
    to ``<unk:ID>``; counting never depends on the vocabulary, only on whitespace.

    >>> tok = BuiltinTokenizer()
    >>> tok.count("ba be bi")
    3
    >>> tok.decode(tok.encode("ba bebe"))
    'ba bebe'
    """

    __slots__ = ("_index",)

    name = "builtin"

    def __init__(self) -> None:
        self._index = {word: i for i, word in enumerate(BUILTIN_VOCAB)}

    @property
    def vocab_size(self) -> int:
        return len(BUILTIN_VOCAB)

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        index = self._index
        return [
            index[w] if w in index else _UNKNOWN_BASE + zlib.crc32(w.encode()) % _UNKNOWN_SPACE
            for w in text.split()
        ]

    def decode(self, ids: Sequence[int]) -> str:
        vocab = BUILTIN_VOCAB
        return " ".join(vocab[i] if 0 <= i < len(vocab) else f"<unk:{i}>" for i in ids)

    def words(self, ids: Sequence[int]) -> str:
        """Text of the given vocabulary indices (taken modulo the vocabulary size)."""
        vocab = BUILTIN_VOCAB
        n = len(vocab)
        return " ".join(vocab[i % n] for i in ids)


# ------------------------------------------------------------------------------- hf and server


def _resolve_tokenizer_json(path: str) -> Path:
    p = Path(path).expanduser()
    candidate = p / "tokenizer.json" if p.is_dir() else p
    if not candidate.is_file():
        raise ConfigurationError(
            f"tokenizer file not found: {candidate}. Set client.tokenizer.path to a local "
            "tokenizer.json (or a folder holding one), e.g. from a downloaded model snapshot; "
            "veeksha never downloads tokenizers."
        )
    return candidate


class HfTokenizerAdapter:
    """A local Hugging Face ``tokenizer.json`` through the ``tokenizers`` package.

    Counts exclude special tokens (a chat template's own tokens are the server's business).
    Nothing is ever downloaded: a missing file is a :class:`ConfigurationError`.
    """

    name = "hf"

    def __init__(self, path: str) -> None:
        file = _resolve_tokenizer_json(path)
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - tokenizers is a test dependency
            raise ConfigurationError(
                "client.tokenizer type hf needs the 'tokenizers' package: pip install 'veeksha[hf]'"
            ) from exc
        try:
            self._tok = Tokenizer.from_file(str(file))
        except Exception as exc:
            raise ConfigurationError(f"cannot load tokenizer {file}: {exc}") from exc
        self.path = file

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=True))


def default_tokenize_endpoint(api_base: str) -> str:
    """``http://host:port/v1`` → ``http://host:port/tokenize`` (vLLM, SGLang, llama.cpp)."""
    base = api_base.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + "/tokenize"


class ServerTokenizer:
    """The target's own ``/tokenize`` (and ``/detokenize``) endpoints, vLLM style.

    ``POST /tokenize {"model": m, "prompt": text}`` → ``{"tokens": [...], "count": N}``;
    ``POST /detokenize {"model": m, "tokens": [...]}`` → ``{"prompt": text}``. Synchronous
    (``veeksha.net.fetch``: each call whole within ``timeout`` seconds, default 30); the API key
    goes with the calls only when ``make_tokenizer`` found the endpoint on the target's own
    origin. Every failure is a :class:`~veeksha.errors.TargetError` (exit 2 at set-up, where
    :meth:`check` calls both endpoints once); after one, every later call fails at once with
    the same error, so a server that broke mid-run costs one deadline, not one per call.
    """

    name = "server"

    def __init__(
        self,
        endpoint: str,
        model: str | None,
        timeout: float | None = None,
        api_key: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.timeout = setup_timeout(SERVER_TOKENIZER_TIMEOUT_S) if timeout is None else timeout
        self._api_key = api_key
        self._broken: TargetError | None = None

    def __repr__(self) -> str:
        return f"ServerTokenizer({self.endpoint!r}, {self.model!r})"

    def _post(self, url: str, body: dict[str, object]) -> dict[str, object]:
        if self._broken is not None:
            raise self._broken
        try:
            return self._call(url, body)
        except TargetError as exc:
            self._broken = exc
            raise

    def _call(self, url: str, body: dict[str, object]) -> dict[str, object]:
        if self.model is not None:
            body = {"model": self.model, **body}
        fix = "Check that the target offers /tokenize, or use client.tokenizer type builtin or hf"
        answer = fetch(
            "POST", url, json_body=body, api_key=self._api_key, timeout_s=self.timeout, fix=fix
        )
        redact = Redactor(self._api_key)
        if not answer.ok:
            text = redact(answer.body[:READ_WINDOW].decode("utf-8", "replace"), _QUOTED)
            raise TargetError(
                " ".join(
                    f"server tokenizer: POST {url} answered HTTP {answer.status} "
                    f"{answer.reason}: {text!r}. {fix}".split()
                )
            )
        try:
            data = answer.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            text = redact(answer.body[:READ_WINDOW].decode("utf-8", "replace"), _QUOTED)
            raise TargetError(
                f"server tokenizer: POST {url} answered no JSON object ({text!r}). {fix}"
            )
        return data

    def check(self) -> None:
        """Tokenize and detokenize a short text once (at set-up: a failure here is exit 2)."""
        self.decode(self.encode("veeksha checks the tokenizer"))

    def encode(self, text: str) -> list[int]:
        tokens = self._post(self.endpoint, {"prompt": text}).get("tokens")
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise TargetError(f"server tokenizer at {self.endpoint}: no 'tokens' list of ints")
        return tokens

    def count(self, text: str) -> int:
        data = self._post(self.endpoint, {"prompt": text})
        count = data.get("count")
        if type(count) is int:
            return count
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise TargetError(f"server tokenizer at {self.endpoint}: no count or tokens")
        return len(tokens)

    def decode(self, ids: Sequence[int]) -> str:
        url = self.endpoint.rsplit("/", 1)[0] + "/detokenize"
        text = self._post(url, {"tokens": list(ids)}).get("prompt")
        if not isinstance(text, str):
            raise TargetError(f"server detokenizer at {url}: no 'prompt' text")
        return text


def make_tokenizer(
    cfg: BuiltinTokenizerConfig | HfTokenizerConfig | ServerTokenizerConfig,
    api_base: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
) -> TokenizerLike:
    """The tokenizer of a ``client.tokenizer`` config (``api_base``/``model``/``api_key``: the
    target's; a server tokenizer gets the key only on the target's own origin)."""
    # (by the type tag: the simulator imports this module, and needs no scenario models)
    if cfg.type == "hf":
        return HfTokenizerAdapter(cfg.path)
    if cfg.type == "server":
        endpoint = cfg.endpoint
        if endpoint is None:
            if api_base is None:
                raise ConfigurationError(
                    "client.tokenizer type server needs client.api_base (or "
                    "client.tokenizer.endpoint); the built-in simulator uses type builtin"
                )
            endpoint = default_tokenize_endpoint(api_base)
        same_server = api_base is not None and origin(endpoint) == origin(api_base)
        return ServerTokenizer(endpoint, model, api_key=api_key if same_server else None)
    return BuiltinTokenizer()
