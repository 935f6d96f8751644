"""Command-line overrides of a scenario: ``--set a.b.c=VALUE`` and ``--a.b.c VALUE``.

An override names a key path (``traffic_scheduler.interval_generator.arrival_rate``; list items by
index, ``evaluators.0.stream_metrics`` or ``evaluators[0].stream_metrics``) and a value written
as YAML (``20``, ``true``, ``null``, ``{type: fixed, value: 8}``). The value is typed by the model:
a key holding a string keeps the text as written (``client.model=123`` is the string "123").

Overrides apply to the parsed file before validation, so their mistakes are reported together with
the file's; a problem with a value an override gave names that override (``--set
runtime.max_sessions=0: runtime.max_sessions: ...``) instead of a line of the file. A path through
a section the file leaves out starts from that section's defaults (``--set client.model=m`` with
no ``client:`` in the file gives the default chat client with ``model: m``). Setting ``type`` of
a polymorphic section keeps only the keys the new type accepts, so ``--set
traffic_scheduler.type=concurrent`` works on a file with a rate scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_core import PydanticUndefined, to_jsonable_python
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.scenario._walk import Node, PathPart, allowed_keys, classify, field_for_key
from veeksha.scenario.models import Scenario

__all__ = [
    "OVERRIDE_SOURCE",
    "Override",
    "apply_overrides",
    "extra_args_to_overrides",
    "format_path",
    "is_override_source",
    "override_label",
    "parse_override",
]

#: the source of a problem of the command-line arguments that is no one ``--set`` (a stray one)
OVERRIDE_SOURCE = "<--set>"
_INDEX = re.compile(r"\[(\d+)\]")
_SECRET = re.compile(r"api_key(?!_env)|\bheaders\b")  # (any header: it may be a credential)
_LABEL_VALUE_CHARS = 60


@dataclass(frozen=True)
class Override:
    """One parsed override: the key path and the value's text."""

    text: str
    path: tuple[PathPart, ...]
    value: str

    @property
    def label(self) -> str:
        """How problems name it: ``--set KEY=VALUE`` (:func:`override_label`)."""
        return override_label(self.text)


def override_label(text: str) -> str:
    """An override as the source of a problem: ``--set runtime.max_sessions=0``, its value
    shortened past 60 characters and hidden (``***``) when it holds an API key or sets a
    client's ``headers``."""
    key, sep, value = text.partition("=")
    if _SECRET.search(text):
        value = "***"
    elif len(value) > _LABEL_VALUE_CHARS:
        value = value[: _LABEL_VALUE_CHARS - 3] + "..."
    return f"--set {key.strip()}{sep}{value}"


def is_override_source(source: str) -> bool:
    """Whether a problem's source is the command line (an override) rather than a file."""
    return source == OVERRIDE_SOURCE or source.startswith("--set ")


def format_path(parts: Sequence[PathPart]) -> str:
    """``('evaluators', 0, 'slos')`` → ``evaluators[0].slos`` (the user's spelling)."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _issue(path: str, message: str, text: str | None = None) -> ScenarioIssue:
    source = OVERRIDE_SOURCE if text is None else override_label(text)
    return ScenarioIssue(source, None, None, path, message)


def parse_override(text: str) -> Override:
    """Parse ``a.b[0].c=VALUE``; raise :class:`ScenarioError` if it is not of that form."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError([_issue("", "expected KEY.PATH=VALUE", text)])
    parts: list[PathPart] = []
    for piece in _INDEX.sub(r".\1", key).split("."):
        if not piece:
            raise ScenarioError([_issue(key, "empty key in the path", text)])
        parts.append(int(piece) if piece.isdigit() else piece)
    return Override(text, tuple(parts), value)


