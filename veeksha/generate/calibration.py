"""A vocabulary calibrated against a server's tokenizer: prompts exact in the server's tokens.

With ``client.tokenizer`` type ``server`` veeksha asks the target once, at start-up (before t0),
which of its candidate words (the builtin vocabulary's 8,190 pronounceable words) are exactly one
token of the server's tokenizer, and builds every prompt from those words only: a text of n of
them joined by single spaces is n server tokens, so prompts are exact by construction, cut from
a corpus in O(1) slices like the builtin tokenizer's, and nothing on the traffic path ever calls
the server.

Vocabulary:

* **mid form**: a word after a space (``" baba"``); **start form**: at the start of a text or a
  chat message (``"baba"``). Byte-level BPE tokenizers give the two different tokens, and a
  word may be one token in one form and two in the other.
* **separator**: a one-token text (``"\\n"``, else ``"|"``, else ``"#"``) put before the
  candidates, so every candidate is in mid form, and between token ids to read their texts.
* **overhead**: the tokens the server adds to any text (a BOS), measured on the empty text and
  removed from every count.

Calls (``calibrate``), each a whole ``/tokenize`` or ``/detokenize`` exchange:

1. ``tokenize("")`` (the overhead), ``tokenize(separator)`` until one is a single token,
   ``detokenize([separator])`` (its text as the server writes it back);
2. ``tokenize(sep + " " + " ".join(batch))``: the ids of every candidate in mid form, in
   batches of ``BATCH_WORDS`` (512) so no text exceeds a model's context;
3. ``detokenize(id_1, sep, id_2, sep, …)`` of each batch: split on the separator's text, each
   token's text; walking the candidates along those texts gives the words that took exactly
   one token;
4. **additivity**: ``tokenize`` of the kept words in a seeded random order, a batch at a time,
   must count one token a word; a group that does not is halved and each half retried, down to
   single words, which are dropped (2·log2(n) calls per offender); after a drop the rest is
   verified again in another order (at most 3 rounds);
5. **lead words**: up to ``LEAD_TRIES`` kept words, one call each, until ``LEAD_WORDS`` are one
   token at the start of a text (and after a ``"\\n"``, how the completions API joins turns).

Fewer than ``MIN_WORDS`` words, or no lead word, is a :class:`~veeksha.errors.ConfigurationError`
(exit 2) saying to use ``hf`` or ``builtin``. The result is deterministic for a given server
tokenizer, and cached (``TokenizerCache``) under the server's *fingerprint*: the ids of a fixed
probe text, asked again at each start-up (one call), so a changed model rebuilds it.

**Chat template** (``measure_chat_template``, for chat clients, at every start-up and never
cached: a server may change its template and not its tokenizer): the server counts
conversations of 1, 2 and 3 user turns (user; user, assistant, user; …) as its chat endpoint
does (``ServerTokenizer.chat_encode``: vLLM's ``/tokenize`` chat form, ``{"model", "messages",
"add_generation_prompt": true}``; llama.cpp's ``/apply-template`` then ``/tokenize`` of the
rendered text), each message a lead word and ``TEMPLATE_WORDS`` − 1 calibrated words (their
count known by construction). The first count's excess over the contents is the template's
tokens a prompt, the growth of the excess each further turn its tokens a turn
(``template_of``); a refusal (a server without the chat form or ``/apply-template``; asked
no further) or a growth that is not the same every turn is a reason instead, and the
``prompt_length`` check estimates the template from the usage as before.

Worked example: a server that splits ``"baba"`` into ``" ba" + "ba"`` but keeps ``" bebe"``
whole answers step 2 with ids for ``" ba", "ba", " bebe"``; step 3 reads ``"ba", "ba", "bebe"``,
so ``baba`` took two tokens (dropped) and ``bebe`` one (kept).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from veeksha.errors import ConfigurationError
from veeksha.generate.tokenizer import BUILTIN_VOCAB, Vocabulary

__all__ = [
    "BATCH_WORDS",
    "CACHE_ENV",
    "LEAD_TRIES",
    "LEAD_WORDS",
    "MIN_WORDS",
    "CalibratedTokenizer",
    "Calibration",
    "ChatTemplate",
    "TextTokenizer",
    "TokenizerCache",
    "calibrate",
    "calibrated_tokenizer",
    "default_cache_dir",
    "measure_chat_template",
    "template_of",
]

MIN_WORDS = 64
#: Candidates per call: a text of 512 words is at most ~1,500 tokens, within any model's context
#: (vLLM refuses to tokenize a text longer than the model's max_model_len).
BATCH_WORDS = 512
LEAD_WORDS = 16
LEAD_TRIES = 48
SEPARATORS = ("\n", "|", "#")
CACHE_ENV = "VEEKSHA_CACHE_DIR"
_CACHE_VERSION = 1
_VERIFY_SEED = 0
_VERIFY_ROUNDS = 3


class TextTokenizer(Protocol):
    """What calibration needs of a tokenizer: text to ids and back."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True, slots=True)
