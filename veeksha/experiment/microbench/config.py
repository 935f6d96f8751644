"""The settings of ``veeksha prefill`` and ``veeksha decode``: flags, a YAML file, or both.

The keys are the flags of the public veeksha CLI (``--api_base``, ``--model``,
``--input_lengths 128 256``, ``--batch_sizes``, ``--samples_per_length``, ``--output_dir``,
``--quick``); a YAML file given with ``--config FILE`` holds the same keys, and flags given
beside it win. ``--quick`` fills the keys left unset with small values (each command in seconds
against the built-in simulator); keys set explicitly always win. Dotted flags reach inside the
``simulator`` mapping: ``--simulator.decode_step_ms 4``.

Every problem is reported at once, as ``file:line:column: key: message`` for the file's keys and
``--flag: message`` for the flags' (exit 2), as the scenario loader does: a problem is named by
what the user wrote, never by the key of the scenario a point runs (``--api_base``, not
``client.api_base``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.generate.images import MAX_SIDE
from veeksha.scenario.base import KeyProblem, NumbersModel, empty_dict
from veeksha.scenario.clients import (
    DEFAULT_KEY_ENV,
    ENV_REFERENCE,
    api_base_problem,
    headers_as_text,
    headers_problem,
)
from veeksha.scenario.messages import unknown_key, value_message
from veeksha.scenario.overrides import format_path
from veeksha.scenario.simulator import SimulatorConfig
from veeksha.scenario.tags import non_text_keys, parse_document, read_text, refuse_tags

__all__ = [
    "BenchConfig",
    "DecodeConfig",
    "MicrobenchConfig",
    "PrefillConfig",
    "load_config",
    "parse_flags",
]

FLAGS_SOURCE = "<flags>"
#: the text of each request of ``veeksha prefill --image_sides`` (tokens) unless given
IMAGE_TEXT_TOKENS = 32

#: keys holding lists: one value after the flag is a one-element list
LIST_KEYS = ("input_lengths", "batch_sizes", "concurrencies", "rates", "labels", "image_sides")


def _realistic() -> SimulatorConfig:
    return SimulatorConfig.model_validate({"preset": "realistic"})


class BenchConfig(NumbersModel):
    """Keys every microbenchmark shares (prefill, decode, stress). A boolean where a number is
    expected (``seed: true``) is refused, by the scenario models' rule (``NumbersModel``)."""

    model_config = ConfigDict(extra="forbid")

    #: the keys ``--quick`` fills when unset, and their values; then the full defaults
    QUICK: ClassVar[dict[str, Any]] = {}
    FULL: ClassVar[dict[str, Any]] = {}

    api_base: str | None = Field(
        None, description="Server under test (…/v1); absent: the built-in simulator."
    )
    model: str | None = Field(None, description="Model name sent in each request.")
    client_type: Literal["openai_chat_completions", "openai_completions", "openai_embeddings"] = (
        Field(
            "openai_chat_completions",
            description="API: openai_completions sends the prompt without a chat template; "
            "openai_embeddings (veeksha prefill only) embeds it.",
        )
    )
    tokenizer: Literal["builtin", "server"] = Field(
        "builtin",
        description="Whose tokens the lengths count: builtin (exact against the simulator) or "
        "server (the target's /tokenize, exact against vLLM, SGLang, llama.cpp).",
    )
    output_dir: str | None = Field(None, description="Base folder of result folders.")
    quick: bool = Field(False, description="Small defaults for the keys left unset (seconds).")
    seed: int = Field(42, ge=0, description="Seed of the prompts (point i uses seed + i).")
    max_model_len: int | None = Field(
        None,
        ge=2,
        description="The server's context (prompt + output tokens); default for the built-in "
        "simulator: simulator.max_model_len; for an endpoint: unchecked.",
    )
    num_workers: int = Field(1, ge=1, description="HTTP worker processes of each point.")
    request_timeout: float = Field(300.0, gt=0, description="Seconds per request.")
    ready_timeout: float = Field(
        0.0,
        ge=0,
        description="Seconds to wait first for a server that is starting (nothing listens yet, "
        "or 502/503/504 while it loads); 0: it must answer at once.",
    )
    plots: bool = Field(True, description="Draw the plot (--no_plots: false).")
    point_plots: bool = Field(False, description="Also draw each point run's own plots.")
    simulator: SimulatorConfig = Field(
        default_factory=_realistic,
        description="The built-in simulator (default preset realistic), used without api_base.",
    )
    #: where each header reading a ``${NAME}`` was given (``load_config``), for its message
    _header_places: dict[str, ScenarioIssue] = PrivateAttr(default_factory=dict)

    headers: dict[str, str] = Field(
        default_factory=empty_dict,
        description="Headers sent with every request and with the model check (a gateway's "
        "X-Api-Key, a tenant), as a scenario's client.headers: name → value, e.g. "
        "'{X-Api-Key: ${MY_KEY}}'; ${NAME} in a value is the environment variable NAME, read "
        "at start. A credential's literal value is written as ***.",
    )

    @field_validator("headers", mode="before")
    @classmethod
    def _numbers_as_text(cls, value: Any) -> Any:
        return headers_as_text(value)

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, value: dict[str, str]) -> dict[str, str]:
        # (the key goes in OPENAI_API_KEY, which an Authorization header replaces, as it does
        # for a scenario's client without api_key or api_key_env)
        found = headers_problem(value, None)
        if found is not None:
            raise KeyProblem(found[1], (found[0],))
        return value

    @field_validator("api_base")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        problem = None if value is None else api_base_problem(value, DEFAULT_KEY_ENV)
        if problem is not None:  # (checked here, so that it is named api_base, not client's)
            raise ValueError(problem)
        return value

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        quick = filled.get("quick") in (True, "true", "True", "1")
        for key, value in cls.defaults(filled, quick).items():
            if filled.get(key) is None:
                filled[key] = value
        return filled

    @classmethod
    def defaults(cls, data: dict[str, Any], quick: bool) -> dict[str, Any]:
        """The values of the keys left unset (``--quick``'s, else the full ones)."""
        return cls.QUICK if quick else cls.FULL

    @model_validator(mode="after")
    def _check_model(self) -> BenchConfig:
        if self.api_base is not None and not self.model:
            raise ValueError(
                f"model: required with api_base {self.api_base}: set it to the model it serves"
            )
        return self

    def resolved_headers(self) -> dict[str, str]:
        """``headers`` with each ``${NAME}`` read from the environment, as a scenario's run
        reads them when it starts (``veeksha.dispatch.settings.resolve_headers``); an unset or
        empty one is a :class:`ScenarioError` at its key (the flag, or the file's line, that
        ``load_config`` recorded), exit 2. A microbenchmark reads them before anything starts;
        each point's run reads them again when it starts (the same environment)."""
        from veeksha.dispatch.settings import HeaderVariableMissing, resolve_header_values

        try:
            return resolve_header_values(self.headers, where="--headers (or the --config file)")
        except HeaderVariableMissing as missing:
            place = self._header_places.get(missing.header)
            if place is None:
                place = ScenarioIssue(f"--headers.{missing.header}", None, None, "", "")
            issue = ScenarioIssue(place.file, place.line, place.column, place.path, missing.message)
            raise ScenarioError([issue]) from None

    def public_dict(self) -> dict[str, Any]:
        """The settings as the results write them: every key, a credential-like header's
        literal value (and one the simulator requires) as ``***``
        (``veeksha.redact.masked_headers``); a ``${NAME}`` stays as written."""
        from veeksha.redact import masked_headers

        data: dict[str, Any] = self.model_dump(mode="json")
        data["headers"] = masked_headers(data["headers"])
        simulator = data["simulator"]
        simulator["required_headers"] = masked_headers(simulator["required_headers"])
        return data

    def context_limit(self) -> int | None:
        """The context the lengths must fit in: ``max_model_len``, else the simulator's when it
        is the target; None (unchecked) for an endpoint without ``max_model_len``."""
        if self.max_model_len is not None:
            return self.max_model_len
        return self.simulator.max_model_len if self.api_base is None else None


