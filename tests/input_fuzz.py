"""A deterministic mutation fuzzer of veeksha's input files, and its oracle.

The standard for bad input (README.md, docs/scenario.md "Errors"): a clear error that names the
file, line, key and fix, exit code 2, one line per problem, never a traceback; a valid file's
dry run does not crash. This module makes the inputs and judges the outcome:

- **seeds**: every scenario of ``scenarios/`` (and ``scenarios/traces/``), the capacity search
  file, and every ```yaml example of README.md and docs/*.md (scenarios, fragments wrapped
  into their section, the microbenchmarks' config files; ``# not a scenario`` blocks are not);
- **mutants** (:func:`mutants`): each seed's YAML tree with one key dropped, a value of the
  wrong type (str, int, list, mapping, null, bool), a bad number (negative, zero, huge, NaN,
  infinite), an empty string or list, an unknown key (a typo of a real one, or a stranger), a
  bad enum value, an ``!expand`` in an odd place, a path (trace file, tokenizer, include, the
  search's scenario) that does not exist or is a directory; and text-level faults: a duplicate
  key, a bad indent, a tab, an unclosed quote or bracket, bytes that are not UTF-8, an empty
  file, a root that is a list or a scalar; plus a directory and a missing file in place of the
  file. Each seed's mutants come from a ``random.Random`` seeded with the seed's name and the
  fuzzer's seed, so a run is the same on every machine;
- **the oracle** (:func:`judge`): ``veeksha validate FILE`` (in-process, through the CLI's
  ``main``) exits 0 or 2; at 2 every line of stderr names the file (the mutant's, or an
  included file's) and, for a problem of a key, its line and the key path; no traceback, no
  pydantic wording without ours, no repr of a Python object, no ``None`` where a message
  belongs. A microbenchmark's config goes through its command with the benchmark itself
  replaced by a stand-in (nothing runs). A valid scenario's dry run (``veeksha run FILE
  --dry-run``, a short runtime) exits 0, 2, 3, 4 or 5 (README.md) without a traceback:
  :func:`dry_run_subprocess`.

``tests/unit/test_input_fuzz.py`` runs a fixed sample on every test run; ``python -m
tests.input_fuzz`` runs them all (``--dry-runs N`` dry-runs N of the valid mutants in
subprocesses) and prints each defect found.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar

from tests.doc_examples import (
    CONFIG_FILE,
    FRAGMENT,
    NOT_A_SCENARIO,
    ROOT,
    Block,
    all_blocks,
    included_names,
)

#: The fuzzer's default seed (``--seed``).
SEED = 20261201

#: Exit codes a dry run may end with (README.md, "Exit codes").
DRY_RUN_EXITS = frozenset({0, 2, 3, 4, 5})

#: The overrides a valid mutant's dry run gets: a short runtime, so it finishes fast.
DRY_RUN_OVERRIDES = ("runtime.benchmark_timeout=3",)


# ------------------------------------------------------------------------------------ seeds


@dataclass(frozen=True)
class Seed:
    """A valid input file: its name, what reads it (``scenario``, which ``veeksha validate``
    reads, a scenario or a capacity search; or ``prefill``, ``decode``, ``stress``), its text,
    and the files beside it it ``!include``s (name → text)."""

    name: str
    kind: str
    text: str
    siblings: tuple[tuple[str, str], ...] = ()


def _wrapped(text: str, path: str) -> str:
    out = [("  " * depth) + f"{key}:" for depth, key in enumerate(path.split("."))]
    return "\n".join(out) + "\n" + textwrap.indent(text, "  " * len(path.split(".")))


def _block_seed(block: Block, siblings: list[Block]) -> Seed | None:
    first = block.first_line
    if not block.text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in block.text.splitlines()
    ):
        return None
    if NOT_A_SCENARIO.match(first):
        return None
    named = tuple((b.name, b.text) for b in siblings if b.name and b is not block)
    config = CONFIG_FILE.match(first)
    if config:
        command = config.group("command")
        kind = "scenario" if command == "capacity-search" else command
        return Seed(block.where, kind, block.text, named)
    if block.name and block.name in included_names([b for b in siblings if b is not block]):
        return None  # fuzzed through the block that includes it
    fragment = FRAGMENT.match(first)
    text = _wrapped(block.text, fragment.group(1)) if fragment else block.text
    return Seed(block.where, "scenario", text, named)


def seeds() -> list[Seed]:
    """Every seed, in a fixed order."""
    out: list[Seed] = []
    for path in sorted([*ROOT.glob("scenarios/*.yaml"), *ROOT.glob("scenarios/traces/*.yaml")]):
        out.append(Seed(str(path.relative_to(ROOT)), "scenario", path.read_text("utf-8")))
    blocks = all_blocks("yaml")
    for block in blocks:
        siblings = [b for b in blocks if b.page == block.page]
        seed = _block_seed(block, siblings)
        if seed is not None:
            out.append(seed)
    return out


# ---------------------------------------------------------------------------------- mutants


@dataclass(frozen=True)
class Mutant:
    """One input: the seed it came from, the mutation (``class: detail``), and what to write:
    ``text`` (str or bytes), or ``edit`` of the seed's tree, or ``shape`` ``dir`` (a directory
    in the file's place) or ``missing`` (no file at all)."""

    seed: Seed
    mutation: str
    text: str | bytes = ""
    shape: str = "file"
    edit: TreeEdit | None = None  # made from the seed's tree when written

    def content(self) -> str | bytes:
        if self.edit is None:
            return self.text
        return self.edit.apply(copy.deepcopy(_tree_of(self.seed)))

    @property
    def cls(self) -> str:
        return self.mutation.split(":", 1)[0]


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.width = 4096
    return yaml