class Calibration:
    """The calibrated vocabulary of one server tokenizer (see the module docstring).

    ``words`` and ``ids``: the kept words (candidate order) and their mid-form token ids;
    ``lead``: the words that are also one token at the start of a text; ``overhead``: tokens
    added to any text; ``candidates``: how many were tried; ``calls``: how many calls it took.
    """

    words: tuple[str, ...]
    ids: tuple[int, ...]
    lead: tuple[str, ...]
    overhead: int
    candidates: int
    calls: int

    @property
    def vocabulary(self) -> Vocabulary:
        return Vocabulary(self.words, self.lead)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        return cls(
            tuple(str(w) for w in data["words"]),
            tuple(int(i) for i in data["ids"]),
            tuple(str(w) for w in data["lead"]),
            int(data["overhead"]),
            int(data["candidates"]),
            int(data["calls"]),
        )


class _Counter:
    """The server's counts with its overhead removed, and the calls made."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls = 0
        self.overhead: list[int] = []
        self.overhead = self.ids("")

    def ids(self, text: str) -> list[int]:
        self.calls += 1
        ids = self.tokenizer.encode(text)
        k = len(self.overhead)
        if k and ids[:k] == self.overhead:
            return ids[k:]
        if k and ids[-k:] == self.overhead:
            return ids[:-k]
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        self.calls += 1
        return self.tokenizer.decode(ids)


def calibrate(
    tokenizer: TextTokenizer,
    candidates: Sequence[str] = BUILTIN_VOCAB,
    min_words: int = MIN_WORDS,
) -> Calibration:
    """The calibrated vocabulary of ``tokenizer`` (a server's; see the module docstring)."""
    server = _Counter(tokenizer)
    sep_id, sep_text, sep_written = _separator(server)
    # 2-3: every candidate in mid form, then each token's text (a batch at a time)
    single: dict[str, int] = {}
    for start in range(0, len(candidates), BATCH_WORDS):
        batch = candidates[start : start + BATCH_WORDS]
        ids = server.ids(f"{sep_text} " + " ".join(batch))
        if not ids or ids[0] != sep_id:
            raise _too_few("the separator did not stay one token before the words")
        ids = ids[1:]
        interleaved: list[int] = []
        for token in ids:
            interleaved += (token, sep_id)
        texts = [t.strip() for t in server.decode(interleaved[:-1]).split(sep_written)]
        if len(texts) != len(ids):
            raise _too_few(
                f"its /detokenize gave {len(texts)} texts for {len(ids)} tokens between separators"
            )
        single.update(_single_token_words(batch, ids, texts, set(single.values())))
    # 4: additivity, in a seeded random order (again after dropping offenders: a word may
    # have hidden another's)
    order = list(single)
    rng = random.Random(_VERIFY_SEED)
    for _ in range(_VERIFY_ROUNDS):
        rng.shuffle(order)
        additive = [
            word
            for start in range(0, len(order), BATCH_WORDS)
            for word in _additive(server, sep_text, order[start : start + BATCH_WORDS])
        ]
        if len(additive) == len(order):
            break
        order = additive
    else:
        raise _too_few(f"its counts did not add up over words in {_VERIFY_ROUNDS} rounds")
    kept = set(order)
    words = tuple(w for w in single if w in kept)
    if len(words) < min_words:
        raise _too_few(
            f"only {len(words)} of {len(candidates)} candidate words are one token of it "
            f"(at least {min_words} are needed)"
        )
    # 5: lead words
    lead = _lead_words(server, words, newline=sep_text == "\n")
    if not lead:
        raise _too_few(
            f"none of {min(LEAD_TRIES, len(words))} words is one token at a text's start"
        )
    return Calibration(
        words,
        tuple(single[w] for w in words),
        lead,
        len(server.overhead),
        len(candidates),
        server.calls,
    )


def _too_few(why: str) -> ConfigurationError:
    return ConfigurationError(
        f"client.tokenizer type server: cannot calibrate a vocabulary on the server's tokenizer: "
        f"{why}. Prompts could not be sized in its tokens; use client.tokenizer type hf (the "
        "model's tokenizer.json) or builtin"
    )


def _separator(server: _Counter) -> tuple[int, str, str]:
    """A one-token separator: its id, its text, and the text the server writes back for it."""
    for text in SEPARATORS:
        ids = server.ids(text)
        if len(ids) == 1:
            written = server.decode(ids)
            written = written.strip() or written  # (a newline is its own text)
            if any(not "a" <= c <= "z" for c in written):  # (never inside a word's text)
                return ids[0], text, written
    raise _too_few(f"none of {', '.join(map(repr, SEPARATORS))} is one token of it")


def _single_token_words(
    candidates: Sequence[str], ids: Sequence[int], texts: Sequence[str], seen_ids: set[int]
) -> dict[str, int]:
    """The candidates that took exactly one token (its id, not among ``seen_ids``), walking
    the tokens' texts."""
    single: dict[str, int] = {}
    k = 0
    for word in candidates:
        start, acc = k, ""
        while acc != word:
            if k >= len(texts) or not word.startswith(acc + texts[k]):
                raise _too_few(
                    f"its tokens do not follow the words (at {word!r}, token text "
                    f"{texts[k] if k < len(texts) else None!r})"
                )
            acc += texts[k]
            k += 1
        if k - start == 1 and ids[start] not in seen_ids:
            single[word] = ids[start]
            seen_ids.add(ids[start])
    return single


def _additive(server: _Counter, sep_text: str, words: list[str]) -> list[str]:
    """The words of ``words`` that count one token each among the others (halving offenders)."""
    if not words:
        return []
    count = len(server.ids(f"{sep_text} " + " ".join(words))) - 1
    if count == len(words):
        return words
    if len(words) == 1:
        return []
    half = len(words) // 2
    return _additive(server, sep_text, words[:half]) + _additive(server, sep_text, words[half:])


def _lead_words(server: _Counter, words: Sequence[str], newline: bool) -> tuple[str, ...]:
    lead: list[str] = []
    for word in words[:LEAD_TRIES]:
        text, expected = (f"{word}\n{word}", 3) if newline else (word, 1)
        if len(server.ids(text)) == expected:
            lead.append(word)
            if len(lead) == LEAD_WORDS:
                break
    return tuple(lead)


# ----------------------------------------------------------------------------- the chat template

#: Words in each message of the template's measurement (a lead word, then mid-form words).
TEMPLATE_WORDS = 8
#: Conversations measured: 1, 2 and 3 user turns (user; user, assistant, user; and one more).
TEMPLATE_TURNS = 3


class ChatTokenizer(Protocol):
    """What the template's measurement needs: a chat request's ids, or why it was refused (a
    clause naming the endpoint, e.g. ``its /tokenize refused a chat request (…)``)."""

    def chat_encode(self, messages: Sequence[dict[str, str]]) -> list[int] | str: ...


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """The server's chat template in its own tokens, measured as its chat endpoint counts.

    ``prompt``: the tokens a prompt of one user message counts beside its content (the
    template's opening, the message's wrapping and the generation prompt); ``turn``: the tokens
    each later turn adds beside its two new contents (the answer's and the new message's
    wrapping). ``counts``: the server's counts of conversations of 1, 2 and 3 user turns;
    ``contents``: their contents' tokens (calibrated words: exact by construction).
    """

    prompt: int
    turn: int
    counts: tuple[int, ...]
    contents: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt,
            "turn_tokens": self.turn,
            "counts": list(self.counts),
            "contents": list(self.contents),
        }