def refuse_embeddings(client_type: str, command: str) -> None:
    """A command that measures generated tokens refuses an embeddings client."""
    if client_type == "openai_embeddings":
        raise ValueError(
            f"client_type: openai_embeddings generates nothing, and veeksha {command} measures"
            " what is generated; use veeksha prefill (an embedding's time by input length) or"
            " a scenario with that client"
        )


class MicrobenchConfig(BenchConfig):
    """Keys of the microbenchmarks that measure several prompt lengths (prefill, decode)."""

    input_lengths: list[int] | None = Field(None, description="Prompt lengths in tokens.")

    @model_validator(mode="after")
    def _check_lengths(self) -> MicrobenchConfig:
        if not self.input_lengths:
            raise ValueError("input_lengths: give at least one length")
        if any(n < 1 for n in self.input_lengths):
            raise ValueError(f"input_lengths: every length must be >= 1 (got {self.input_lengths})")
        return self

    def check_context(self, output_tokens: int) -> None:
        """Every input length plus ``output_tokens`` must fit the context (``context_limit``)."""
        limit = self.context_limit()
        too_long = [n for n in self.input_lengths or () if limit and n + output_tokens > limit]
        if too_long:
            raise ValueError(
                f"input_lengths: {too_long} plus {output_tokens} output token(s) exceed the "
                f"model context of {limit} tokens; use shorter lengths (or set max_model_len "
                "to the server's context)"
            )