def _load(text: str) -> Any:
    return _yaml().load(text)


def _dump(tree: Any) -> str:
    stream = io.StringIO()
    _yaml().dump(tree, stream)
    return stream.getvalue()


Path_ = tuple[Any, ...]


def _walk(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every (key path, value) below ``node``, depth first, in document order."""
    if isinstance(node, CommentedMap):
        for key, value in node.items():
            yield (*path, key), value
            yield from _walk(value, (*path, key))
    elif isinstance(node, CommentedSeq):
        for index, value in enumerate(node):
            yield (*path, index), value
            yield from _walk(value, (*path, index))


def _holder(tree: Any, path: Path_) -> Any:
    node = tree
    for part in path[:-1]:
        node = node[part]
    return node


def _typo(key: str, rng: random.Random) -> str:
    """A near miss of ``key``: two letters swapped, one dropped, or one doubled."""
    if len(key) < 3:
        return key + key[-1]
    i = rng.randrange(1, len(key) - 1)
    choice = rng.randrange(3)
    if choice == 0 and key[i] != key[i + 1]:
        return key[:i] + key[i + 1] + key[i] + key[i + 2 :]
    if choice == 1:
        return key[:i] + key[i + 1 :]
    return key[:i] + key[i] + key[i:]


#: Values of the wrong type, by name.
WRONG_TYPES: dict[str, Callable[[], Any]] = {
    "str": lambda: "some text",
    "int": lambda: 7,
    "float": lambda: 2.5,
    "list": lambda: CommentedSeq([1, 2]),
    "dict": lambda: CommentedMap([("a", 1)]),
    "null": lambda: None,
    "bool": lambda: True,
}

#: Bad numbers, by name.
NUMBERS: dict[str, Any] = {
    "negative": -3,
    "negative_float": -0.5,
    "zero": 0,
    "huge_int": 10**30,
    "huge_float": 1e300,
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "tiny": 1e-300,
}

#: Keys whose values are paths of files veeksha reads.
PATH_KEYS = ("trace_file", "path", "benchmark_config")


def _tree_mutants(tree: Any, rng: random.Random) -> Iterator[tuple[str, TreeEdit]]:
    """(mutation, edit) of every mutation of the parsed tree."""
    entries = list(_walk(tree))
    for path, value in entries:
        where = _shown(path)
        yield f"drop: {where}", TreeEdit(path, "drop")
        for name in WRONG_TYPES:
            if _type_name(value) != name:
                yield f"wrong_type: {where} -> {name}", TreeEdit(path, "type", name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            for name in NUMBERS:
                yield f"number: {where} -> {name}", TreeEdit(path, "number", name)
        if isinstance(value, str):
            yield f"empty: {where} -> ''", TreeEdit(path, "set", "")
            yield f"enum: {where} -> {value}x", TreeEdit(path, "set", value + "x")
            upper = value.upper() if value != value.upper() else "Q"
            yield f"enum: {where} -> {upper}", TreeEdit(path, "set", upper)
        if isinstance(value, CommentedSeq):
            yield f"empty: {where} -> []", TreeEdit(path, "empty_list")
        if isinstance(value, CommentedMap):
            yield f"empty: {where} -> {{}}", TreeEdit(path, "empty_map")
            yield f"expand: {where} -> tag on a mapping", TreeEdit(path, "tag_map")
        yield f"expand: {where} -> two of its value", TreeEdit(path, "expand_twice")
        yield f"expand: {where} -> !expand 3", TreeEdit(path, "tagged", "!expand", "3")
        yield f"expand: {where} -> !expand []", TreeEdit(path, "expand_empty")
        yield f"tag: {where} -> unknown tag", TreeEdit(path, "tagged", "!nonsense", "x")
        yield (
            f"include: {where} -> missing file",
            TreeEdit(path, "tagged", "!include", "nowhere.yaml"),
        )
        if isinstance(path[-1], str) and path[-1] in PATH_KEYS and isinstance(value, str):
            for name, target in PATH_TARGETS.items():
                yield f"path: {where} -> {name}", TreeEdit(path, "set", target)
    # two mistakes in one file: both reported (nothing lost)
    numbers = [
        path
        for path, value in entries
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]
    for _ in range(min(3, len(numbers) // 2)):
        first, second = sorted(rng.sample(numbers, 2))
        if second[: len(first)] == first:
            continue
        pair = TreeEdit((), "pair", TreeEdit(first, "type", "str"), TreeEdit(second, "type", "str"))
        yield f"pair: {key_path(first)} & {key_path(second)}", pair
    # unknown keys at each level: a typo of a real key, and a stranger
    for path, value in [((), tree), *entries]:
        if not isinstance(value, CommentedMap) or not value:
            continue
        keys = [k for k in value if isinstance(k, str)]
        if not keys:
            continue
        key = rng.choice(keys)
        typo = _typo(key, rng)
        if typo not in value:
            edit = TreeEdit(path, "add_key", typo)
            yield f"unknown_key: {_shown((*path, typo))} (near {key})", edit
        yield (
            f"unknown_key: {_shown((*path, 'zzz_stranger'))}",
            TreeEdit(path, "add_key", "zzz_stranger"),
        )
        for name, odd in ODD_KEYS.items():
            yield f"odd_key: {_shown(path)} -> {name} key", TreeEdit(path, "add_key", odd)


#: Mapping keys that are not text, by name.
ODD_KEYS: dict[str, Any] = {"int": 1, "null": None, "bool": True, "float": 2.5}

#: Path values that name no readable file, by name (``{folder}``: the mutant's folder, where
#: ``empty`` and ``binary`` are written beside it).
PATH_TARGETS = {
    "missing": "no/such/file.csv",
    "directory": "scenarios",
    "through a file": "README.md/x",
    "empty file": "{folder}/empty",
    "binary file": "{folder}/binary",
    "dangling link": "{folder}/dangling",
}


def key_path(path: Path_) -> str:
    """A key path as messages write it: ``evaluators[0].slos[1].value``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _shown(path: Path_) -> str:
    return ".".join(str(p) for p in path) or "<root>"


@dataclass(frozen=True)
class TreeEdit:
    """One change of a parsed tree at ``path``: ``action`` with its arguments."""

    path: Path_
    action: str
    arg: Any = None
    arg2: Any = None

    def apply(self, tree: Any) -> str:
        self.edit(tree)
        return _dump(tree)

    def edit(self, tree: Any) -> None:
        """Change ``tree`` in place."""
        if self.action == "pair":
            for edit in (self.arg2, self.arg):
                edit.edit(tree)
            return
        if self.action == "add_key":
            node = tree if not self.path else _holder(tree, self.path)[self.path[-1]]
            node[self.arg] = 1
            return
        holder, key = _holder(tree, self.path), self.path[-1]
        value = holder[key]
        new: Any
        if self.action == "drop":
            del holder[key]
            return
        if self.action == "type":
            new = WRONG_TYPES[self.arg]()
        elif self.action == "number":
            new = NUMBERS[self.arg]
        elif self.action == "set":
            new = self.arg
        elif self.action == "empty_list":
            new = CommentedSeq()
        elif self.action == "empty_map":
            new = CommentedMap()
        elif self.action == "tag_map":
            value.yaml_set_ctag(_tag("!expand"))
            return
        elif self.action == "expand_twice":
            new = _expand([_plain(value), _plain(value)])
        elif self.action == "expand_empty":
            new = _expand([])
        elif self.action == "tagged":
            new = TaggedScalar(self.arg2, tag=self.arg)
        else:
            raise ValueError(self.action)
        holder[key] = new


def _tag(name: str) -> Any:
    from ruamel.yaml.tag import Tag

    return Tag(suffix=name)


def _expand(values: list[Any]) -> CommentedSeq:
    seq = CommentedSeq(values)
    seq.yaml_set_ctag(_tag("!expand"))
    seq.fa.set_flow_style()
    return seq


def _plain(value: Any) -> Any:
    if isinstance(value, CommentedMap):
        return CommentedMap((k, _plain(v)) for k, v in value.items())
    if isinstance(value, CommentedSeq):
        return CommentedSeq(_plain(v) for v in value)
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "list"
    return "dict"


_KEY_LINE = re.compile(r"^(?P<indent>[ -]*)(?P<key>[A-Za-z_][\w]*):(?P<rest>.*)$")


def _text_mutants(seed: Seed, rng: random.Random) -> Iterator[tuple[str, str | bytes]]:
    """(mutation, text) of the faults written into the text itself."""
    lines = seed.text.splitlines(keepends=True)
    key_lines = [i for i, line in enumerate(lines) if _KEY_LINE.match(line)]
    picks = rng.sample(key_lines, min(4, len(key_lines)))
    for i in picks:
        match = _KEY_LINE.match(lines[i])
        assert match is not None
        indent = match.group("indent").replace("-", " ")
        key = match.group("key")
        # duplicate key: the same key again right after this line's block
        end = i + 1
        depth = len(match.group("indent"))
        while end < len(lines) and (
            not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip(" -")) > depth
        ):
            end += 1
        dup = f"{indent}{key}: 1\n"
        yield f"duplicate_key: line {i + 1} {key}", "".join([*lines[:end], dup, *lines[end:]])
        yield (
            f"syntax: bad indent line {i + 1}",
            "".join([*lines[:i], " " + lines[i], *lines[i + 1 :]]),
        )
        if lines[i].startswith(" "):
            stripped = lines[i].lstrip(" ")
            yield (
                f"syntax: tab line {i + 1}",
                "".join([*lines[:i], "\t" + stripped, *lines[i + 1 :]]),
            )
        yield (
            f"syntax: unclosed quote line {i + 1}",
            "".join([*lines[:i], f'{indent}{key}: "open\n', *lines[i + 1 :]]),
        )
        yield (
            f"syntax: unclosed bracket line {i + 1}",
            "".join([*lines[:i], f"{indent}{key}: [1, 2\n", *lines[i + 1 :]]),
        )
        raw = seed.text.encode("utf-8")
        at = sum(len(line.encode("utf-8")) for line in lines[:i]) + len(indent)
        yield f"bytes: not UTF-8 at line {i + 1}", raw[:at] + b"\xff\xfe" + raw[at:]
    yield "bytes: a latin-1 comment", seed.text.encode("utf-8") + "# caf\xe9\n".encode("latin-1")
    yield "bytes: UTF-8 byte order mark", "\ufeff" + seed.text
    yield "bytes: NUL byte", seed.text + "\x00\n"
    yield "empty: empty file", ""
    yield "empty: only a comment", "# nothing here\n"
    yield "empty: only whitespace", "\n   \n"
    yield "root: a list", "- a\n- b\n"
    yield "root: a scalar", "42\n"
    yield "root: a string", "hello\n"
    yield "root: null document", "~\n"
    yield "root: two documents", seed.text + "---\nseed: 1\n"
    yield "root: !expand on the root", "!expand [1, 2]\n"
    yield "anchor: undefined alias", seed.text + "extra_alias: *nowhere\n"
    yield "anchor: merge key of a scalar", "<<: 5\n" + seed.text
    yield "include: self", "!include self.yaml\n"