def template_of(counts: Sequence[int], contents: Sequence[int]) -> ChatTemplate | str:
    """The template of the counts of conversations of 1, 2, … user turns (``counts``) whose
    contents are ``contents`` tokens: ``prompt`` = the first's excess; ``turn`` = how much
    each further turn's excess grows, which must be the same at every turn (else the reason,
    a string: the template is not a constant a turn, and no number of tokens describes it)."""
    if len(counts) != len(contents) or len(counts) < 2:
        raise ValueError("template_of needs the counts of two conversations at least")
    excess = [count - content for count, content in zip(counts, contents, strict=True)]
    steps = [b - a for a, b in itertools.pairwise(excess)]
    if excess[0] < 0 or any(step < 0 for step in steps):
        return (
            f"the chat form counts fewer tokens than the messages' contents (counts "
            f"{list(counts)} for contents of {list(contents)} tokens)"
        )
    if len(set(steps)) > 1:
        return (
            "the template does not add the same tokens every turn ("
            + ", ".join(f"{step} at turn {k}" for k, step in enumerate(steps, 2))
            + ")"
        )
    return ChatTemplate(excess[0], steps[0], tuple(counts), tuple(contents))


def measure_chat_template(client: ChatTokenizer, calibration: Calibration) -> ChatTemplate | str:
    """The server's chat template (``template_of``), from ``TEMPLATE_TURNS`` chat calls of
    calibrated words (each message a lead word then mid-form words, ``TEMPLATE_WORDS``
    tokens, as prompts are built); the reason, a string, when the server refuses a chat
    request (the first refusal, as ``chat_encode`` words it) or its counts make no constant
    template."""
    words, lead = calibration.words, calibration.lead
    messages: list[dict[str, str]] = []
    counts: list[int] = []
    contents: list[int] = []
    for turn in range(TEMPLATE_TURNS):
        if turn:
            messages.append({"role": "assistant", "content": _message(words, lead, 2 * turn - 1)})
        messages.append({"role": "user", "content": _message(words, lead, 2 * turn)})
        ids = client.chat_encode(messages)
        if isinstance(ids, str):
            return ids  # (the first refusal: nothing more is asked)
        counts.append(len(ids))
        contents.append(TEMPLATE_WORDS * len(messages))
    return template_of(counts, contents)


