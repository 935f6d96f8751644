"""Tokenizers: how veeksha counts and builds prompt tokens.

``make_tokenizer(cfg, api_base, model)`` builds the one a scenario's ``client.tokenizer`` names:
``builtin`` (below), ``hf`` (:class:`HfTokenizerAdapter`, a local tokenizer.json) or ``server``
(:class:`~veeksha.generate.server_tokenizer.ServerTokenizer`, the target's ``/tokenize``, which
the engine turns into a :class:`~veeksha.generate.calibration.CalibratedTokenizer` at set-up).

``BuiltinTokenizer`` is deterministic and shipped with veeksha: one token per whitespace-separated
word. Its vocabulary is a fixed list of pronounceable words (two-letter syllables, one or two of
them). The built-in simulator counts with the same tokenizer, so runs against it are exact:
a prompt built from N vocabulary words is N tokens on both sides, and a history of turns joined
with whitespace counts as the sum of its parts.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from veeksha.errors import ConfigurationError
from veeksha.generate.server_tokenizer import SERVER_TOKENIZER_TIMEOUT_S, ServerTokenizer
from veeksha.net import origin

if TYPE_CHECKING:
    from veeksha.scenario.models import BuiltinTokenizer as BuiltinTokenizerConfig
    from veeksha.scenario.models import HfTokenizer as HfTokenizerConfig
    from veeksha.scenario.models import ServerTokenizer as ServerTokenizerConfig

__all__ = [
    "BUILTIN_VOCAB",
    "BUILTIN_VOCABULARY",
    "SERVER_TOKENIZER_TIMEOUT_S",
    "BuiltinTokenizer",
    "HfTokenizerAdapter",
    "ServerTokenizer",
    "TokenizerLike",
    "Vocabulary",
    "builtin_vocab",
    "default_tokenize_endpoint",
    "make_tokenizer",
    "resolve_tokenizer_json",
]

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


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Words that are one token each in a tokenizer, whatever words surround them (joined by
    single spaces), so a text of n of them is exactly n tokens.

    ``lead``: the words that are also one token at the start of a text (and of a message);
    None when every word is. Prompts built from a vocabulary (``veeksha.generate.content``)
    open with a lead word.
    """

    words: tuple[str, ...]
    lead: tuple[str, ...] | None = None


BUILTIN_VOCABULARY = Vocabulary(BUILTIN_VOCAB)
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
    vocabulary = BUILTIN_VOCABULARY

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


def resolve_tokenizer_json(path: str) -> Path:
    """The tokenizer.json of ``path`` (a file, or a folder holding one); ConfigurationError
    when there is none."""
    p = Path(path).expanduser()
    candidate = p / "tokenizer.json" if p.is_dir() else p
    if not candidate.is_file():
        raise ConfigurationError(
            f"tokenizer file not found: {candidate}. Set this path to a local "
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
        file = resolve_tokenizer_json(path)
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


def make_tokenizer(
    cfg: BuiltinTokenizerConfig | HfTokenizerConfig | ServerTokenizerConfig,
    api_base: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    headers: dict[str, str] | None = None,
    key: str = "client.tokenizer",
) -> TokenizerLike:
    """The tokenizer of a ``client.tokenizer`` config (``api_base``/``model``/``api_key`` and
    ``headers``, the client's own: the target's; a server tokenizer gets the key and the
    headers only on the target's own origin). ``key``: the config's key path, as messages name
    it (``clients[1].tokenizer``)."""
    # (by the type tag: the simulator imports this module, and needs no scenario models)
    if cfg.type == "hf":
        return HfTokenizerAdapter(cfg.path)
    if cfg.type == "server":
        endpoint = cfg.endpoint
        if endpoint is None:
            if api_base is None:
                client = key.rsplit(".", 1)[0]
                raise ConfigurationError(
                    f"{key} type server needs {client}.api_base (or "
                    f"{key}.endpoint); the built-in simulator uses type builtin"
                )
            endpoint = default_tokenize_endpoint(api_base)
        same_server = api_base is not None and origin(endpoint) == origin(api_base)
        return ServerTokenizer(
            endpoint,
            model,
            api_key=api_key if same_server else None,
            headers=headers if same_server else None,
            format=None if cfg.format == "auto" else cfg.format,
        )
    return BuiltinTokenizer()
