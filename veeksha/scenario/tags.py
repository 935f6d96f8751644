"""The YAML tags of scenario files: ``!include`` splices a file, ``!expand`` makes a sweep.

``!include PATH`` (a value anywhere: a section, a key's value, a list item) is replaced by the
content of the YAML file at PATH, relative to the folder of the file that holds the tag. Included
files may include others; a file that includes itself, directly or through others, is refused
with every ``file:line`` of the cycle. Positions stay right: every mapping and list of the
composed tree remembers the file it came from (:class:`Sources`), so an error inside an included
file names that file and its line.

``!expand [a, b, c]`` (a value anywhere, in any file) makes one scenario per value. Several tags
make the Cartesian product, in document order with the FIRST tag outermost (it changes slowest)
and the last innermost: ``rate: !expand [1, 2]`` then ``len: !expand [8, 16]`` gives
(1, 8), (1, 16), (2, 8), (2, 16). A value of an ``!expand`` may hold further ``!expand`` tags;
they apply only to the points that chose that value, right after it (nesting).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.scenario._walk import PathPart

__all__ = [
    "EXPAND_TAG",
    "INCLUDE_TAG",
    "MAX_POINTS",
    "Choice",
    "ExpandSite",
    "Sources",
    "expand",
    "non_text_keys",
    "parse_document",
    "read_text",
    "refuse_tags",
    "resolve_includes",
    "tag_name",
]

INCLUDE_TAG = "!include"
EXPAND_TAG = "!expand"
#: A sweep larger than this is refused (a typo such as a nested product, not an experiment).
MAX_POINTS = 10_000
_KNOWN = (INCLUDE_TAG, EXPAND_TAG)


@dataclass
class Sources:
    """Which file each mapping and list of a composed tree came from (by object identity)."""

    files: dict[int, str] = field(default_factory=dict)
    _keep: list[Any] = field(default_factory=list)

    def add(self, node: Any, file: str) -> None:
        if id(node) not in self.files:
            self.files[id(node)] = file
            self._keep.append(node)  # ids stay unique while the tree lives

    def file_of(self, node: Any, default: str) -> str:
        return self.files.get(id(node), default)


@dataclass(frozen=True)
class ExpandSite:
    """Where an ``!expand`` tag is: its file, 1-based line and column, and its key path in the
    composed scenario."""

    file: str
    line: int
    column: int
    path: tuple[PathPart, ...]


@dataclass(frozen=True)
class Choice:
    """The value one point takes at one ``!expand`` site (``index`` into the tag's list)."""

    site: ExpandSite
    index: int
    value: Any
    node: Any  # the tag's list, to follow the choice when locating errors


def tag_name(node: Any) -> str | None:
    """The explicit tag of a round-trip node (``!expand``), or None."""
    tag = getattr(node, "tag", None)
    value = getattr(tag, "value", None) if tag is not None else None
    return value if isinstance(value, str) else None


def read_text(path: str | Path, source: str | None = None) -> str:
    """The text of a file veeksha reads (``source``: its name in messages); raise
    :class:`ScenarioError` naming the file, and for bytes that are not UTF-8 their line and
    column, in one line."""
    source = str(path) if source is None else source
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ScenarioError(
            [ScenarioIssue(source, None, None, "", f"cannot read the file: {reason}")]
        ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = (
            len(data[data.rfind(b"\n", 0, exc.start) + 1 : exc.start].decode("utf-8", "replace"))
            + 1
        )
        byte = data[exc.start : exc.start + 1].hex()
        message = f"not a text file in UTF-8 (byte 0x{byte} here is not UTF-8); save it as UTF-8"
        raise ScenarioError([ScenarioIssue(source, line, column, "", message)]) from None


def parse_document(text: str, source: str) -> Any:
    """Parse YAML text with round-trip positions; raise :class:`ScenarioError` at the error,
    one line in veeksha's words (every file veeksha reads goes through here: a scenario, an
    included file, a capacity search file, a microbenchmark's config)."""
    try:
        return YAML(typ="rt").load(text)
    except YAMLError as exc:
        line, column, message = _syntax_error(exc, text)
        raise ScenarioError([ScenarioIssue(source, line, column, "", message)]) from None


_DUPLICATE = re.compile(r'found duplicate key "(?P<key>.*?)" with value')


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _syntax_error(exc: YAMLError, text: str) -> tuple[int | None, int | None, str]:
    """Where a YAML error is (1-based line and column, None when unknown) and what it is, as
    one line: never ruamel's multi-line report, nor the Python repr of a value it quotes."""
    if isinstance(exc, ReaderError):  # a character YAML does not allow (NUL, a control code)
        before = text[: exc.position]
        at_line = before.count("\n") + 1
        at_column = exc.position - (before.rfind("\n") + 1) + 1
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1])
        return (
            at_line,
            at_column,
            f"YAML syntax error: the character #x{code:04x} is not allowed in YAML ({exc.reason});"
            ' remove it (or quote it as an escape, e.g. "\\x00")',
        )
    if not isinstance(exc, MarkedYAMLError):
        return None, None, f"YAML syntax error: {_one_line(exc)}"
    mark = exc.problem_mark or exc.context_mark
    line: int | None = None if mark is None else mark.line + 1
    column: int | None = None if mark is None else mark.column + 1
    duplicate = _DUPLICATE.search(str(exc.problem or ""))
    if isinstance(exc, DuplicateKeyError) and duplicate is not None:
        start = exc.context_mark
        opened = f" in the mapping that starts at line {start.line + 1}" if start else ""
        return (
            line,
            column,
            f"YAML syntax error: duplicate key {duplicate.group('key')!r}{opened}; give each key"
            " once",
        )
    if "expected a single document" in str(exc.context):
        return (
            line,
            column,
            "YAML syntax error: a second document (---) in the file; the file is one YAML"
            " document: remove the --- and what follows it",
        )
    if "'\\t'" in str(exc.problem):
        return (
            line,
            column,
            "YAML syntax error: a tab character; YAML indents with spaces: replace the tab by"
            " spaces",
        )
    explained = _explained(exc, text, line, column)
    if explained is not None:
        return line, column, f"YAML syntax error: {explained}"
    message = f"YAML syntax error: {_one_line(exc.problem or exc.context)}"
    if exc.context and exc.problem and exc.context_mark is not None:
        message += f" ({_one_line(exc.context)} at line {exc.context_mark.line + 1})"
    return line, column, message


