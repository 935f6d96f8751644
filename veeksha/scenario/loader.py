"""Load a scenario file: YAML with positions, overrides, validation, errors in the user's words.

Every problem is reported at once, each as ``file:line:col: key.path: message (got value)``::

    scenario.yaml:7:5: traffic_scheduler.interval_generator.arival_rate: unknown key; did you mean
    'arrival_rate'?
    scenario.yaml:12:7: runtime.max_sessions: must be greater than or equal to -1 (got -5)
    <--set>: seed: must be a valid integer (got 'x')

Lines and columns are 1-based and point at the key (or list item) concerned, or at the nearest
enclosing key when the key is missing. Problems caused by a command-line override are reported
with the source ``<--set>``. Secrets are never echoed.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.scenario._walk import Node, PathPart, aliases_of, allowed_keys, classify, tag_of
from veeksha.scenario._walk import field_for_key as _field_for_key
from veeksha.scenario.models import Scenario
from veeksha.scenario.overrides import (
    OVERRIDE_SOURCE,
    apply_overrides,
    extra_args_to_overrides,
    format_path,
)

__all__ = [
    "REDACTED",
    "dump_resolved_yaml",
    "extra_args_to_overrides",
    "load_scenario",
    "load_scenario_text",
    "resolved_dict",
    "scenario_hash",
]

REDACTED = "***"
_SECRET_PATHS = (("client", "api_key"),)
_HASH_EXCLUDED = (*_SECRET_PATHS, ("output_dir",))


# ----------------------------------------------------------------------------------- loading


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario file; raise :class:`ScenarioError` listing every
    problem. Warnings of the models (ignored keys) are re-issued as ``UserWarning``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ScenarioError([_whole_file(source, "not a text file (UTF-8 expected)")]) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ScenarioError([_whole_file(source, f"cannot read the file: {reason}")]) from None
    return load_scenario_text(text, source, overrides)


def load_scenario_text(text: str, source_name: str, overrides: Sequence[str] = ()) -> Scenario:
    """Like :func:`load_scenario`, for text already read; ``source_name`` names it in errors."""
    root = _parse_yaml(text, source_name)
    data = _plain(root)
    override_paths, issues = apply_overrides(data, overrides)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            scenario = Scenario.model_validate(data)
        except ValidationError as exc:
            issues += _issues(exc, root, source_name, override_paths)
            scenario = None
    if scenario is not None:
        issues += _cross_issues(scenario, root, source_name, override_paths)
    if issues:
        raise ScenarioError(_dedupe(issues))
    assert scenario is not None
    seen: set[str] = set()
    for warning in caught:
        message = f"{source_name}: {warning.message}"
        if message not in seen:
            seen.add(message)
            warnings.warn(message, warning.category, stacklevel=2)
    return scenario


def _cross_issues(
    scenario: Scenario,
    root: CommentedMap,
    source: str,
    override_paths: list[tuple[PathPart, ...]],
) -> list[ScenarioIssue]:
    """The scenario's cross-section problems (``Scenario.problems``), at their keys' lines."""
    issues = []
    for path, message in scenario.problems():
        where = list(path)
        if _from_override(root, where, override_paths):
            issues.append(ScenarioIssue(OVERRIDE_SOURCE, None, None, format_path(where), message))
        else:
            line, column = _position(root, where)
            issues.append(ScenarioIssue(source, line, column, format_path(where), message))
    return issues


def _whole_file(source: str, message: str, line: int | None = None) -> ScenarioIssue:
    return ScenarioIssue(source, line, None if line is None else 1, "", message)


def _parse_yaml(text: str, source: str) -> CommentedMap:
    try:
        root = YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = f"YAML syntax error: {exc.problem or exc.context}"
        if exc.context and exc.problem and exc.context_mark is not None:
            message += f" ({exc.context} at line {exc.context_mark.line + 1})"
        line = None if mark is None else mark.line + 1
        column = None if mark is None else mark.column + 1
        raise ScenarioError([ScenarioIssue(source, line, column, "", message)]) from None
    except YAMLError as exc:
        raise ScenarioError([_whole_file(source, f"YAML error: {exc}")]) from None
    if root is None:
        raise ScenarioError(
            [_whole_file(source, "the file is empty: a scenario is a YAML mapping of sections")]
        )
    if not isinstance(root, CommentedMap):
        kind = "a list" if isinstance(root, list) else f"a {type(root).__name__} value"
        raise ScenarioError(
            [_whole_file(source, f"the top level must be a mapping of sections, not {kind}", 1)]
        )
    return root


def _plain(value: Any) -> Any:
    """ruamel's round-trip containers and scalars → plain Python data."""
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