_TREES: dict[str, Any] = {}


def _tree_of(seed: Seed) -> Any:
    """The seed's parsed tree (parsed once per process; each mutant edits a copy)."""
    if seed.name not in _TREES:
        _TREES[seed.name] = _load(seed.text)
    return _TREES[seed.name]


def mutants(seed: Seed, fuzz_seed: int = SEED) -> list[Mutant]:
    """Every mutant of ``seed``, in a fixed order (random choices seeded by the seed's name)."""
    rng = random.Random(zlib.crc32(seed.name.encode()) ^ fuzz_seed)
    tree = _tree_of(seed)
    out = [Mutant(seed, "seed: unchanged", seed.text)]
    if tree is not None:
        out += [Mutant(seed, name, edit=edit) for name, edit in _tree_mutants(tree, rng)]
    out += [Mutant(seed, name, text) for name, text in _text_mutants(seed, rng)]
    out.append(Mutant(seed, "shape: a directory", shape="dir"))
    out.append(Mutant(seed, "shape: missing file", shape="missing"))
    return out


def all_mutants(fuzz_seed: int = SEED) -> list[Mutant]:
    return [m for seed in seeds() for m in mutants(seed, fuzz_seed)]


def sample(items: list[Mutant], count: int, fuzz_seed: int = SEED) -> list[Mutant]:
    """``count`` mutants spread over every mutation class and seed (deterministic)."""
    rng = random.Random(fuzz_seed)
    by_class: dict[str, list[Mutant]] = {}
    for item in items:
        by_class.setdefault(item.cls, []).append(item)
    chosen: list[Mutant] = []
    pools = {cls: rng.sample(group, len(group)) for cls, group in sorted(by_class.items())}
    while len(chosen) < count and any(pools.values()):
        for pool in pools.values():
            if pool and len(chosen) < count:
                chosen.append(pool.pop())
    return chosen