class PrefillConfig(MicrobenchConfig):
    """``veeksha prefill``: single requests, one at a time, at each input length."""

    QUICK: ClassVar[dict[str, Any]] = {
        "input_lengths": [128, 512, 1024],
        "samples_per_length": 3,
        "output_dir": "prefill_output",
    }
    FULL: ClassVar[dict[str, Any]] = {
        "input_lengths": [128, 256, 512, 1024],
        "samples_per_length": 10,
        "output_dir": "prefill_output",
    }

    samples_per_length: int | None = Field(None, ge=1, description="Requests at each input length.")
    image_sides: list[int] | None = Field(
        None,
        description="Square image sides in pixels: TTFC against the image's size instead of the"
        " prompt's (a point a side, each request one image of its own and a text of the one"
        f" input length, {IMAGE_TEXT_TOKENS} tokens unless given).",
    )

    @classmethod
    def defaults(cls, data: dict[str, Any], quick: bool) -> dict[str, Any]:
        """With ``image_sides`` the text of each request is one length, not the ladder."""
        defaults = super().defaults(data, quick)
        if data.get("image_sides") is not None:
            defaults = defaults | {"input_lengths": [IMAGE_TEXT_TOKENS]}
        return defaults

    @model_validator(mode="after")
    def _fits(self) -> PrefillConfig:
        self.check_context(1)
        if self.image_sides is not None:
            if not self.image_sides or any(not 1 <= s <= MAX_SIDE for s in self.image_sides):
                raise ValueError(
                    f"image_sides: every side must be 1 to {MAX_SIDE} pixels (got"
                    f" {self.image_sides})"
                )
            if len(self.input_lengths or ()) != 1:
                raise ValueError(
                    "input_lengths: with image_sides, give one length (the text sent with each"
                    f" image; got {self.input_lengths})"
                )
            if self.client_type != "openai_chat_completions":
                raise ValueError(
                    "image_sides: images go in chat messages; use client_type"
                    " openai_chat_completions"
                )
        return self


class DecodeConfig(MicrobenchConfig):
    """``veeksha decode``: a batch decoding together, at each batch size and input length."""

    QUICK: ClassVar[dict[str, Any]] = {
        "input_lengths": [128],
        "batch_sizes": [1, 4, 16],
        "output_length": 64,
        "output_dir": "decode_output",
    }
    FULL: ClassVar[dict[str, Any]] = {
        "input_lengths": [128],
        "batch_sizes": [1, 2, 4, 8, 16, 32],
        "output_length": 256,
        "output_dir": "decode_output",
    }

    batch_sizes: list[int] | None = Field(None, description="Requests decoding together.")
    output_length: int | None = Field(
        None, ge=8, description="Output tokens of every request (long enough to overlap)."
    )

    @model_validator(mode="after")
    def _check_batches(self) -> DecodeConfig:
        refuse_embeddings(self.client_type, "decode")
        if not self.batch_sizes:
            raise ValueError("batch_sizes: give at least one batch size")
        if any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes: every batch size must be >= 1 (got {self.batch_sizes})")
        self.check_context(self.output_length or 0)
        return self


Config = TypeVar("Config", bound=BenchConfig)