def _explained(exc: MarkedYAMLError, text: str, line: int | None, column: int | None) -> str | None:
    """The mistakes behind YAML's commonest complaints, said with their fix (None: another)."""
    problem, context = str(exc.problem or ""), str(exc.context or "")
    lines = text.splitlines()
    if problem.startswith("mapping values are not allowed") and line and column:
        here = lines[line - 1] if line <= len(lines) else ""
        key = here[: column - 1].strip()
        above = next((t for t in reversed(lines[: line - 1]) if t.strip()), "")
        deeper = _indent(here) > _indent(above) and not above.rstrip().endswith(":")
        if deeper and ":" in above:
            return (
                f"'{key}:' is indented more than the line above it, whose key has a value "
                "already, so YAML reads it as more of that value: indent it as the keys beside "
                "it (or quote a value that holds ': ')"
            )
        name, _, value = here.strip().partition(": ")
        return f"a value holds ': ' ({here.strip()!r}): quote the value, {name}: \"{value}\""
    if context.startswith("while scanning a quoted scalar") and exc.context_mark is not None:
        opened = exc.context_mark
        return (
            f"the quote opened at line {opened.line + 1}, column {opened.column + 1}, is not "
            "closed: end the value with the same quote"
        )
    if context.startswith("while parsing a flow"):
        opener = _unclosed(text)
        if opener is not None:
            where, mark = opener
            closer = "]" if mark == "[" else "}"
            return (
                f"the {mark} opened at line {where[0]}, column {where[1]}, is not closed "
                f"({_one_line(problem)}): close it with {closer}, or quote a value that "
                f"starts with {mark}"
            )
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _unclosed(text: str) -> tuple[tuple[int, int], str] | None:
    """Where the first ``[`` or ``{`` still open at the end of ``text`` is (line, column,
    1-based) and which; outside quotes and comments, as YAML's flow collections nest."""
    stack: list[tuple[tuple[int, int], str]] = []
    for number, content in enumerate(text.splitlines(), start=1):
        quote = ""
        for index, char in enumerate(content):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (index == 0 or content[index - 1].isspace()):
                break
            elif char in "[{":
                stack.append(((number, index + 1), char))
            elif char in "]}" and stack:
                stack.pop()
    return stack[0] if stack else None


def non_text_keys(
    node: Any, source: str, sources: Sources | None = None, path: tuple[PathPart, ...] = ()
) -> list[ScenarioIssue]:
    """Every mapping key below ``node`` that is not text (``1:``, ``null:``, ``true:``, a list,
    a tagged key), at its line: a key names a section or an option, and is text."""
    issues: list[ScenarioIssue] = []
    if not isinstance(node, CommentedMap | CommentedSeq):
        return issues
    file = sources.file_of(node, source) if sources is not None else source
    for key, child in _children(node):
        if isinstance(node, CommentedMap) and not isinstance(key, str):
            from veeksha.scenario.messages import shown  # (only for a file with a mistake)

            try:
                line, column = node.lc.key(key)
            except (KeyError, TypeError):
                line, column = node.lc.line, node.lc.col
            written = shown(key)
            issues.append(
                ScenarioIssue(
                    file,
                    line + 1,
                    column + 1,
                    _key_path((*path, written)),
                    f"a key is a name, and this one is {_kind_of(key)}; remove it, or quote it if"
                    f' it is a name: "{written}"',
                )
            )
            continue
        issues += non_text_keys(child, file, sources, (*path, key))
    return issues