# ------------------------------------------------------------------------------ error mapping


def _user_path(
    loc: tuple[int | str, ...],
) -> tuple[list[PathPart], Node | None, Node | None, bool]:
    """Pydantic's location (with union tags) → the user's key path, the node holding the last key,
    the node at the path, and whether the error is about one branch of a plain union."""
    node: Node | None = classify(Scenario)
    parent: Node | None = None
    parts: list[PathPart] = []
    branch = False
    for seg in loc:
        if node is not None and node.kind == "tagged":
            member = node.members.get(seg) if isinstance(seg, str) else None
            member = member or next((m for m in node.members.values() if m.__name__ == seg), None)
            if member is not None:
                node = classify(member)
                continue
        if node is not None and node.kind == "model" and node.model is not None:
            found = _field_for_key(node.model, seg)
            if found is None and seg == tag_of(node.model):
                continue  # the tag of a one-member discriminated union
            parts.append(seg)
            parent, node = node, (classify(found[1].annotation) if found else None)
            continue
        if node is not None and node.kind == "union":
            node, branch = None, True  # seg names the branch of a plain union that failed
            continue
        parts.append(seg)
        parent, node = (
            node,
            (node.item() if node is not None and node.kind in ("list", "dict") else None),
        )
    return parts, parent, node, branch


def _position(root: CommentedMap, parts: Sequence[PathPart]) -> tuple[int, int]:
    """1-based line and column of the deepest existing key (or item) of a path."""
    node: Any = root
    line, column = root.lc.line, root.lc.col
    for part in parts:
        if isinstance(node, CommentedMap) and part in node:
            line, column = node.lc.key(part)
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line, column = node.lc.item(part)
        else:
            break
        node = node[part]
    return line + 1, column + 1


def _exists(root: Any, parts: Sequence[PathPart]) -> bool:
    node = root
    for part in parts:
        in_map = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_map or in_list):
            return False
        node = node[part]
    return True


def _from_override(
    root: CommentedMap, parts: list[PathPart], override_paths: list[tuple[PathPart, ...]]
) -> bool:
    key = tuple(parts)
    for path in override_paths:
        if key[: len(path)] == path:
            return True
        if path[: len(key)] == key and not _exists(root, parts):
            return True
    return False


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    return repr(value)


def _tags(node: Node | None) -> str:
    if node is None:
        return ""
    if node.kind == "tagged":
        return ", ".join(repr(t) for t in node.members)
    if node.kind == "model" and node.model is not None:
        return repr(tag_of(node.model))
    return ""


def _unknown_key(key: PathPart, holder: Node | None) -> str:
    if holder is None or holder.model is None:
        return "unknown key"
    model = holder.model
    aliases = aliases_of(model)
    if key in aliases:
        return f"{key!r} is another spelling of {aliases[key]!r}: give only one of them"
    allowed = [k for k in allowed_keys(model) if k != "type" or tag_of(model) is None]
    close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return f"unknown key; allowed keys: {', '.join(allowed)}"