def parse_flags(args: Sequence[str]) -> dict[str, Any]:
    """``--key v [v ...]`` pairs as a nested mapping: a key with several values is a list, one
    value a scalar (``[a, b]``: a list, ``{a: b}``: a mapping, as in YAML), none ``True``
    (``--no_x``: ``x: false``); dots nest (``--simulator.seed 1``). Dashes in keys read as
    underscores, except in a header's name (``--headers.X-Api-Key V``). Values stay text: the
    model types them."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            raise ScenarioError([ScenarioIssue(FLAGS_SOURCE, None, None, "", _stray(arg))])
        key, eq, inline = arg[2:].partition("=")
        values: list[str] = [inline] if eq else []
        i += 1
        while not eq and i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        parts, header = _key_parts(key)
        value: Any = values if len(values) > 1 else values[0] if values else True
        if isinstance(value, str) and not header:  # (a header's value is its text)
            if value.startswith("[") and value.endswith("]"):
                value = _flow_list(value)
            elif value.startswith("{") and value.endswith("}"):
                value = _flow_mapping(value, ".".join(parts))
        if not values and parts[0].startswith("no_"):
            parts, value = [parts[0][3:], *parts[1:]], False
        holder = out
        *parents, last = parts
        for part in parents:
            holder = holder.setdefault(part, {})
        holder[last] = value
    return out


#: the keys holding headers (name → value): a header's name is kept as written
_HEADER_MAPS = ("headers", "required_headers")


def _key_parts(key: str) -> tuple[list[str], bool]:
    """The parts of a dotted flag key, dashes read as underscores up to a mapping of headers
    (``headers.X-Api-Key``: the header's name as written), and whether it names one header."""
    parts: list[str] = []
    pieces = key.split(".")
    for i, piece in enumerate(pieces):
        parts.append(piece.replace("-", "_"))
        if parts[-1] in _HEADER_MAPS and i + 1 < len(pieces):
            return [*parts, ".".join(pieces[i + 1 :])], True
    return parts, False


def _flow_list(text: str) -> list[str] | str:
    """``[128, 256]`` (as in the --config file) as the values ``128`` and ``256``; other text
    as it is."""
    inner = text[1:-1].strip()
    if not inner:
        return []
    return [part.strip() for part in inner.split(",")] if "[" not in inner else text


def _flow_mapping(text: str, key: str) -> dict[str, Any]:
    """``{X-Api-Key: ${MY_KEY}, X-Tenant: a}`` (a YAML flow mapping, as in the --config file)
    as a mapping. A ``${NAME}`` may stand unquoted (YAML would read its braces as a mapping's):
    it is kept as written. A problem is one line naming the flag, never quoting the text (it
    may hold a credential)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    found: list[str] = []

    def mark(match: re.Match[str]) -> str:
        found.append(match.group(0))
        return f"{_MARK}{len(found) - 1}{_MARK}"

    try:
        loaded = YAML(typ="safe", pure=True).load(ENV_REFERENCE.sub(mark, text))
    except YAMLError:
        loaded = None
    if not isinstance(loaded, dict) or not all(isinstance(k, str) for k in loaded):
        message = (
            "expected a mapping, e.g. '{X-Api-Key: ${MY_KEY}, X-Tenant: acme}' (YAML's flow "
            "form; quote a value holding a comma, a brace or a bracket)"
        )
        raise ScenarioError([ScenarioIssue(f"--{key}", None, None, "", message)])

    def unmark(value: Any) -> Any:
        if isinstance(value, str):
            return _MARKED.sub(lambda m: found[int(m.group(1))], value)
        if isinstance(value, dict):
            return {unmark(k): unmark(v) for k, v in value.items()}
        return [unmark(v) for v in value] if isinstance(value, list) else value

    result: dict[str, Any] = unmark(loaded)
    return result


#: what stands for a ``${NAME}`` while a flag's mapping is read as YAML (plain-scalar safe)
_MARK = "VEEKSHAENVREF"
_MARKED = re.compile(f"{_MARK}(\\d+){_MARK}")


def _stray(arg: str) -> str:
    return f"unexpected argument {arg!r}: flags are --key VALUE (e.g. --input_lengths 128 256)"


def load_config(kind: type[Config], path: str | Path | None, flags: dict[str, Any]) -> Config:
    """The config of ``kind`` from the YAML file at ``path`` (if any) with ``flags`` on top;
    raise :class:`ScenarioError` listing every problem."""
    source = str(path) if path is not None else FLAGS_SOURCE
    root: CommentedMap = CommentedMap()
    if path is not None:
        root = _read_yaml(source)
    data: dict[str, Any] = _plain(root)
    # a flag replaces the file's value; the simulator mapping merges key by key, and headers
    # header by header (a flag's replacing the file's of the same name, in any case)
    for key, value in flags.items():
        if key == "simulator" and isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        elif key == "headers" and isinstance(value, dict) and isinstance(data.get(key), dict):
            given = {str(name).lower() for name in value}
            kept = {k: v for k, v in data[key].items() if k.lower() not in given}
            data[key] = {**kept, **value}
        else:
            data[key] = value
    # the simulator keys given refine the default preset (realistic), not the fast one
    if isinstance(data.get("simulator"), dict):
        data["simulator"] = {"preset": "realistic", **data["simulator"]}
    # lists given as one flag value are one-element lists
    for key in LIST_KEYS:
        if isinstance(flags.get(key), str):
            data[key] = [flags[key]]
    try:
        config = kind.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(_issues(exc, kind, root, source, flags)) from None
    for name, value in config.headers.items():  # (where a ${NAME} read at start is written)
        if "${" in value:
            config._header_places[name] = _where(root, source, flags, ["headers", name])
    return config


def _where(
    root: CommentedMap, source: str, flags: dict[str, Any], loc: list[str | int]
) -> ScenarioIssue:
    """The place of the key ``loc`` as an issue without a message: the flag that gave it
    (``--headers.X-Api-Key``), else its line and column in the file."""
    if source == FLAGS_SOURCE or _given_by_flags(flags, loc):
        return ScenarioIssue(f"--{format_path(loc)}", None, None, "", "")
    line, column = _position(root, loc)
    return ScenarioIssue(source, line, column, format_path(loc), "")


def _given_by_flags(flags: dict[str, Any], loc: Sequence[str | int]) -> bool:
    """Whether the key ``loc`` (or a value holding it: a list, a mapping given whole) came
    from a flag rather than the file: ``simulator.seed`` is a flag's when ``--simulator.seed``
    (or ``--simulator '{seed: 1}'``) was given, the file's when only ``--simulator.preset``
    was."""
    node: Any = flags
    for part in loc:
        if not isinstance(node, dict):
            return True
        if part not in node:
            return False
        node = node[part]
    return True


def _read_yaml(source: str) -> CommentedMap:
    def problem(message: str, line: int | None = None) -> ScenarioError:
        return ScenarioError(
            [ScenarioIssue(source, line, None if line is None else 1, "", message)]
        )

    loaded = parse_document(read_text(source), source)  # (a YAML error: one line at its place)
    if loaded is None:
        return CommentedMap()
    if not isinstance(loaded, CommentedMap):
        raise problem("expected a mapping of keys (input_lengths: [...], ...)", 1)
    wrong = [
        *non_text_keys(loaded, source),
        *refuse_tags(loaded, source, "a microbenchmark's config"),
    ]
    if wrong:
        raise ScenarioError(wrong)
    return loaded


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _issues(
    exc: ValidationError,
    kind: type[BenchConfig],
    root: CommentedMap,
    source: str,
    flags: dict[str, Any],
) -> list[ScenarioIssue]:
    """One issue per key path, worded as the scenario loader words its own
    (``veeksha.scenario.messages``): ``file:line:column: key: message`` at the key, or at the
    item of a list (``input_lengths[1]``), and ``--flag: message`` for a flag's."""
    issues: list[ScenarioIssue] = []
    seen: set[str] = set()
    for err in exc.errors():
        loc: list[str | int] = list(err["loc"])
        problem = (err.get("ctx") or {}).get("error")
        if err["type"] == "extra_forbidden":
            parents = [str(part) for part in loc[:-1]]
            message = unknown_key(str(loc[-1]), _keys(kind, parents))
        elif err["type"] == "value_error" and isinstance(problem, KeyProblem):
            loc += list(problem.keys[0])  # (a check of a mapping's entries: at the entry)
            message = problem.message
        else:
            # (a header's value may be a credential: never quoted, as in a scenario)
            secret = len(loc) >= 2 and loc[-2] in _HEADER_MAPS
            message = value_message(err, secret)
        path = format_path(loc)
        if not loc and ": " in message:  # a check of the whole config names its key
            path, _, message = message.partition(": ")
            loc = list(path.split("."))
        if path in seen:
            continue
        seen.add(path)
        if source == FLAGS_SOURCE or (loc and _given_by_flags(flags, loc)):  # (as written)
            issues.append(
                ScenarioIssue(f"--{path}" if path else FLAGS_SOURCE, None, None, "", message)
            )
        else:
            line, column = _position(root, loc)
            issues.append(ScenarioIssue(source, line, column, path, message))
    return issues


def _keys(kind: type[BaseModel], parents: list[str]) -> list[str]:
    if parents == ["simulator"]:
        return list(SimulatorConfig.model_fields)
    return list(kind.model_fields) if not parents else []


def _position(root: Any, loc: Sequence[str | int]) -> tuple[int | None, int | None]:
    """The 1-based line and column of the deepest key or list item of ``loc`` in the file."""
    node, line, column = root, None, None
    for part in loc:
        if isinstance(node, CommentedMap) and part in node:
            line, column = node.lc.key(part)
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line, column = node.lc.item(part)
        else:
            break
        node = node[part]
    return (None, None) if line is None else (line + 1, (column or 0) + 1)
