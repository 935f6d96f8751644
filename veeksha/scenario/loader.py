"""Load a scenario file: YAML with positions, overrides, validation, errors in the user's words.

Every problem is reported at once, each as ``file:line:col: key.path: message (got value)``::

    scenario.yaml:7:5: traffic_scheduler.interval_generator.arival_rate: unknown key; did you mean
    'arrival_rate'?
    scenario.yaml:12:7: runtime.max_sessions: must be greater than or equal to -1 (got -5)
    --set seed=x: seed: must be a valid integer (got 'x')

Lines and columns are 1-based and point at the key (or list item) concerned, or at the nearest
enclosing key when the key is missing; a check between keys (a model validator raising
``KeyProblem``) is reported at the first key it names. A problem with a value a command-line
override gave is reported with that override as its source (``--set KEY=VALUE``), never at a line
of the file. Secrets are never echoed.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.scenario._walk import Node, PathPart, aliases_of, allowed_keys, classify, tag_of
from veeksha.scenario._walk import field_for_key as _field_for_key
from veeksha.scenario.base import KeyProblem
from veeksha.scenario.messages import REDACTED, closest, shown, unknown_key, value_message
from veeksha.scenario.models import Scenario
from veeksha.scenario.overrides import (
    OVERRIDE_SOURCE,
    Override,
    apply_overrides,
    extra_args_to_overrides,
    format_path,
    is_override_source,
    override_label,
    parse_override,
)
from veeksha.scenario.phases import phase_issues
from veeksha.scenario.tags import (
    EXPAND_TAG,
    INCLUDE_TAG,
    Choice,
    Sources,
    expand,
    non_text_keys,
    parse_document,
    read_text,
    resolve_includes,
    tag_name,
)

__all__ = [
    "REDACTED",
    "ScenarioSet",
    "SweepPoint",
    "block_yaml",
    "dump_resolved_yaml",
    "extra_args_to_overrides",
    "format_value",
    "load_points",
    "load_points_text",
    "load_scenario",
    "load_scenario_node",
    "load_scenario_text",
    "named_file_error",
    "resolved_dict",
    "scenario_hash",
]

_SECRET_PATHS = (("client", "api_key"),)
_HASH_EXCLUDED = (*_SECRET_PATHS, ("output_dir",), ("labels",))


# ----------------------------------------------------------------------------------- loading


def _read(path: str | Path) -> str:
    return read_text(path)


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario file; raise :class:`ScenarioError` listing every
    problem. Warnings of the models (ignored keys) are re-issued as ``UserWarning``. ``!include``
    is resolved; a file with ``!expand`` (a sweep) is refused: see :func:`load_points`."""
    return load_scenario_text(_read(path), str(path), overrides)


def load_scenario_text(text: str, source_name: str, overrides: Sequence[str] = ()) -> Scenario:
    """Like :func:`load_scenario`, for text already read; ``source_name`` names it in errors
    (and is the file ``!include`` paths are relative to)."""
    return _one_scenario(_load_points(text, source_name, overrides, stacklevel=4))


def load_scenario_node(
    root: CommentedMap, source_name: str, overrides: Sequence[str] = ()
) -> Scenario:
    """Like :func:`load_scenario`, for a mapping ruamel already parsed (with its positions): a
    scenario nested in another file (a capacity search's ``benchmark_config``) is reported at
    its own lines of that file; its ``!include`` paths are relative to that file."""
    return _one_scenario(_load_points_node(root, source_name, overrides, stacklevel=3))


def _one_scenario(loaded: ScenarioSet) -> Scenario:
    """The one scenario of a file that must not be a sweep."""
    if loaded.is_sweep:
        first = loaded.sites[0]
        raise ScenarioError(
            [
                ScenarioIssue(
                    first.file,
                    first.line,
                    first.column,
                    format_path(first.path),
                    f"{EXPAND_TAG} makes a sweep of {len(loaded.points)} runs; one scenario is "
                    "expected here (`veeksha run` and `veeksha validate` take sweeps)",
                )
            ]
        )
    return loaded.points[0].scenario


@dataclass(frozen=True)
class SweepPoint:
    """One scenario of a file: its 0-based index, the value it takes at each swept key (the
    key path of each ``!expand`` it went through) and the validated scenario."""

    index: int
    values: dict[str, Any]
    label: str
    scenario: Scenario