def extra_args_to_overrides(args: Sequence[str]) -> list[str]:
    """Turn veeksha-style ``--a.b.c VALUE`` (or ``--a.b.c=VALUE``) arguments into overrides."""
    out: list[str] = []
    issues: list[ScenarioIssue] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or len(arg) == 2:
            issues.append(_issue("", f"unexpected argument {arg!r}: expected --key.path VALUE"))
            i += 1
        elif "=" in arg:
            out.append(arg[2:])
            i += 1
        elif i + 1 >= len(args) or args[i + 1].startswith("--"):
            issues.append(_issue(arg[2:], f"{arg} needs a value (--key.path VALUE)"))
            i += 1
        else:
            out.append(f"{arg[2:]}={args[i + 1]}")
            i += 2
    if issues:
        raise ScenarioError(issues)
    return out


_SAFE_YAML = YAML(typ="safe", pure=True)


def _typed_value(text: str, node: Node | None) -> Any:
    try:
        value = _SAFE_YAML.load(text)
    except YAMLError:
        return text
    if isinstance(value, bool | int | float) and node is not None and node.accepts_str():
        return text
    return value


def _child(node: Node, part: PathPart) -> Node | None:
    if node.kind == "model" and node.model is not None:
        found = field_for_key(node.model, part)
        return classify(found[1].annotation) if found else None
    if node.kind in ("list", "dict"):
        return node.item()
    return None


def _default(node: Node, part: PathPart) -> Any:
    """The default of a key, as plain data, to descend into when the file leaves it out."""
    if node.kind == "model" and node.model is not None:
        found = field_for_key(node.model, part)
        if found is not None:
            info = found[1]
            if info.default_factory is not None:
                return to_jsonable_python(info.default_factory())  # type: ignore[call-arg]
            if info.default is not PydanticUndefined:
                return to_jsonable_python(info.default)
    return None


def _apply_one(data: dict[str, Any], override: Override) -> ScenarioIssue | None:
    node: Node | None = classify(Scenario)
    container: Any = data
    *parents, last = override.path
    for depth, part in enumerate(parents):
        here = format_path(override.path[: depth + 1])
        resolved = node.with_data(container) if node is not None else None
        child = _child(resolved, part) if resolved is not None else None
        if isinstance(container, dict):
            if container.get(part) is None:
                default = _default(resolved, part) if resolved is not None else None
                container[part] = default if isinstance(default, dict | list) else {}
        elif isinstance(container, list):
            if not isinstance(part, int) or not 0 <= part < len(container):
                return _issue(
                    here, f"no item {part!r} in a list of {len(container)}", override.text
                )
        else:
            where = format_path(override.path[:depth]) or "the scenario"
            return _issue(
                here, f"cannot set a key inside {where}: it is not a mapping", override.text
            )
        container = container[part]
        node = child
    resolved = node.with_data(container) if node is not None else None
    leaf = _child(resolved, last) if resolved is not None else None
    value = _typed_value(override.value, leaf)
    if isinstance(container, list):
        if not isinstance(last, int) or not 0 <= last < len(container):
            return _issue(
                format_path(override.path),
                f"no such item in a list of {len(container)}",
                override.text,
            )
        container[last] = value
        return None
    if not isinstance(container, dict):
        where = format_path(override.path[:-1]) or "the scenario"
        return _issue(
            format_path(override.path),
            f"cannot set a key inside {where}: it is not a mapping",
            override.text,
        )
    if last == "type" and node is not None and node.kind == "tagged":
        member = node.members.get(value) if isinstance(value, str) else None
        if member is not None and container.get("type") != value:
            keep = set(allowed_keys(member))
            for key in [k for k in container if k not in keep]:
                del container[key]
    container[last] = value
    return None


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str]
) -> tuple[list[Override], list[ScenarioIssue]]:
    """Apply overrides in order to plain scenario data, in place.

    Returns the overrides applied (to tell which validation errors come from the command line,
    and name them) and the problems of those that could not be applied.
    """
    applied: list[Override] = []
    issues: list[ScenarioIssue] = []
    for text in overrides:
        try:
            override = parse_override(text)
        except ScenarioError as exc:
            issues += exc.issues
            continue
        problem = _apply_one(data, override)
        if problem is None:
            applied.append(override)
        else:
            issues.append(problem)
    return applied, issues
