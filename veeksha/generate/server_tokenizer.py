"""The target's own tokenizer endpoints, called over HTTP at set-up and after the run.

Two request shapes exist, both at the server's root (not under ``/v1``):

========== =============================================== ==========================
format     ``POST /tokenize``                              ``POST /detokenize``
========== =============================================== ==========================
vllm       ``{"model", "prompt", "add_special_tokens"}``   ``{"model", "tokens"}``
           → ``{"tokens": [...], "count": N}``             → ``{"prompt": text}``
llama_cpp  ``{"model", "content", "add_special"}``         ``{"model", "tokens"}``
           → ``{"tokens": [...]}``                         → ``{"content": text}``
========== =============================================== ==========================

``chat_encode`` (how ``veeksha.generate.calibration`` measures the chat template) counts
messages as the chat endpoint does. vLLM's ``/tokenize`` takes a chat request, ``{"model",
"messages", "add_generation_prompt": true}`` → ``{"tokens", "count"}`` with its chat template
applied. llama.cpp's takes only ``content``, so there it is two calls, as llama-server's
``/v1/chat/completions`` does it: ``POST /apply-template`` ``{"messages"}`` → ``{"prompt"}``
(the model's chat template rendered, generation prompt included), then ``/tokenize`` of that
text with ``"add_special": true, "parse_special": true``, the flags its chat path tokenizes the
rendered prompt with (a BOS the vocabulary adds, which the rendering leaves out; the template's
special tokens read as tokens, not as text). A refusal (an HTTP error, say a llama-server
without ``/apply-template``, or an answer without tokens) is returned as a reason, not an error.

Every body names the client's model (``"model"`` first) when it has one, in both shapes:
llama-server serving one model ignores it, and in router mode (several models, each in a child
process) answers 400 "model name is missing from the request" to a body without it.

SGLang serves the vLLM shape (its ``/tokenize`` and ``/detokenize`` follow vLLM's). TGI offers
``POST /tokenize`` with ``{"inputs"}`` answering a list of ``{"id", "text"}`` and no
``/detokenize``: use ``client.tokenizer`` type ``hf`` with the model's tokenizer.json for TGI.

``format="auto"`` finds the shape with the first call (a fixed probe text): the vLLM shape,
then, when that answer is a 400/422 or a 2xx without tokens (llama.cpp answers ``{"tokens": []}``
to a body without ``content``), the llama.cpp shape. The probe's token ids are the server
tokenizer's *fingerprint* (``veeksha.generate.calibration`` keys its cache on them).

Synchronous on purpose (``veeksha.net.fetch``): these calls happen before t0 or after the run,
never on the traffic loop. Every failure is a :class:`~veeksha.errors.TargetError` (exit 2 at
set-up); after one, every later call fails at once with the same error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from veeksha.errors import TargetError
from veeksha.net import Answer, fetch, setup_timeout
from veeksha.redact import READ_WINDOW, Redactors, header_secrets

__all__ = ["FORMATS", "PROBE_TEXT", "SERVER_TOKENIZER_TIMEOUT_S", "ServerTokenizer"]

SERVER_TOKENIZER_TIMEOUT_S = 30.0
#: The fixed text whose token ids fingerprint a server's tokenizer.
PROBE_TEXT = "veeksha checks the tokenizer: 1234 naive words, zebra quartz; Ünïcode ok?"
Format = Literal["vllm", "llama_cpp"]
FORMATS: tuple[Format, ...] = ("vllm", "llama_cpp")
_QUOTED = 120  # characters of a failed answer quoted in the message
_FIX = "Check that the target offers /tokenize, or use client.tokenizer type builtin or hf"


class ServerTokenizer:
    """A client of the target's ``/tokenize`` and ``/detokenize`` (see the module docstring).

    The API key goes with the calls only when ``make_tokenizer`` found the endpoint on the
    target's own origin. ``format`` None finds the shape on the first call.
    """

    name = "server"

    def __init__(
        self,
        endpoint: str,
        model: str | None,
        timeout: float | None = None,
        api_key: str | None = None,
        format: Format | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.detokenize_endpoint = endpoint.rsplit("/", 1)[0] + "/detokenize"
        #: llama.cpp's chat template renderer, beside /tokenize (``chat_encode``)
        self.apply_template_endpoint = endpoint.rsplit("/", 1)[0] + "/apply-template"
        self.model = model
        self.timeout = setup_timeout(SERVER_TOKENIZER_TIMEOUT_S) if timeout is None else timeout
        self.format: Format | None = format
        self.calls = 0
        self._api_key = api_key
        self._headers = headers  # the client's own (client.headers), beside its key
        self._redact = Redactors(header_secrets(api_key, headers))
        self._broken: TargetError | None = None

    def __repr__(self) -> str:
        return f"ServerTokenizer({self.endpoint!r}, {self.model!r}, {self.format!r})"

    # ------------------------------------------------------------------------------ public API

    def fingerprint(self) -> list[int]:
        """The ids of ``PROBE_TEXT`` (finds the request shape first when it is not known)."""
        if self.format is None:
            return self._detect()
        return self.encode(PROBE_TEXT)

    def check(self) -> None:
        """Tokenize and detokenize a short text once (at set-up: a failure here is exit 2)."""
        self.decode(self.fingerprint())

    def encode(self, text: str) -> list[int]:
        if self.format is None:
            self._detect()
        return self._tokens(self._post(self.endpoint, self._tokenize_body(text)))

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def chat_encode(self, messages: Sequence[dict[str, str]]) -> list[int] | str:
        """The ids of ``messages`` in the server's chat template, generation prompt included,
        as its chat endpoint counts them (the module docstring: vLLM's chat form of /tokenize,
        llama.cpp's /apply-template then /tokenize); the reason, a clause, when the server
        refuses a request or answers no tokens. Unlike the other calls a refusal leaves the
        client usable."""
        if self.format is None:
            self._detect()
        if self.format == "llama_cpp":
            return self._llama_cpp_chat_encode(messages)
        body = self._with_model({"messages": list(messages), "add_generation_prompt": True})
        answer = self._send(self.endpoint, body)
        tokens = _nonempty_tokens(answer)
        if tokens is not None:
            return tokens
        return f"its /tokenize refused a chat request ({self._refusal(answer)})"

    def decode(self, ids: Sequence[int]) -> str:
        if self.format is None:
            self._detect()
        url = self.detokenize_endpoint
        key = "content" if self.format == "llama_cpp" else "prompt"
        text = self._post(url, self._with_model({"tokens": list(ids)})).get(key)
        if not isinstance(text, str):
            raise self._fail(f"server detokenizer at {url}: no {key!r} text in the answer")
        return text

    # ------------------------------------------------------------------------------- internals

    def _llama_cpp_chat_encode(self, messages: Sequence[dict[str, str]]) -> list[int] | str:
        """llama.cpp: ``/apply-template`` renders the messages, ``/tokenize`` counts the text
        with the chat path's flags (``add_special``, ``parse_special``)."""
        url = self.apply_template_endpoint
        answer = self._send(url, self._with_model({"messages": list(messages)}))
        if not answer.ok:
            return f"its /apply-template refused a chat request ({self._refusal(answer)})"
        try:
            data = answer.json()
        except ValueError:
            data = None
        prompt = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(prompt, str):
            return "its /apply-template answered no 'prompt' text for a chat request"
        body = self._with_model({"content": prompt, "add_special": True, "parse_special": True})
        answer = self._send(self.endpoint, body)
        tokens = _nonempty_tokens(answer)
        if tokens is not None:
            return tokens
        return (
            "its /tokenize did not count the prompt /apply-template rendered "
            f"({self._refusal(answer)})"
        )

    def _refusal(self, answer: Answer) -> str:
        """Why ``answer`` has no tokens: its status and (redacted) text, or none in a 2xx."""
        if answer.ok:
            return "no tokens in the answer"
        text = self._redact(answer.body[:READ_WINDOW].decode("utf-8", "replace"), _QUOTED)
        return f"HTTP {answer.status} {answer.reason}: {text!r}"

    def _tokenize_body(self, text: str, form: Format | None = None) -> dict[str, object]:
        if (form or self.format) == "llama_cpp":
            return self._with_model({"content": text, "add_special": False})
        return self._with_model({"prompt": text, "add_special_tokens": False})

    def _with_model(self, body: dict[str, object]) -> dict[str, object]:
        """``body`` naming the model first, in either shape: vLLM checks it; llama-server
        ignores it when it serves one model and, in router mode (several models), answers 400
        "model name is missing from the request" without it."""
        return body if self.model is None else {"model": self.model, **body}

    def _tokens(self, data: dict[str, Any]) -> list[int]:
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise self._fail(f"server tokenizer at {self.endpoint}: no 'tokens' list of ints")
        return tokens

    def _detect(self) -> list[int]:
        """Try the vLLM shape, then the llama.cpp one; returns the probe's ids."""
        answer = self._send(self.endpoint, self._tokenize_body(PROBE_TEXT, "vllm"))
        tokens = _nonempty_tokens(answer)
        if tokens is None and (answer.status in (400, 422) or _json_object(answer)):
            answer = self._send(self.endpoint, self._tokenize_body(PROBE_TEXT, "llama_cpp"))
            tokens = _nonempty_tokens(answer)
            if tokens is not None:
                self.format = "llama_cpp"
                return tokens
            if answer.ok:
                raise self._fail(
                    f"server tokenizer: POST {self.endpoint} gave no tokens for a text in either "
                    'the vLLM ({"prompt"}) or the llama.cpp ({"content"}) shape. ' + _FIX
                )
        if tokens is None:
            self._json(self.endpoint, answer)  # raises: the answer says what went wrong
            raise self._fail(f"server tokenizer at {self.endpoint}: no 'tokens' list of ints")
        self.format = "vllm"
        return tokens

    def _fail(self, message: str) -> TargetError:
        self._broken = TargetError(" ".join(message.split()))
        return self._broken

    def _send(self, url: str, body: dict[str, object]) -> Answer:
        if self._broken is not None:
            raise self._broken
        self.calls += 1
        try:
            return fetch(
                "POST",
                url,
                json_body=body,
                api_key=self._api_key,
                headers=self._headers,
                timeout_s=self.timeout,
                fix=_FIX,
            )
        except TargetError as exc:
            self._broken = exc
            raise

    def _post(self, url: str, body: dict[str, object]) -> dict[str, Any]:
        return self._json(url, self._send(url, body))

    def _json(self, url: str, answer: Answer) -> dict[str, Any]:
        redact = self._redact
        if not answer.ok:
            text = redact(answer.body[:READ_WINDOW].decode("utf-8", "replace"), _QUOTED)
            raise self._fail(
                f"server tokenizer: POST {url} answered HTTP {answer.status} "
                f"{answer.reason}: {text!r}. {_FIX}"
            )
        try:
            data = answer.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            text = redact(answer.body[:READ_WINDOW].decode("utf-8", "replace"), _QUOTED)
            raise self._fail(
                f"server tokenizer: POST {url} answered no JSON object ({text!r}). {_FIX}"
            )
        return data


def _json_object(answer: Answer) -> bool:
    """Whether ``answer`` is a 2xx with a JSON object (another shape may be the right one)."""
    try:
        return answer.ok and isinstance(answer.json(), dict)
    except ValueError:
        return False


def _nonempty_tokens(answer: Answer) -> list[int] | None:
    """The answer's non-empty ``tokens`` list of ints, else None."""
    if not answer.ok:
        return None
    try:
        data = answer.json()
    except ValueError:
        return None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if isinstance(tokens, list) and tokens and all(type(t) is int for t in tokens):
        return tokens
    return None
