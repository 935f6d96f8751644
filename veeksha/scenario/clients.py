"""Clients: how requests are sent (OpenAI chat and completions, named targets) and how their
prompt tokens are counted (tokenizers)."""

import json
import re
import string
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from veeksha.scenario.base import KeyProblem, StrictModel, empty_dict, factory

# ------------------------------------------------------------------------------------- tokenizers


class BuiltinTokenizer(StrictModel, defer_build=False):
    """The shipped deterministic tokenizer; the simulator counts with it, so counts are exact."""

    type: Literal["builtin"] = "builtin"


class HfTokenizer(StrictModel):
    """A local Hugging Face tokenizer.json (or a folder holding one); never downloaded."""

    type: Literal["hf"] = "hf"
    path: str = Field(..., description="Path of tokenizer.json or of a folder containing it.")


class ServerTokenizer(StrictModel):
    """The target's own /tokenize and /detokenize (vLLM, llama.cpp): a vocabulary of words that
    are one server token each is calibrated once at start-up (cached across runs), so prompts are
    exact in the server's tokens and nothing on the traffic path calls the server."""

    type: Literal["server"] = "server"
    endpoint: str | None = Field(
        None, description="URL of /tokenize; default: api_base without /v1, plus /tokenize."
    )
    format: Literal["auto", "vllm", "llama_cpp"] = Field(
        "auto",
        description='Request shape: vllm ({"prompt"}), llama_cpp ({"content"}); auto tries '
        "vllm, then llama_cpp.",
    )
    cache: bool = Field(
        True,
        description="Reuse the calibration of an earlier run while the server tokenizes a "
        "probe text the same ($VEEKSHA_CACHE_DIR, default ~/.cache/veeksha/tokenizers).",
    )


Tokenizer = Annotated[BuiltinTokenizer | HfTokenizer | ServerTokenizer, Field(discriminator="type")]


# ----------------------------------------------------------------------------------------- client


def _object_or_json_string(schema: dict[str, Any]) -> None:
    """JSON Schema of a mapping that may also be given as a JSON string (as upstream allows)."""
    schema.pop("type", None)
    schema.pop("additionalProperties", None)
    schema["anyOf"] = [{"type": "object"}, {"type": "string", "description": "A JSON object."}]


#: The variable ``api_key_env`` names unless told otherwise (unset: no key is sent).
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


#: Where a scenario's API key goes (``api_base_problem``'s ``key_home``).
SCENARIO_KEY_HOME = "the variable named by api_key_env"


def api_base_problem(value: str, key_home: str = SCENARIO_KEY_HOME) -> str | None:
    """Why ``value`` cannot be an OpenAI API's base URL (None: it can): not http(s), no host, a
    host with a character no host name holds (a space, ``%``, ``$``...) or a non-ASCII character
    (written IDNA-encoded, ``xn--``: the message gives that form), a port that is not
    one, a space or control character anywhere, a query or fragment (the paths are appended to
    it), or credentials (which every file of the run would quote: the key goes in ``key_home``,
    a scenario's ``api_key_env`` variable; a microbenchmark, which has no such key, names its
    own). A password is masked wherever the value is quoted."""
    example = "e.g. http://127.0.0.1:8000/v1"
    shown = _masked(value)
    if not value.lower().startswith(("http://", "https://")):
        return f"must be an http:// or https:// URL, {example} (got {shown!r})"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises for a port out of range or not a number)
    except ValueError as error:
        return f"is not a valid URL ({error}), {example} (got {shown!r})"
    host = parts.hostname
    if not host:
        return f"has no host, {example} (got {shown!r})"
    wrong = _not_in_host_name(host)
    if wrong is not None:
        return (
            f"has a host that is not one ({wrong!r} in {host!r}: a host name is letters, "
            f"digits, '-', '.' and '_'), {example} (got {shown!r})"
        )
    odd = next((ch for ch in value if ch.isspace() or not ch.isprintable()), None)
    if odd is not None:
        return (
            f"holds {odd!r}: a URL holds no space or control character, {example} (got {shown!r})"
        )
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        return f"takes no query or fragment: request paths are appended to it, {example}"
    if parts.username is not None or parts.password is not None:
        return (
            "must not hold credentials (user:password@): the run's files would quote them; "
            f"put the key in {key_home} (got {shown!r})"
        )
    if not host.isascii():
        return _not_ascii_host(value, host, shown)
    return None