@dataclass(frozen=True)
class ScenarioSet:
    """Every scenario a file makes: one point for a plain file, one per combination of its
    ``!expand`` values for a sweep (order: ``veeksha.scenario.tags``). ``source_yaml``: the
    composed file (includes spliced, tags kept, secrets redacted), for a sweep only."""

    points: list[SweepPoint]
    swept_keys: list[str]
    short_names: dict[str, str]
    source_yaml: str
    sites: list[Any]

    @property
    def is_sweep(self) -> bool:
        """Whether the file holds ``!expand`` tags."""
        return bool(self.swept_keys)


def load_points(
    path: str | Path, overrides: Sequence[str] = (), *, source: bool = False
) -> ScenarioSet:
    """Read a scenario file (``!include`` resolved, ``!expand`` expanded), apply ``overrides``
    to every point and validate each; raise :class:`ScenarioError` listing every problem (a
    problem of some points only names them). ``source``: keep the composed file of a plain
    file too (a sweep's is always kept), as a run repeated (``--repeats``) writes it."""
    return _load_points(_read(path), str(path), overrides, stacklevel=4, source=source)


def load_points_text(text: str, source_name: str, overrides: Sequence[str] = ()) -> ScenarioSet:
    """Like :func:`load_points`, for text already read."""
    return _load_points(text, source_name, overrides, stacklevel=4)


def _short_names(keys: list[str], paths: dict[str, tuple[PathPart, ...]]) -> dict[str, str]:
    """Each swept key path → its shortest suffix that no other swept key shares."""
    out: dict[str, str] = {}
    for key in keys:
        parts = [p for p in paths[key] if isinstance(p, str)] or [key]
        for size in range(1, len(parts) + 1):
            name = ".".join(parts[-size:])
            others = [
                ".".join([p for p in paths[k] if isinstance(p, str)][-size:])
                for k in keys
                if k != key
            ]
            if name not in others:
                break
        out[key] = name
    return out