def _kind_of(key: Any) -> str:
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "a boolean"
    if isinstance(key, int | float):
        return "a number"
    if tag_name(key) is not None:
        return f"a tagged value ({tag_name(key)} tags a value, not a key)"
    return "a list" if isinstance(key, list | tuple) else "a mapping"


def refuse_tags(
    node: Any, source: str, what: str, skip: tuple[str, ...] = ()
) -> list[ScenarioIssue]:
    """Every tagged value (``!expand``, ``!include``, any ``!tag``) below ``node`` but under
    its keys ``skip``, refused at its line: ``what`` (a microbenchmark's config, a capacity
    search's own keys) takes plain values; only a scenario reads veeksha's tags."""
    issues: list[ScenarioIssue] = []
    for key, child in _children(node):
        if key in skip:
            continue
        tag = tag_name(child)
        if tag is not None and tag.startswith("!"):
            line, column = _value_position(node, key)
            fix = "write the value itself" if tag in _KNOWN else "remove it"
            known = "" if tag in _KNOWN else " (veeksha knows !expand and !include, in scenarios)"
            issues.append(
                ScenarioIssue(
                    source,
                    line,
                    column,
                    "",
                    f"{tag}{known}: {what} takes no tags; {fix}",
                )
            )
            continue
        issues += refuse_tags(child, source, what)
    return issues


def _value_position(parent: Any, key: Any) -> tuple[int, int]:
    """1-based line and column of the value at ``key`` of a round-trip container."""
    try:
        if isinstance(parent, CommentedMap):
            line, column = parent.lc.value(key)
        else:
            line, column = parent.lc.item(key)
    except (KeyError, IndexError, TypeError, AttributeError):
        line, column = parent.lc.line, parent.lc.col
    return line + 1, column + 1


def _children(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, CommentedMap):
        yield from list(node.items())
    elif isinstance(node, CommentedSeq):
        yield from list(enumerate(node))


def _where(file: str, line: int, column: int) -> str:
    return f"{file}:{line}:{column}"


def resolve_includes(root: Any, source: str, sources: Sources) -> list[ScenarioIssue]:
    """Replace every ``!include`` of ``root`` (read from ``source``) by the file it names, in
    place; record each container's file in ``sources``. Returns the problems found (missing
    file, cycle, bad tag value), each at its ``file:line:column``."""
    issues: list[ScenarioIssue] = []
    start = os.path.realpath(source)
    _resolve(root, source, sources, [(start, source, None)], issues)
    return issues


def _resolve(
    node: Any,
    file: str,
    sources: Sources,
    chain: list[tuple[str, str, str | None]],
    issues: list[ScenarioIssue],
) -> None:
    if not isinstance(node, CommentedMap | CommentedSeq):
        return
    sources.add(node, file)
    for key, child in _children(node):
        tag = tag_name(child)
        if tag == INCLUDE_TAG:
            line, column = _value_position(node, key)
            loaded = _include(child, file, line, column, sources, chain, issues)
            if loaded is not None:
                node[key] = loaded
            continue
        if tag is not None and tag.startswith("!") and tag not in _KNOWN:
            line, column = _value_position(node, key)
            issues.append(
                ScenarioIssue(
                    file, line, column, "", f"unknown tag {tag}: veeksha knows !expand and !include"
                )
            )
            continue
        _resolve(child, file, sources, chain, issues)


def _include(
    node: Any,
    file: str,
    line: int,
    column: int,
    sources: Sources,
    chain: list[tuple[str, str, str | None]],
    issues: list[ScenarioIssue],
) -> Any:
    """The content of the file an ``!include`` names, its own includes resolved (None: refused,
    with the issue added)."""
    here = _where(file, line, column)
    target = node.value if isinstance(node, TaggedScalar) else None
    if not isinstance(target, str) or not target.strip():
        issues.append(
            ScenarioIssue(
                file, line, column, "", "!include takes one file path, e.g. !include client.yaml"
            )
        )
        return None
    shown = os.path.normpath(os.path.join(os.path.dirname(file), target.strip()))
    real = os.path.realpath(shown)
    for index, (seen_real, seen_file, _site) in enumerate(chain):
        if seen_real == real:
            steps = [site for _, _, site in chain[index + 1 :] if site is not None]
            path = " -> ".join([*steps, f"{here} !include {target}"])
            issues.append(
                ScenarioIssue(
                    file,
                    line,
                    column,
                    "",
                    f"!include cycle: {path} comes back to {seen_file}, which is already being "
                    "read; remove one of these includes",
                )
            )
            return None
    try:
        text = Path(shown).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        reason = "not a text file (UTF-8 expected)"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    else:
        reason = ""
    if reason:
        issues.append(
            ScenarioIssue(
                file,
                line,
                column,
                "",
                f"!include {target}: cannot read {shown!r} ({reason}); the path is relative to "
                "the folder of the including file",
            )
        )
        return None
    try:
        loaded = parse_document(text, shown)
    except ScenarioError as exc:
        issues.extend(exc.issues)
        return None
    if loaded is None:
        issues.append(
            ScenarioIssue(shown, None, None, "", f"the file is empty (included at {here})")
        )
        return None
    if tag_name(loaded) == INCLUDE_TAG:
        issues.append(
            ScenarioIssue(shown, 1, 1, "", "a file cannot be only an !include; include the file")
        )
        return None
    _resolve(loaded, shown, sources, [*chain, (real, shown, f"{here} !include {target}")], issues)
    return loaded