# ------------------------------------------------------------------------------------ files


@dataclass
class Written:
    """A mutant written into a folder: the path given to the command."""

    path: Path
    folder: Path


def write(mutant: Mutant, folder: Path) -> Written:
    """Write ``mutant`` (and the seed's siblings, and the path targets) into ``folder``."""
    for name, text in mutant.seed.siblings:
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "empty").write_bytes(b"")
    (folder / "binary").write_bytes(bytes(range(256)) * 4)
    (folder / "dangling").symlink_to(folder / "nothing")
    name = Path(mutant.seed.name.replace(":", "_")).name
    if not name.endswith((".yaml", ".yml")):
        name += ".yaml"
    path = folder / name
    if mutant.shape == "dir":
        path.mkdir()
    elif mutant.shape == "file":
        data = mutant.content()
        if isinstance(data, str):
            data = data.replace("!include self.yaml", f"!include {name}")
            data = data.replace("{folder}", str(folder))
            path.write_bytes(data.encode("utf-8"))
        else:
            path.write_bytes(data)
    return Written(path, folder)


# ------------------------------------------------------------------------------------ oracle


@dataclass
class Outcome:
    """What a command did with a mutant."""

    exit_code: int
    stdout: str
    stderr: str
    exception: str = ""


@dataclass
class Defect:
    mutant: Mutant
    kind: str
    detail: str
    outcome: Outcome = field(repr=False, default_factory=lambda: Outcome(0, "", ""))

    def __str__(self) -> str:
        return f"[{self.kind}] {self.mutant.seed.name} | {self.mutant.mutation} | {self.detail}"