def format_value(value: Any) -> str:
    """A swept value as people write it: ``4``, ``0.5``, ``true``, ``{"type":"fixed"}``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float | str):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _load_points(
    text: str, source_name: str, overrides: Sequence[str], stacklevel: int, source: bool = False
) -> ScenarioSet:
    root = _parse_yaml(text, source_name)
    return _load_points_node(root, source_name, overrides, stacklevel, source)


#: Top-level keys of the public veeksha's earlier configuration language, which no scenario has.
_EARLIER_FORMAT_KEYS = ("client_config", "request_generator_config", "metrics_config")


def _refuse_earlier_format(root: CommentedMap, source_name: str) -> None:
    """A file of the public veeksha's earlier language is told so once, at its first such key,
    instead of one unknown key per section."""
    found = [key for key in _EARLIER_FORMAT_KEYS if key in root]
    if not found:
        return
    line = root.lc.key(found[0])[0] + 1
    message = (
        f"{', '.join(found)}: this is the public veeksha's earlier configuration language,"
        " which veeksha does not read; write it as a scenario (client_config → client,"
        " request_generator_config → session_generator and traffic_scheduler, metrics_config →"
        " evaluators; docs/scenario.md, 'Differences from the public veeksha')"
    )
    raise ScenarioError([ScenarioIssue(source_name, line, 1, "", message)])


def _load_points_node(
    root: CommentedMap,
    source_name: str,
    overrides: Sequence[str],
    stacklevel: int,
    source: bool = False,
) -> ScenarioSet:
    _refuse_earlier_format(root, source_name)
    sources = Sources()
    include_issues = resolve_includes(root, source_name, sources)
    include_issues += non_text_keys(root, source_name, sources)
    if include_issues:
        raise ScenarioError(_dedupe(include_issues))
    variants = expand(root, source_name, sources)
    sites = list({c.site: None for _, choices in variants for c in choices})
    _refuse_swept_overrides(overrides, sites)
    paths = {format_path(site.path): site.path for site in sites}
    keys = list(paths)
    short = _short_names(keys, paths)
    issues_by_point: dict[ScenarioIssue, list[int]] = {}
    points: list[SweepPoint] = []
    caught_all: list[warnings.WarningMessage] = []
    for index, (plain, choices) in enumerate(variants):
        data = copy.deepcopy(plain)
        applied, issues = apply_overrides(data, overrides)
        issues += _swept_keys_dropped(plain, data, choices, applied)
        chosen = {id(c.node): c.index for c in choices}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                scenario = Scenario.model_validate(data)
                # mistakes spanning keys: phases, and sections naming each other (clients)
                for parts, message in [*phase_issues(scenario), *scenario.problems()]:
                    issues.append(
                        _issue_at(root, source_name, list(parts), message, applied, sources, chosen)
                    )
                # where the files it names and its server's keys are written, for the problems
                # found when they are read or the server starts (named_file_error, at_key)
                scenario._places = {
                    parts: _issue_at(root, source_name, list(parts), "", applied, sources, chosen)
                    for parts in scenario.placed_keys()
                }
            except ValidationError as exc:
                issues += _issues(exc, root, source_name, applied, plain, sources, chosen)
                scenario = None
        caught_all += caught
        for issue in issues:
            issues_by_point.setdefault(issue, []).append(index)
        if scenario is not None:
            values = {format_path(c.site.path): c.value for c in choices}
            label = ",".join(f"{short[k]}={format_value(v)}" for k, v in values.items())
            points.append(SweepPoint(index, values, label, scenario))
    if issues_by_point:
        raise ScenarioError(_dedupe(_name_points(issues_by_point, variants, short)))
    seen: set[str] = set()
    for warning in caught_all:
        message = f"{source_name}: {warning.message}"
        if message not in seen:
            seen.add(message)
            warnings.warn(message, warning.category, stacklevel=stacklevel)
    # (only a sweep writes its composed source: a single run's start-up skips the dump)
    composed = _source_yaml(root) if sites or source else ""
    return ScenarioSet(points, keys, short, composed, sites)


def named_file_error(
    scenario: Scenario, parts: tuple[PathPart, ...], message: str
) -> ScenarioError | None:
    """A problem of a file the scenario names (``Scenario.named_files``: the trace, a
    tokenizer), found when it is read, placed at the key naming it as a validation error is:
    ``scenario.yaml:9:3: session_generator.trace_file: MESSAGE`` (or the ``--set`` that gave
    it). None when the scenario was not read from a file (the caller raises its own error)."""
    where = (scenario._places or {}).get(tuple(parts))
    if where is None:
        return None
    return ScenarioError([ScenarioIssue(where.file, where.line, where.column, where.path, message)])


def _refuse_swept_overrides(overrides: Sequence[str], sites: list[Any]) -> None:
    """An override of a swept key (or of a section holding one) would give every point the same
    value under different labels: refused, naming the tag."""
    issues = []
    for text in overrides:
        try:
            path = parse_override(text).path
        except ScenarioError:
            continue  # reported with the other override problems
        for site in sites:
            if tuple(site.path[: len(path)]) == tuple(path):
                issues.append(
                    ScenarioIssue(
                        override_label(text),
                        None,
                        None,
                        format_path(path),
                        f"sets a key swept by {EXPAND_TAG} at {site.file}:{site.line}; edit "
                        "the tag's list instead (or remove the tag)",
                    )
                )
                break
    if issues:
        raise ScenarioError(issues)


def _swept_keys_dropped(
    plain: dict[str, Any],
    data: dict[str, Any],
    choices: Sequence[Choice],
    applied: Sequence[Override],
) -> list[ScenarioIssue]:
    """An override of a section's ``type`` keeps only the keys the new type accepts: one that
    drops a swept key would run every point alike under different labels: refused."""
    issues = []
    for choice in choices:
        path = choice.site.path
        if not _exists(plain, path) or _exists(data, path):
            continue
        culprits = [
            o
            for o in applied
            if o.path[-1] == "type" and tuple(path[: len(o.path) - 1]) == o.path[:-1]
        ]
        where = format_path(culprits[-1].path if culprits else path)
        issues.append(
            ScenarioIssue(
                culprits[-1].label if culprits else OVERRIDE_SOURCE,
                None,
                None,
                where,
                f"changes the section's type, which drops {format_path(path)}, swept by "
                f"{EXPAND_TAG} at {choice.site.file}:{choice.site.line}: every point would run "
                "alike; edit the file's section instead (or remove the tag)",
            )
        )
    return issues


def _name_points(
    issues: dict[ScenarioIssue, list[int]], variants: list[Any], short: dict[str, str]
) -> list[ScenarioIssue]:
    """Issues of some points only (not all) say which points, by index and swept values."""
    out: list[ScenarioIssue] = []
    for issue, indexes in issues.items():
        if len(indexes) == len(variants):
            out.append(issue)
            continue
        named = []
        for index in indexes[:3]:
            choices: list[Choice] = list(variants[index][1])
            values = ",".join(
                f"{short[format_path(c.site.path)]}={format_value(c.value)}" for c in choices
            )
            named.append(f"{index} ({values})")
        more = f" and {len(indexes) - 3} more" if len(indexes) > 3 else ""
        message = f"{issue.message} [sweep point {', '.join(named)}{more}]"
        out.append(ScenarioIssue(issue.file, issue.line, issue.column, issue.path, message))
    return out


def _source_yaml(root: CommentedMap) -> str:
    """The composed file (includes spliced, ``!expand`` kept) as YAML, secrets redacted."""
    tree = copy.deepcopy(root)
    for path in _SECRET_PATHS:
        holder: Any = tree
        for part in path[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and holder.get(path[-1]) is not None:
            holder[path[-1]] = REDACTED
    _mask_headers(tree, REDACTED)
    stream = io.StringIO()
    yaml = YAML(typ="rt")
    yaml.width = 4096  # one line per flow value, as written
    yaml.dump(tree, stream)
    return stream.getvalue()


def _whole_file(source: str, message: str, line: int | None = None) -> ScenarioIssue:
    return ScenarioIssue(source, line, None if line is None else 1, "", message)


def _parse_yaml(text: str, source: str) -> CommentedMap:
    root = parse_document(text, source)
    if root is None:
        raise ScenarioError(
            [_whole_file(source, "the file is empty: a scenario is a YAML mapping of sections")]
        )
    if not isinstance(root, CommentedMap):
        tag = tag_name(root)
        if tag == INCLUDE_TAG:
            kind = "an !include: a file cannot be only an !include; give the included file itself"
        elif tag is not None:
            kind = f"a {tag} tag (got {shown(root)})"
        elif isinstance(root, list):
            kind = "a list"
        else:
            kind = f"a single value (got {shown(root)})"
        raise ScenarioError(
            [_whole_file(source, f"the top level must be a mapping of sections, not {kind}", 1)]
        )
    return root


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


def _position(
    root: CommentedMap,
    parts: Sequence[PathPart],
    source: str = "",
    sources: Sources | None = None,
    chosen: dict[int, int] | None = None,
) -> tuple[str, int, int]:
    """The file, 1-based line and column of the deepest existing key (or item) of a path; an
    ``!expand`` list is followed through the value the point chose (``chosen``: id → index)."""
    node: Any = root
    line, column = root.lc.line, root.lc.col
    file = source
    chosen = chosen or {}
    for part in parts:
        if isinstance(node, CommentedMap) and part in node:
            line, column = node.lc.key(part)
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            line, column = node.lc.item(part)
        else:
            break
        if sources is not None:
            file = sources.file_of(node, file)
        node = node[part]
        while id(node) in chosen and isinstance(node, CommentedSeq):
            item = node[chosen[id(node)]]
            if not isinstance(item, CommentedMap | CommentedSeq):
                break
            node = item
    return file, line + 1, column + 1


def _exists(root: Any, parts: Sequence[PathPart]) -> bool:
    node = root
    for part in parts:
        in_map = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if not (in_map or in_list):
            return False
        node = node[part]
    return True


def _override_of(
    root: Any, parts: Sequence[PathPart], applied: Sequence[Override]
) -> Override | None:
    """The override that gave the value at ``parts`` (the last one, as the last one wins): one
    setting that key or a section holding it, a key inside it when the file has no such key (a
    section the override made), or a key beside it in a section the file does not have (the
    override made it: ``--set a.ramp.end_rate=2`` without ``a.ramp``, and ``a.ramp.duration``
    missing). None: the value is the file's (or a default)."""
    key = tuple(parts)
    found = beside = None
    for override in applied:
        path = override.path
        if key[: len(path)] == path or (path[: len(key)] == key and not _exists(root, parts)):
            found = override
            continue
        shared = 0
        while shared < min(len(key), len(path)) and key[shared] == path[shared]:
            shared += 1
        if shared and not _exists(root, key[:shared]):
            beside = override
    return found or beside


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
    return unknown_key(str(key), allowed)