def _message(words: Sequence[str], lead: Sequence[str], k: int) -> str:
    """The ``k``-th message's text: a lead word, then ``TEMPLATE_WORDS`` − 1 calibrated words."""
    rest = TEMPLATE_WORDS - 1
    body = [words[(k * rest + i) % len(words)] for i in range(rest)]
    return " ".join([lead[k % len(lead)], *body])


class CalibratedTokenizer:
    """A server tokenizer, as far as prompts built from its calibrated vocabulary go.

    ``count``/``encode``/``decode`` are local and exact for texts of calibrated words; they do
    not know the server's other tokens, so veeksha does not count answers with it (output
    lengths come from the server's usage, or the content chunks). ``client`` is the server's
    tokenizer endpoint, for the checks after the run.
    """

    name = "server"
    counts_text = False

    def __init__(
        self,
        calibration: Calibration,
        client: Any,
        fingerprint: Sequence[int],
        source: str = "calibrated",
    ) -> None:
        self.calibration = calibration
        self.source = source  # "calibrated" (now) or "cache"
        self.vocabulary = calibration.vocabulary
        self.client = client
        self.fingerprint = list(fingerprint)
        #: the server's chat template (``measure_chat_template``), measured at set-up for chat
        #: clients; the reason it could not be (a string); None when not asked
        self.chat_template: ChatTemplate | str | None = None
        self._index = dict(zip(calibration.words, calibration.ids, strict=True))
        self._words = {i: w for w, i in self._index.items()}

    def count(self, text: str) -> int:
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        index = self._index
        return [index.get(w, -1) for w in text.split()]

    def decode(self, ids: Sequence[int]) -> str:
        words = self._words
        return " ".join(words.get(i, "") for i in ids)