def _message(
    err: ErrorDetails, parts: list[PathPart], parent: Node | None, node: Node | None
) -> str:
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(parts[-1] if parts else "", parent)
    if kind == "union_tag_invalid":
        ctx = err.get("ctx") or {}
        message = f"unknown type {ctx.get('tag')!r}; expected one of: {_tags(node)}"
        tags = list(node.members) if node is not None and node.kind == "tagged" else []
        close = difflib.get_close_matches(str(ctx.get("tag")), tags, n=1, cutoff=0.6)
        return message + (f"; did you mean {close[0]!r}?" if close else "")
    if kind == "union_tag_not_found":
        if not isinstance(given, dict):
            return f"must be a mapping (got {_shown(given)})"
        return f"missing key 'type' (one of: {_tags(node)})"
    if kind == "missing":
        return "missing required key"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return (
            f"must be a mapping (got {_shown(given)})"
            if not isinstance(given, list)
            else "must be a mapping, not a list"
        )
    message = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    message = message.replace("Input should be", "must be").replace(
        "a valid dictionary", "a mapping"
    )
    message = message.split(", unable to")[0].split(", got a number")[0]
    if "(got" not in message and not isinstance(given, dict | list):
        secret = bool(parts) and tuple(parts[-2:]) in _SECRET_PATHS
        message += f" (got {REDACTED if secret else _shown(given)})"
    return message


def _issues(
    exc: ValidationError,
    root: CommentedMap,
    source: str,
    override_paths: list[tuple[PathPart, ...]],
) -> list[ScenarioIssue]:
    """One issue per erroneous key path; failures of a plain union's branches are merged."""
    merged: dict[tuple[PathPart, ...], tuple[ScenarioIssue, int]] = {}
    branches: set[tuple[PathPart, ...]] = set()
    for err in exc.errors():
        parts, parent, node, branch = _user_path(err["loc"])
        message = _message(err, parts, parent, node)
        where = [*parts, "type"] if err["type"] == "union_tag_invalid" else parts
        if _from_override(root, where, override_paths):
            issue = ScenarioIssue(OVERRIDE_SOURCE, None, None, format_path(where), message)
        else:
            line, column = _position(root, where)
            issue = ScenarioIssue(source, line, column, format_path(where), message)
        key = tuple(parts)
        if branch:
            branches.add(key)
        depth = len(err["loc"])
        previous = merged.get(key)
        if previous is None:
            merged[key] = (issue, depth)
        elif previous[1] == depth:  # two branches of a union, equally deep: "must be A or B"
            old = previous[0]
            extra = message.removeprefix("must be ").split(" (got")[0]
            text = old.message.replace(" (got", f" or {extra} (got", 1)
            if text == old.message:
                text = f"{old.message} or {extra}"
            merged[key] = (ScenarioIssue(old.file, old.line, old.column, old.path, text), depth)
    # a union branch failing deeper (an item of a list) hides the other branches' complaints
    for key in [k for k in branches if any(o != k and o[: len(k)] == k for o in branches)]:
        merged.pop(key, None)
    return [issue for issue, _ in merged.values()]


def _dedupe(issues: list[ScenarioIssue]) -> list[ScenarioIssue]:
    unique = list(dict.fromkeys(issues))
    return sorted(unique, key=lambda i: (i.file == OVERRIDE_SOURCE, i.line or 0, i.column or 0))


# ------------------------------------------------------------------------- resolved config


def resolved_dict(scenario: Scenario, *, redact: bool = True) -> dict[str, Any]:
    """The fully resolved scenario (every default) as plain data; secrets become ``"***"``."""
    data: dict[str, Any] = scenario.model_dump(mode="json")
    for path in _SECRET_PATHS:
        holder: Any = data
        for part in path[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and holder.get(path[-1]) is not None:
            holder[path[-1]] = REDACTED if redact else None
    return data


def dump_resolved_yaml(scenario: Scenario) -> str:
    """The fully resolved scenario as YAML (what a run used), with every secret redacted."""
    stream = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    stream.write("# Fully resolved scenario (every default filled in); secrets are redacted.\n")
    yaml.dump(resolved_dict(scenario), stream)
    return stream.getvalue()


def scenario_hash(scenario: Scenario) -> str:
    """A short, stable hex digest of the resolved scenario, without secrets or ``output_dir``
    (where results go does not change what is measured)."""
    data = resolved_dict(scenario)
    for path in _HASH_EXCLUDED:
        holder: Any = data
        for part in path[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder.pop(path[-1], None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]