def _not_ascii_host(value: str, host: str, shown: str) -> str:
    """The refusal of an internationalised host name (``bücher.example``), naming its ASCII
    (IDNA, punycode) form when Python's codec can encode it.

    Refused rather than encoded here: the name resolves the same either way, but the ``Host``
    header veeksha's plain-http client and its start-up probe write is the URL's own text, which
    must be ASCII (it went out as Latin-1 bytes, or not at all); and which IDNA encoding a
    server's name uses (2003 or 2008) is the user's to say, not to be guessed."""
    letter = next(ch for ch in host if not ch.isascii())
    parts = urlsplit(value)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    name, colon, port = hostport.partition(":")  # (as written: hostname is lower-cased)
    try:
        ascii_name = name.encode("idna").decode("ascii")
    except UnicodeError:
        return (
            f"has a host with a non-ASCII character ({letter!r} in {host!r}): write the host "
            f"IDNA-encoded (xn--...) (got {shown!r})"
        )
    fixed = _masked(parts._replace(netloc=f"{userinfo}{at}{ascii_name}{colon}{port}").geturl())
    return (
        f"has a host with a non-ASCII character ({letter!r} in {host!r}): write the host "
        f"IDNA-encoded, {fixed!r} (got {shown!r})"
    )


def _not_in_host_name(host: str) -> str | None:
    """The first character of ``host`` (``urlsplit``'s ``hostname``) that no host name holds,
    or None. An IPv6 address (it was in brackets: ``urlsplit`` checked it) is left alone; a
    letter may be any script's here (``_not_ascii_host`` then names its ASCII form)."""
    if ":" in host:
        return None
    return next((ch for ch in host if not (ch.isalnum() or ch in "-._")), None)


# ---------------------------------------------------------------------------------------- headers

#: Characters of an HTTP header name (RFC 9110 ``token``).
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits)

#: Headers veeksha writes itself on every request, lower-cased: ``headers:`` may not set them
#: (the framing, the body's type, the answer's shape are veeksha's). ``User-Agent`` may be set
#: (it replaces ``veeksha``); ``Authorization`` may be set when the client has no API key.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "accept",
        "accept-encoding",
    }
)