def _stand_in(*args: Any, **kwargs: Any) -> tuple[Path, dict[str, Any]]:
    raise _Ran()


class _Ran(Exception):
    """The microbenchmark's loader accepted the file (the stand-in of its run was reached)."""


def run_validate(written: Written, kind: str) -> Outcome:
    """``veeksha validate FILE`` (or the microbenchmark's command with ``--config FILE``, its
    benchmark replaced by a stand-in) in this process, from the repository's root."""
    from unittest import mock

    from veeksha import cli

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        if kind == "scenario":
            result = CliRunner().invoke(
                cli.main, ["validate", str(written.path)], prog_name="veeksha"
            )
        else:
            module = f"veeksha.experiment.microbench.{kind}"
            with mock.patch(f"{module}.run_{kind}", _stand_in):
                result = CliRunner().invoke(
                    cli.main, [kind, "--config", str(written.path)], prog_name="veeksha"
                )
            if isinstance(result.exception, _Ran):
                return Outcome(0, result.stdout, result.stderr)
    finally:
        os.chdir(cwd)
    exception = ""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        exception = "".join(
            traceback.format_exception(
                type(result.exception), result.exception, result.exception.__traceback__
            )
        )
    return Outcome(result.exit_code, result.stdout, result.stderr, exception)


#: Words of pydantic (or Python) that a message must not show without veeksha's own.
_INTERNALS = (
    "Input should be",
    "instance of",
    "errors.pydantic.dev",
    "For further information",
    "validation error",
    "Traceback",
    "Error: None",
    "object at 0x",
    "CommentedMap",
    "CommentedSeq",
    "ordereddict",
    "TaggedScalar",
    "ScalarFloat",
    "PosixPath(",
    "<class",
    "[type=",
    "Errno",
)
#: A Python repr in a message: None, a dict, True/False quoted as text.
_PYTHON_REPR = re.compile(r"\bNone\b|\{'[^']*': |'(True|False)'")
#: A problem of a key: ``FILE:LINE:COL: key.path: message``.
_KEYED = re.compile(r"^(?P<file>.+?):(?P<line>\d+)(:(?P<col>\d+))?: (?P<key>[\w.\[\]<>-]+): \S")
#: A bad row of a trace file: ``error: TRACE:LINE: message``.
_TRACE_ROW = re.compile(r"^error: (?P<file>[^:]+\.(csv|jsonl?|json)):\d+: \S")
#: A problem of the whole file (it cannot be read, is not YAML): ``FILE[:LINE[:COL]]: message``.
_WHOLE = re.compile(r"^(?P<file>.+?)(:(?P<line>\d+)(:(?P<col>\d+))?)?: \S")