# ------------------------------------------------------------------------------------ expand


def _plain_scalar(value: Any) -> Any:
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


Variant = tuple[Any, tuple[Choice, ...]]


class _Expander:
    def __init__(self, root_file: str, sources: Sources) -> None:
        self.root_file = root_file
        self.sources = sources
        self.issues: list[ScenarioIssue] = []
        self.seen: set[tuple[str, int, int]] = set()

    def _issue(self, file: str, line: int, column: int, message: str, key: str = "") -> None:
        if (file, line, column) not in self.seen:
            self.seen.add((file, line, column))
            self.issues.append(ScenarioIssue(file, line, column, key, message))

    def variants(self, node: Any, path: tuple[PathPart, ...]) -> list[Variant]:
        if isinstance(node, CommentedMap | CommentedSeq):
            keys = list(node.keys()) if isinstance(node, CommentedMap) else list(range(len(node)))
            per_child: list[list[Variant]] = []
            for key in keys:
                per_child.append(self.child_variants(node, key, path))
            out: list[Variant] = []
            for combo in itertools.product(*per_child):
                choices = tuple(c for _, chosen in combo for c in chosen)
                if isinstance(node, CommentedMap):
                    pairs = zip(keys, combo, strict=True)
                    out.append(({_plain_scalar(k): v for k, (v, _) in pairs}, choices))
                else:
                    out.append(([v for v, _ in combo], choices))
                if len(out) > MAX_POINTS:
                    break
            return out
        if isinstance(node, TaggedScalar):
            return [(_plain_scalar(node.value), ())]
        return [(_plain_scalar(node), ())]

    def child_variants(self, parent: Any, key: Any, path: tuple[PathPart, ...]) -> list[Variant]:
        child = parent[key]
        here = (*path, _plain_scalar(key))
        if tag_name(child) != EXPAND_TAG:
            return self.variants(child, here)
        file = self.sources.file_of(parent, self.root_file)
        line, column = _value_position(parent, key)
        if not isinstance(child, CommentedSeq):
            shown = child.value if isinstance(child, TaggedScalar) else "a mapping"
            self._issue(
                file,
                line,
                column,
                f"!expand takes a list of values, e.g. !expand [4, 8, 16] (got {shown!r})",
                _key_path(here),
            )
            return [(None, ())]
        if not child:
            self._issue(
                file,
                line,
                column,
                "!expand of an empty list makes no run; give at least one value",
                _key_path(here),
            )
            return [(None, ())]
        site = ExpandSite(file, line, column, here)
        out: list[Variant] = []
        for index in range(len(child)):
            for value, inner in self.variants(child[index], here):
                out.append((value, (Choice(site, index, value, child), *inner)))
        return out


def _key_path(parts: tuple[PathPart, ...]) -> str:
    """``traffic_scheduler.interval_generator.arrival_rate``: the tag's key, as problems name
    it (imported here only for a bad tag)."""
    from veeksha.scenario.overrides import format_path

    return format_path(parts)


def expand(root: CommentedMap, root_file: str, sources: Sources) -> list[Variant]:
    """Every point of the composed tree: its plain data and the choice it made at each
    ``!expand`` (in the order of the module doc). Raises :class:`ScenarioError` for a bad tag
    (not a list, empty) or more than :data:`MAX_POINTS` points."""
    expander = _Expander(root_file, sources)
    points = expander.variants(root, ())
    if expander.issues:
        raise ScenarioError(expander.issues)
    if len(points) > MAX_POINTS:
        raise ScenarioError(
            [
                ScenarioIssue(
                    root_file,
                    None,
                    None,
                    "",
                    f"the !expand tags make more than {MAX_POINTS} runs; sweep fewer values",
                )
            ]
        )
    return points