def _message(
    err: ErrorDetails, parts: list[PathPart], parent: Node | None, node: Node | None
) -> str:
    kind = err["type"]
    given = err.get("input")
    if kind == "extra_forbidden":
        return _unknown_key(parts[-1] if parts else "", parent)
    if kind == "union_tag_invalid":
        ctx = err.get("ctx") or {}
        # (pydantic's tag is str() of the value: 'None' for null; say what was written)
        tag = given.get("type", ctx.get("tag")) if isinstance(given, dict) else ctx.get("tag")
        if not isinstance(tag, str):
            return f"must be one of: {_tags(node)} (got {shown(tag)})"
        message = f"unknown type {shown(tag)}; expected one of: {_tags(node)}"
        tags = list(node.members) if node is not None and node.kind == "tagged" else []
        close = closest(tag, tags)
        return message + (f"; did you mean {close!r}?" if close else "")
    if kind == "union_tag_not_found":
        if not isinstance(given, dict):
            return f"must be a mapping (got {shown(given)})"
        return f"missing key 'type' (one of: {_tags(node)})"
    secret = bool(parts) and tuple(parts[-2:]) in _SECRET_PATHS
    secret = secret or (len(parts) >= 2 and parts[-2] == "headers")  # (any header's value)
    return value_message(err, secret)