def judge(mutant: Mutant, written: Written, outcome: Outcome) -> list[Defect]:
    """The defects of ``outcome`` (none: the oracle is satisfied)."""
    found: list[Defect] = []

    def defect(kind: str, detail: str) -> None:
        found.append(Defect(mutant, kind, detail, outcome))

    if outcome.exception:
        last = outcome.exception.strip().splitlines()[-1]
        defect("crash", f"exit {outcome.exit_code}: {last}")
        return found
    if outcome.exit_code not in (0, 2):
        defect("exit_code", f"exit {outcome.exit_code}: {outcome.stderr.strip()[:200]}")
        return found
    if mutant.mutation == "seed: unchanged" and outcome.exit_code != 0:
        defect("seed_invalid", outcome.stderr.strip()[:300])
    if mutant.cls == "pair" and mutant.edit is not None:
        # (an item of an !expand list is reported at the tag's key, naming the points)
        named = [
            [key_path(edit.path), key_path(edit.path[:-1])]
            for edit in (mutant.edit.arg, mutant.edit.arg2)
        ]
        lost = [keys[0] for keys in named if not any(f" {key}: " in outcome.stderr for key in keys)]
        if lost:
            defect("lost", f"not reported: {', '.join(lost)}; stderr: {outcome.stderr.strip()}")
    problems = [
        line
        for line in outcome.stderr.splitlines()
        if line.strip() and not line.startswith("warning:")
    ]
    if outcome.exit_code == 2 and not problems:
        defect("silent", "exit 2 with no message")
    folder = str(written.folder)
    for line in problems:
        for word in _INTERNALS:
            if word in line:
                defect("internals", f"{word!r} in: {line}")
                break
        else:
            if _PYTHON_REPR.search(line):
                defect("internals", f"a Python repr in: {line}")
        if outcome.exit_code != 2:
            continue
        if _TRACE_ROW.match(line):
            continue  # a trace's bad row: at its own file and line (the fix is in the trace)
        match = _WHOLE.match(line)
        if match is None or not (
            match.group("file") == str(written.path) or match.group("file").startswith(folder)
        ):
            defect("no_file", line)
            continue
        if _KEYED.match(line):
            continue
        if match.group("line") is None and not _whole_file_problem(line):
            defect("no_line", line)
        elif not _whole_file_problem(line) and not _file_level_problem(line):
            defect("no_key", line)
    return found


_WHOLE_FILE_WORDS = (
    "cannot read",
    "not a text file",
    "is empty",
    "the file is empty",
    "is a directory",
    "No such file",
    "not UTF-8",
    "UTF-8",
    "more than",
)
_FILE_LEVEL_WORDS = (
    "YAML syntax error",
    "YAML error",
    "top level",
    "unknown tag",
    "!include",
    "!expand",
    "a mapping of keys",
    "earlier configuration language",
    "document",
    "alias",
)