# ------------------------------------------------------------------------------------- the cache


def default_cache_dir() -> Path:
    """``$VEEKSHA_CACHE_DIR``, else ``$XDG_CACHE_HOME/veeksha``, else ``~/.cache/veeksha``;
    calibrations go to its ``tokenizers/`` folder."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser() / "tokenizers"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "veeksha" / "tokenizers"


class TokenizerCache:
    """Calibrations on disk, one JSON file per (endpoint, model, request shape), valid while the
    server's fingerprint and the candidate words are the same. Unreadable or stale files are
    rebuilt; a cache that cannot be written costs only the next run's calibration."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = default_cache_dir() if directory is None else directory

    def path(self, endpoint: str, model: str | None, form: str | None) -> Path:
        key = hashlib.sha256(f"{endpoint}\0{model}\0{form}".encode()).hexdigest()[:32]
        return self.directory / f"{key}.json"

    def load(
        self, path: Path, fingerprint: Sequence[int], candidates: Sequence[str]
    ) -> Calibration | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if (
                data.get("version") == _CACHE_VERSION
                and data.get("fingerprint") == list(fingerprint)
                and data.get("candidates") == _digest(candidates)
            ):
                return Calibration.from_json(data["calibration"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        return None

    def store(
        self,
        path: Path,
        fingerprint: Sequence[int],
        candidates: Sequence[str],
        calibration: Calibration,
        about: dict[str, Any],
    ) -> str | None:
        """Write the calibration; the reason it could not be written, else None."""
        data = {
            "version": _CACHE_VERSION,
            **about,
            "fingerprint": list(fingerprint),
            "candidates": _digest(candidates),
            "calibration": calibration.to_json(),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data), encoding="utf-8")
            tmp.replace(path)
        except OSError as exc:
            return f"{path}: {exc.strerror or exc}"
        return None


def _digest(candidates: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(candidates).encode()).hexdigest()[:16]


def calibrated_tokenizer(
    client: Any,
    use_cache: bool = True,
    cache: TokenizerCache | None = None,
    log: Callable[[str], None] | None = None,
    candidates: Sequence[str] = BUILTIN_VOCAB,
    place: str | None = None,
) -> CalibratedTokenizer:
    """The calibrated tokenizer of a server tokenizer ``client`` (a ``ServerTokenizer``): from
    the cache when the server's fingerprint matches, else calibrated now (and cached).
    ``TargetError`` when the server fails a call, ``ConfigurationError`` when too few words
    calibrate. ``place`` names the server in the cache's key instead of its endpoint (a server
    veeksha starts on a free port has another endpoint every run: ``managed vllm``)."""
    say = log or (lambda _: None)
    fingerprint = client.fingerprint()
    say(f"server tokenizer: {client.endpoint} answers in the {client.format} shape")
    cache = cache or TokenizerCache()
    path = cache.path(place or client.endpoint, client.model, client.format)
    found = cache.load(path, fingerprint, candidates) if use_cache else None
    if found is not None:
        say(f"server tokenizer: calibration reused from {path} ({len(found.words)} words)")
        return CalibratedTokenizer(found, client, fingerprint, "cache")
    calibration = calibrate(client, candidates)
    say(
        f"server tokenizer: calibrated {len(calibration.words)} of {calibration.candidates} "
        f"words as one token each ({len(calibration.lead)} can open a text; "
        f"{calibration.calls} calls)"
    )
    if use_cache:
        about = {"endpoint": client.endpoint, "model": client.model, "format": client.format}
        if place:
            about["server"] = place
        failed = cache.store(path, fingerprint, candidates, calibration, about)
        if failed:
            say(f"server tokenizer: calibration not cached ({failed})")
    return CalibratedTokenizer(calibration, client, fingerprint)