def _issue_at(
    root: CommentedMap,
    source: str,
    parts: list[PathPart],
    message: str,
    applied: Sequence[Override],
    sources: Sources | None = None,
    chosen: dict[int, int] | None = None,
) -> ScenarioIssue:
    """An issue found after validation (between keys), placed like a validation error."""
    override = _override_of(root, parts, applied)
    if override is not None:
        return ScenarioIssue(override.label, None, None, format_path(parts), message)
    file, line, column = _position(root, parts, source, sources, chosen)
    return ScenarioIssue(file, line, column, format_path(parts), message)


def _issues(
    exc: ValidationError,
    root: CommentedMap,
    source: str,
    applied: Sequence[Override],
    plain: Any,
    sources: Sources | None = None,
    chosen: dict[int, int] | None = None,
) -> list[ScenarioIssue]:
    """One issue per erroneous key path; failures of a plain union's branches are merged."""
    merged: dict[tuple[PathPart, ...], tuple[ScenarioIssue, int]] = {}
    branches: set[tuple[PathPart, ...]] = set()
    for err in exc.errors():
        parts, parent, node, branch = _user_path(err["loc"])
        problem = (err.get("ctx") or {}).get("error")
        if err["type"] == "value_error" and isinstance(problem, KeyProblem):
            # a check between keys: at its first key, named by the override that gave any of
            # them (the first's, if it was one), else at that key's line of the file
            involved: list[list[PathPart]] = [[*parts, *k] for k in problem.keys]
            where = involved[0]
            given = (_override_of(plain, k, applied) for k in involved)
            override = next((o for o in given if o is not None), None)
            message = problem.message
        else:
            message = _message(err, parts, parent, node)
            where = [*parts, "type"] if err["type"] == "union_tag_invalid" else parts
            override = _override_of(plain, where, applied)
        if override is not None:
            issue = ScenarioIssue(override.label, None, None, format_path(where), message)
        else:
            file, line, column = _position(root, where, source, sources, chosen)
            issue = ScenarioIssue(file, line, column, format_path(where), message)
        key = tuple(where) if isinstance(problem, KeyProblem) else tuple(parts)
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
    return sorted(unique, key=lambda i: (is_override_source(i.file), i.line or 0, i.column or 0))


# ------------------------------------------------------------------------- resolved config