def _whole_file_problem(line: str) -> bool:
    return any(word in line for word in _WHOLE_FILE_WORDS)


def _file_level_problem(line: str) -> bool:
    return any(word in line for word in _FILE_LEVEL_WORDS)


def check(mutant: Mutant, scratch: Path) -> tuple[list[Defect], Outcome, Written]:
    """Write ``mutant`` into a fresh folder of ``scratch``, validate it, judge the outcome."""
    folder = Path(tempfile.mkdtemp(dir=scratch))
    written = write(mutant, folder)
    outcome = run_validate(written, mutant.seed.kind)
    return judge(mutant, written, outcome), outcome, written


# ------------------------------------------------------------------------------- dry runs


def _subprocess(args: list[str], timeout: float) -> Outcome:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "veeksha.cli", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Outcome(-1, "", f"timed out after {timeout} s")
    return Outcome(done.returncode, done.stdout, done.stderr)


def validate_subprocess(written: Written, timeout: float = 60) -> Outcome:
    """``veeksha validate FILE`` in a fresh process: the real exit code and streams."""
    return _subprocess(["validate", str(written.path)], timeout)


def dry_run_subprocess(written: Written, timeout: float = 90) -> Outcome:
    """``veeksha run FILE --dry-run`` in a fresh process (the real exit code), a short run."""
    args = ["run", str(written.path), "--dry-run", "-q", "--no-plots"]
    args += ["--output-dir", str(written.folder / "out")]
    for override in DRY_RUN_OVERRIDES:
        args += ["--set", override]
    return _subprocess(args, timeout)


def judge_dry_run(mutant: Mutant, outcome: Outcome) -> list[Defect]:
    if outcome.exit_code == -1:
        return [Defect(mutant, "dry_run_hang", outcome.stderr, outcome)]
    if "Traceback" in outcome.stderr or outcome.exit_code not in DRY_RUN_EXITS:
        tail = outcome.stderr.strip().splitlines()[-1:] or [""]
        return [Defect(mutant, "dry_run_crash", f"exit {outcome.exit_code}: {tail[0]}", outcome)]
    return []


# ---------------------------------------------------------------------------------- script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--limit", type=int, default=0, help="validate only this many (a sample)")
    parser.add_argument("--dry-runs", type=int, default=0, help="dry-run this many valid mutants")
    parser.add_argument("--verbose", "-v", action="store_true")
    args = parser.parse_args(argv)
    items = all_mutants(args.seed)
    if args.limit:
        items = sample(items, args.limit, args.seed)
    scratch = Path(tempfile.mkdtemp(prefix="veeksha-fuzz-"))
    defects: list[Defect] = []
    valid: list[tuple[Mutant, Written]] = []
    counts: dict[str, int] = {}
    try:
        for index, mutant in enumerate(items):
            found, outcome, written = check(mutant, scratch)
            defects += found
            verdict = "valid" if outcome.exit_code == 0 else "invalid"
            counts[verdict] = counts.get(verdict, 0) + 1
            if outcome.exit_code == 0 and mutant.seed.kind == "scenario":
                valid.append((mutant, written))
            if args.verbose and found:
                for d in found:
                    print(d, flush=True)
            if index % 500 == 0:
                print(f"... {index}/{len(items)}", file=sys.stderr, flush=True)
        where = {id(mutant): written for mutant, written in valid}
        chosen = sample([mutant for mutant, _ in valid], args.dry_runs, args.seed)
        runs = [(mutant, where[id(mutant)]) for mutant in chosen]
        for mutant, written in runs:
            found = judge_dry_run(mutant, dry_run_subprocess(written))
            defects += found
            if args.verbose:
                print(f"dry run: {mutant.seed.name} | {mutant.mutation}", flush=True)
                for d in found:
                    print(d, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    by_kind: dict[str, int] = {}
    for d in defects:
        by_kind[d.kind] = by_kind.get(d.kind, 0) + 1
    print(
        f"{len(items)} mutants validated ({counts}), {len(runs)} dry runs; "
        f"{len(defects)} defects {by_kind}"
    )
    if not args.verbose:
        for d in defects:
            print(d)
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