#: A ``${NAME}`` in a header value: replaced by the variable ``NAME`` when the run starts.
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def header_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a header's name (None: it can)."""
    if not name:
        return "a header name cannot be empty"
    wrong = next((ch for ch in name if ch not in _TOKEN_CHARS), None)
    if wrong is not None:
        return (
            f"{name!r} is not a header name ({wrong!r}: a name is letters, digits and "
            "!#$%&'*+-.^_`|~)"
        )
    return None


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as a header's value (None: it can); never quotes it (it may
    be a credential)."""
    if "\r" in value or "\n" in value:
        return "its value holds a line break (CR or LF), which would end the header"
    if any(ch != "\t" and not " " <= ch <= "~" for ch in value):
        return "its value holds a control or non-ASCII character: write it ASCII (printable)"
    return None


def headers_as_text(value: Any) -> Any:
    """A ``headers`` mapping as given, each number as its text (``X-Tenant: 42`` is a header's
    text); anything else unchanged, for the model to refuse."""
    if isinstance(value, dict):
        return {
            k: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v
            for k, v in value.items()
        }
    return value


def headers_problem(headers: Mapping[str, str], key_given: str | None) -> tuple[str, str] | None:
    """The first header of ``headers`` that cannot be sent, and why, or None: a name that is no
    HTTP token, a value that is no header's text, a header veeksha writes itself
    (``RESERVED_HEADERS``), ``Authorization`` beside the key ``key_given`` names (``api_key``,
    ``api_key_env``; None: no key given), a name given twice in two cases. The rules of a
    scenario's ``client.headers`` and of a microbenchmark's ``headers``."""
    seen: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        problem = header_name_problem(name) or header_value_problem(value)
        if problem is None and lowered in RESERVED_HEADERS:
            problem = f"veeksha sets {name} itself: remove it"
        if problem is None and lowered == "authorization" and key_given is not None:
            problem = (
                f"the client's {key_given} sends Authorization: Bearer: remove {key_given}, or "
                "this header"
            )
        if problem is None and lowered in seen:
            problem = f"given twice ({seen[lowered]!r} and {name!r}): a header name's case "
            problem += "does not matter; keep one"
        if problem is not None:
            return name, problem
        seen[lowered] = name
    return None


def _masked(value: str) -> str:
    """``value`` with the password of its ``user:password@`` part, if any, shown as ``***``
    (the user part ends at the last ``@`` of the authority, as ``urlsplit`` reads it)."""
    scheme, sep, rest = value.partition("://")
    if not sep:
        return value
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    user, at, host = rest[:cut].rpartition("@")
    if not at or ":" not in user:
        return value
    return f"{scheme}://{user.partition(':')[0]}:***@{host}{rest[cut:]}"


class _OpenAIClientBase(StrictModel):
    api_base: str | None = Field(
        None,
        description="e.g. http://127.0.0.1:8000/v1; absent (and no OPENAI_API_BASE) → built-in "
        "simulator.",
    )
    api_key: SecretStr | None = Field(
        None, description="Bearer token; default from the environment. Never written to outputs."
    )

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        problem = None if value is None else api_base_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    api_key_env: str = Field(
        DEFAULT_KEY_ENV, description="Environment variable holding the API key."
    )
    model: str | None = Field(None, description="Model name sent in each request.")
    request_timeout: float = Field(300.0, gt=0, description="Seconds per request, whole response.")
    ready_timeout: float = Field(
        0.0,
        ge=0,
        description="Seconds to wait before the run for a server that is starting (nothing "
        "listens yet, or it answers 502/503/504 while it loads), as vLLM's "
        "--ready-check-timeout-sec; 0: it must answer at once.",
    )
    min_tokens_param: str | None = Field(
        None, description="Body key forcing a minimum output length, e.g. min_tokens (vLLM)."
    )
    ignore_eos: bool = Field(True, description="Sent as ignore_eos.")
    use_min_tokens_prompt_fallback: bool = Field(
        False, description='Append "Generate at least N tokens." to each prompt.'
    )
    additional_sampling_params: dict[str, Any] = Field(
        default_factory=empty_dict,
        description="Merged into every request body (map or JSON string).",
        json_schema_extra=_object_or_json_string,
    )
    stream: bool = Field(True, description="Stream responses (SSE) and time every chunk.")
    tokenizer: Tokenizer = Field(
        default_factory=factory(BuiltinTokenizer),
        description="How this client's prompt tokens are counted (and its prompts sized).",
    )
    max_in_flight: int | None = Field(
        None, ge=1, description="Cap on requests in flight; ready requests wait in the queue."
    )
    max_retries: int = Field(
        0, ge=0, description="Retries of 429/503 answers with backoff (recorded); 0 = off."
    )
    max_model_len: int | None = Field(
        None,
        ge=2,
        description="The server's context window in tokens (vLLM's --max-model-len): a trace "
        "request whose prompt, history and output exceed it (with clients:, a row is held to "
        "its own client's) is handled by session_generator.oversized; a synthetic session's are "
        "not checked (a turn that outgrows it is sent, and refused by the server). The "
        "built-in simulator serving the "
        "client takes it as its own unless simulator.max_model_len is set.",
    )

    headers: dict[str, str] = Field(
        default_factory=empty_dict,
        description="Headers sent with every request of this client and with its calls to the "
        "server's own address (model check, server tokenizer, /metrics): name → value; "
        "${NAME} in a value is the environment variable NAME, read when the run starts. "
        "Not: Host, Content-Length, Content-Type, Transfer-Encoding, Connection, Accept, "
        "Accept-Encoding, nor Authorization with an API key. A credential's literal value "
        "(a name holding auth, key, token, secret, password, cookie, session...) is written "
        "as ***.",
    )
    session_header: str | None = Field(
        None,
        description="A header carrying each request's session_id (as a router's session "
        "affinity reads it), e.g. X-Session-Id; null: none.",
    )
    request_id_header: str | None = Field(
        None,
        description="A header carrying each request's id, <run folder name>-<request_id>, "
        "which the server's logs and traces then name (vLLM's X-Request-Id), e.g. "
        "X-Request-Id; null: none.",
    )

    @field_validator("headers", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        return headers_as_text(value)

    @model_validator(mode="after")
    def _sendable_headers(self) -> Self:
        has_key = self.api_key is not None or "api_key_env" in self.model_fields_set
        given = None if not has_key else "api_key" if self.api_key is not None else "api_key_env"
        found = headers_problem(self.headers, given)
        if found is not None:
            raise KeyProblem(found[1], ("headers", found[0]))
        seen = {name.lower(): (name, "headers") for name in self.headers}
        for key, example in (
            ("session_header", "X-Session-Id"),
            ("request_id_header", "X-Request-Id"),
        ):
            header = getattr(self, key)
            if header is None:
                continue
            lowered = header.lower()
            problem = header_name_problem(header)
            if problem is None and (lowered in RESERVED_HEADERS or lowered == "authorization"):
                problem = f"veeksha sets {header} itself: choose another name, e.g. {example}"
            if problem is None and lowered in seen:
                problem = f"{seen[lowered][1]} sets {seen[lowered][0]} too: keep one"
            if problem is not None:
                raise KeyProblem(problem, key)
            seen[lowered] = (header, key)
        return self

    @field_validator("additional_sampling_params", mode="before")
    @classmethod
    def _parse_json_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"not a JSON object: {exc.msg}") from exc
        return value


class ChatCompletionsClient(_OpenAIClientBase, defer_build=False):
    """OpenAI /v1/chat/completions: history sent as chat messages."""

    type: Literal["openai_chat_completions"] = "openai_chat_completions"
    max_tokens_param: str = Field(
        "max_completion_tokens", description="Body key carrying the requested output length."
    )
    thinking_opened: bool = Field(
        False,
        description="The chat template opens the model's thinking (DeepSeek-R1's, Qwen3's with"
        " thinking on) and the server has no reasoning parser: each answer's content is"
        " thinking until </think>.",
    )


class CompletionsClient(_OpenAIClientBase):
    """OpenAI /v1/completions: history flattened into one prompt."""

    type: Literal["openai_completions"] = "openai_completions"
    max_tokens_param: str = Field(
        "max_tokens", description="Body key carrying the requested output length."
    )


#: keys of a generating client that mean nothing to an embeddings one, with their defaults
#: (another value is refused; the default is what a resolved config.yaml holds)
_GENERATION_KEYS = {
    "min_tokens_param": None,
    "ignore_eos": True,
    "use_min_tokens_prompt_fallback": False,
}


class EmbeddingsClient(_OpenAIClientBase):
    """OpenAI /v1/embeddings: each request's prompt (a conversation flattened, as a completions
    client sends it) is one input; the answer is its vector, not streamed (docs/scenario.md)."""

    type: Literal["openai_embeddings"] = "openai_embeddings"
    stream: bool = Field(False, description="Embeddings are not streamed: false.")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="How the server writes the vectors: float (JSON numbers) or base64."
    )
    dimensions: int | None = Field(
        None, ge=1, description="Numbers per vector asked of the server (null: the model's own)."
    )

    @model_validator(mode="after")
    def _embeddings_only(self) -> Self:
        if self.stream:
            raise KeyProblem("embeddings are not streamed: remove stream (false)", "stream")
        for key, default in _GENERATION_KEYS.items():
            if getattr(self, key) != default:
                raise KeyProblem(
                    f"an embeddings client generates nothing: remove {key}", key
                )  # fmt: skip
        return self


Client = Annotated[
    ChatCompletionsClient | CompletionsClient | EmbeddingsClient, Field(discriminator="type")
]

_CLIENT_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
DEFAULT_CLIENT = "default"  # the name of the one client of a scenario with ``client:``


class _Named(StrictModel):
    name: str = Field(
        ...,
        pattern=_CLIENT_NAME,
        max_length=64,
        description="How nodes, rows and the summary name this client (letters, digits, _.-).",
    )

    @model_validator(mode="after")
    def _model_with_api_base(self) -> Self:
        if getattr(self, "api_base", None) is not None and not getattr(self, "model", None):
            raise KeyProblem(
                f"client {self.name!r}: required when api_base is set (the model the server "
                "serves)",
                "model",
                "api_base",
            )
        return self


class NamedChatCompletionsClient(ChatCompletionsClient, _Named):
    """One of several targets (``clients:``): a chat-completions client with a name."""


class NamedCompletionsClient(CompletionsClient, _Named):
    """One of several targets (``clients:``): a completions client with a name."""


class NamedEmbeddingsClient(EmbeddingsClient, _Named):
    """One of several targets (``clients:``): an embeddings client with a name."""


NamedClient = Annotated[
    NamedChatCompletionsClient | NamedCompletionsClient | NamedEmbeddingsClient,
    Field(discriminator="type"),
]
#: Any one client of a scenario, named or not.
AnyClient = ChatCompletionsClient | CompletionsClient | EmbeddingsClient