def resolved_dict(scenario: Scenario, *, redact: bool = True) -> dict[str, Any]:
    """The fully resolved scenario (every default) as plain data; secrets become ``"***"``."""
    data: dict[str, Any] = scenario.model_dump(mode="json")
    if data.get("clients"):  # (the unused default client: the file must load again)
        data.pop("client", None)
    for path in _SECRET_PATHS:
        holder: Any = data
        for part in path[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and holder.get(path[-1]) is not None:
            holder[path[-1]] = REDACTED if redact else None
    _mask_headers(data, REDACTED if redact else None)
    return data


def _mask_headers(tree: Any, mask: str | None) -> None:
    """Each client's credential-like ``headers``, and the simulator's ``required_headers``,
    written as ``mask`` in ``tree`` (a scenario as data), unless the value reads them from the
    environment (``veeksha.redact.masked_headers``)."""
    from veeksha.redact import MASK, masked_headers

    if not isinstance(tree, dict):
        return
    clients = tree.get("clients")
    sections = [tree.get("client"), *(clients if isinstance(clients, list) else [])]
    found = [(s, "headers") for s in sections] + [(tree.get("simulator"), "required_headers")]
    for section, key in found:
        headers = section.get(key) if isinstance(section, dict) else None
        if isinstance(headers, dict):
            for name, value in masked_headers(headers).items():
                if value == MASK and headers[name] != MASK:
                    headers[name] = mask


def block_yaml() -> YAML:
    """The writer of the resolved files (config.yaml, capacity_config.yaml): block style, keys
    in their order, and no value folded onto a second line (a long path stays one line)."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    yaml.width = 1 << 30
    return yaml


def dump_resolved_yaml(scenario: Scenario) -> str:
    """The fully resolved scenario as YAML (what a run used), with every secret redacted."""
    stream = io.StringIO()
    yaml = block_yaml()
    stream.write("# Fully resolved scenario (every default filled in); secrets are redacted.\n")
    yaml.dump(resolved_dict(scenario), stream)
    return stream.getvalue()


def _drop_no_reasoning(simulator: Any) -> None:
    """The simulator's reasoning keys out of a hashed dict where they change nothing (no
    thinking), so that a scenario hashes as it did before they existed."""
    if not isinstance(simulator, dict):
        return
    models = [m for m in (simulator.get("models") or {}).values() if isinstance(m, dict)]
    for model in models:
        if model.get("reasoning_tokens") is None:
            model.pop("reasoning_tokens", None)
    if simulator.get("reasoning_tokens") or any(m.get("reasoning_tokens") for m in models):
        return
    simulator.pop("reasoning_tokens", None)
    if simulator.get("reasoning_field") == "reasoning_content":
        simulator.pop("reasoning_field")


def _drop_client_keys(data: dict[str, Any]) -> None:
    """Out of each client of a hashed dict: ``thinking_opened`` where it is false (the
    default), so that a scenario hashes as it did before the key existed, and the keys that
    measure nothing whatever their value (how long to wait for the server, the id header)."""
    clients = [data.get("client"), *(data.get("clients") or [])]
    for client in clients:
        if not isinstance(client, dict):
            continue
        if client.get("thinking_opened") is False:
            client.pop("thinking_opened")
        client.pop("ready_timeout", None)
        client.pop("request_id_header", None)


def _drop_default_simulator_key(simulator: Any, key: str, default: Any) -> None:
    """The simulator's ``key`` out of a hashed dict where it is ``default`` (or, a served
    model's, unset), so that a scenario hashes as it did before the key existed."""
    if not isinstance(simulator, dict):
        return
    for model in (simulator.get("models") or {}).values():
        if isinstance(model, dict) and model.get(key) is None:
            model.pop(key, None)
    if simulator.get(key) == default:
        simulator.pop(key)


def _drop_unpaired_lengths(data: dict[str, Any]) -> None:
    """A synthetic generator's ``length_pairs`` out of a hashed dict where it is null (lengths
    drawn apart, the default), so that a scenario hashes as it did before the key existed."""
    generator = data.get("session_generator")
    if isinstance(generator, dict) and generator.get("length_pairs", "") is None:
        generator.pop("length_pairs")


def _drop_one_prefix(data: dict[str, Any]) -> None:
    """The text channels' ``shared_prefix_tokens`` (unset) and ``shared_prefix_count`` (1) out
    of a hashed dict at their defaults, so that a scenario hashes as it did before they
    existed."""
    generator = data.get("session_generator")
    channels = generator.get("channels") if isinstance(generator, dict) else None
    for channel in channels if isinstance(channels, list) else []:
        if isinstance(channel, dict) and channel.get("type") == "text":
            if channel.get("shared_prefix_tokens") is None:
                channel.pop("shared_prefix_tokens", None)
            if channel.get("shared_prefix_count") == 1:
                channel.pop("shared_prefix_count", None)


def _drop_no_abandonment(data: dict[str, Any]) -> None:
    """``abandonment`` out of a hashed dict where nothing is abandoned (the default), so that
    a scenario hashes as it did before the section existed."""
    section = data.get("abandonment")
    if isinstance(section, dict) and not section.get("probability"):
        data.pop("abandonment")


def _drop_no_error_budget(data: dict[str, Any]) -> None:
    """The runtime's error stops out of a hashed dict where none is set (the default), so that
    a scenario hashes as it did before they existed."""
    runtime = data.get("runtime")
    if not isinstance(runtime, dict) or runtime.get("max_errors") is not None:
        return
    if runtime.get("max_error_rate") is None:
        runtime.pop("max_error_rate", None)
        if runtime.get("error_rate_window") == 100:
            runtime.pop("error_rate_window")
        runtime.pop("max_errors", None)


def _drop_no_timeslices(data: dict[str, Any]) -> None:
    """Each evaluator's ``timeslice_seconds`` out of a hashed dict: it changes what the
    evaluation reports, not the traffic (and a scenario hashes as before the key existed)."""
    for evaluator in data.get("evaluators") or []:
        if isinstance(evaluator, dict):
            evaluator.pop("timeslice_seconds", None)


def _drop_no_profile(data: dict[str, Any]) -> None:
    """``server_profile`` out of a hashed dict: profiling the server changes where its time is
    recorded, not the traffic (and a scenario hashes as it did before the section existed)."""
    data.pop("server_profile", None)


def _drop_no_cache_reset(data: dict[str, Any]) -> None:
    """``prefix_cache_reset`` out of a hashed dict when off (a scenario hashes as it did before
    the section existed; on, a run starts from a cold cache: another measurement)."""
    section = data.get("prefix_cache_reset")
    if isinstance(section, dict) and not section.get("enabled"):
        data.pop("prefix_cache_reset", None)


def _drop_no_gpu_urls(data: dict[str, Any]) -> None:
    """``server_metrics.gpu_urls`` out of a hashed dict when empty (a scenario hashes as it did
    before the key existed)."""
    metrics = data.get("server_metrics")
    if isinstance(metrics, dict) and not metrics.get("gpu_urls"):
        metrics.pop("gpu_urls", None)


def scenario_hash(scenario: Scenario) -> str:
    """A short, stable hex digest of the resolved scenario, without secrets or ``output_dir``
    (where results go does not change what is measured)."""
    data = resolved_dict(scenario)
    if not data.get("phases"):  # (a run without phases keeps the hash it always had)
        data.pop("phases", None)
    _drop_no_reasoning(data.get("simulator"))  # (likewise a simulator that does not think)
    _drop_default_simulator_key(data.get("simulator"), "image_patch_px", 28)
    _drop_default_simulator_key(data.get("simulator"), "embedding_dims", 64)
    _drop_default_simulator_key(data.get("simulator"), "gpus", 0)
    _drop_default_simulator_key(data.get("simulator"), "gpu_idle_watts", 80.0)
    _drop_default_simulator_key(data.get("simulator"), "gpu_busy_watts", 700.0)
    _drop_default_simulator_key(data.get("simulator"), "cache_reset_api", "vllm")
    _drop_default_simulator_key(data.get("simulator"), "spec_tokens", 0)
    _drop_default_simulator_key(data.get("simulator"), "spec_acceptance", 0.7)
    _drop_default_simulator_key(data.get("simulator"), "loading_s", 0.0)
    _drop_client_keys(data)
    _drop_unpaired_lengths(data)
    _drop_no_abandonment(data)
    _drop_one_prefix(data)
    _drop_no_error_budget(data)
    _drop_no_profile(data)
    _drop_no_cache_reset(data)
    _drop_no_timeslices(data)
    _drop_no_gpu_urls(data)
    for path in _HASH_EXCLUDED:
        holder: Any = data
        for part in path[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder.pop(path[-1], None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]
