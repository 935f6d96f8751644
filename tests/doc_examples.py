"""The examples of README.md and docs/*.md, read out of their fenced code blocks and checked as a
user would use them (docs/development.md, "Examples in the docs"; the tests are
``tests/unit/test_doc_examples.py`` and ``tests/integration/evaluate/test_doc_python.py``).

A ```yaml block is a scenario, checked by ``veeksha validate`` (nothing runs), unless its first
line says otherwise:

- ``# fragment of: KEY.PATH``: the block is the content of that section (``session_generator``,
  ``client.tokenizer``), checked as a scenario holding only it;
- ``# NAME.yaml: veeksha prefill|decode|stress --config NAME.yaml``: a microbenchmark's config
  file, checked by that command's loader; with ``capacity-search``, a search file;
- ``# NAME.yaml``: a file of that name, which the page's other blocks may ``!include`` (a block
  another block includes is checked through it, not alone);
- ``# not a scenario: WHY``: only parsed as YAML (a server's config, a sample of an output).

A block of comments only (an editor's modeline) has nothing to check. A warning of the loader
(an ignored key) fails the block too: an example should not teach a key that does nothing.

A ```python block is compiled, and run (``test_doc_python``): the blocks of one page one after
the other in one namespace, as a reader pastes them, in a folder where every
``benchmark_output/NAME`` the page names is a small real run folder. A block starting with
``# sketch`` (it names things it leaves undefined) is only compiled.

A ```bash block's ``veeksha`` commands are parsed by the command itself (unknown options are
found), and those naming a scenario or config file that exists (in the repository, or a named
block of the page) load it with the command's overrides and flags, without running anything.
"""

from __future__ import annotations

import re
import shlex
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner
from ruamel.yaml import YAML

from veeksha import cli
from veeksha.errors import ScenarioError

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*(\S*)")
FRAGMENT = re.compile(r"^#\s*fragment of:\s*([A-Za-z_][\w.]*)\s*$")
NOT_A_SCENARIO = re.compile(r"^#\s*not a scenario\b")
CONFIG_FILE = re.compile(
    r"^#\s*(?P<name>[\w.-]+\.ya?ml):\s*veeksha\s+(?P<command>prefill|decode|stress|capacity-search)"
    r"\s+--config\s+(?P=name)\s*$"
)
NAMED = re.compile(r"^#\s*(?P<name>[\w.-]+\.ya?ml)\s*$")
SKETCH = re.compile(r"^#\s*sketch\b")
_INCLUDE = re.compile(r"!include\s+['\"]?([\w./-]+)")


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, the line of its opening fence, its language, its text."""

    page: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        """``docs/page.md:LINE`` (the line of the opening fence)."""
        return f"{self.page_name}:{self.line}"

    @property
    def page_name(self) -> str:
        return str(self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page)

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0].strip() if self.text.strip() else ""

    @property
    def name(self) -> str | None:
        """The file name the block's first line gives it (``# main.yaml``), if any."""
        for pattern in (CONFIG_FILE, NAMED):
            match = pattern.match(self.first_line)
            if match:
                return match.group("name")
        return None


def code_blocks(page: Path, lang: str | None = None) -> list[Block]:
    """The fenced blocks of a Markdown page (CommonMark: a fence closes on a line of the same
    character, at least as long, with no info string), of ``lang`` when given."""
    found: list[Block] = []
    lines: list[str] = []
    fence, info, start = "", "", 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1).startswith(fence) and not match.group(2):
                found.append(Block(page, start, info, "\n".join(lines) + "\n"))
                fence = ""
            else:
                lines.append(line)
            continue
        if match:
            fence, info, start, lines = match.group(1), match.group(2), number, []
    return [b for b in found if lang is None or b.lang == lang]


def all_blocks(lang: str, pages: list[Path] = PAGES) -> list[Block]:
    return [block for page in pages for block in code_blocks(page, lang)]


# ------------------------------------------------------------------------------------- YAML


def write_named(blocks: list[Block], folder: Path) -> None:
    """Write the blocks that name a file (``# client.yaml``) into ``folder``."""
    for block in blocks:
        if block.name:
            (folder / block.name).write_text(block.text, encoding="utf-8")


def included_names(blocks: list[Block]) -> set[str]:
    return {name for block in blocks for name in _INCLUDE.findall(block.text)}


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines())


def _wrapped(text: str, path: str) -> str:
    """``text`` (a section's content) placed under the dotted ``path``."""
    out = []
    for depth, key in enumerate(path.split(".")):
        out.append("  " * depth + f"{key}:")
    return "\n".join(out) + "\n" + textwrap.indent(text, "  " * len(path.split(".")))


def _validate(path: Path) -> list[str]:
    """``veeksha validate PATH``: its problems and warnings (none when the file is valid)."""
    result = CliRunner().invoke(cli.main, ["validate", str(path)], prog_name="veeksha")
    problems = [line for line in result.stderr.splitlines() if line.strip()]
    if result.exit_code != 0 and not problems:
        problems.append(f"exit {result.exit_code}: {result.output or result.exception!r}")
    return problems


def check_yaml(block: Block, siblings: list[Block], folder: Path) -> list[str]:
    """The problems of one ```yaml block (``siblings``: every yaml block of its page, whose named
    files are written into ``folder`` for ``!include``); [] when it is fine or not checked."""
    first = block.first_line
    if _only_comments(block.text):
        return []
    if NOT_A_SCENARIO.match(first):
        YAML(typ="safe", pure=True).load(block.text)  # still YAML
        return []
    write_named(siblings, folder)
    config = CONFIG_FILE.match(first)
    if config:
        path = folder / config.group("name")
        return at_page_lines(check_config(config.group("command"), path), path, block)
    if block.name and block.name in included_names([b for b in siblings if b is not block]):
        return []  # checked as part of the block that includes it
    fragment = FRAGMENT.match(first)
    depth = 0
    if fragment:
        path = folder / f"{block.page.stem}-{block.line}-fragment.yaml"
        path.write_text(_wrapped(block.text, fragment.group(1)), encoding="utf-8")
        depth = len(fragment.group(1).split("."))
    else:
        path = folder / (block.name or f"{block.page.stem}-{block.line}.yaml")
        path.write_text(block.text, encoding="utf-8")
    return at_page_lines(_validate(path), path, block, depth)


def at_page_lines(problems: list[str], path: Path, block: Block, shift: int = 0) -> list[str]:
    """Problems reported at ``path:LINE:`` (the block written out, ``shift`` lines of wrapping
    above it) moved to the page's own line."""
    at = re.compile(rf"^{re.escape(str(path))}:(\d+):")

    def moved(match: re.Match[str]) -> str:
        return f"{block.page_name}:{block.line + int(match.group(1)) - shift}:"

    return [at.sub(moved, problem) for problem in problems]


def check_config(command: str, path: Path | None, flags: list[str] | None = None) -> list[str]:
    """A config file of ``command`` (with its command-line ``flags``) read by that command's
    loader: a microbenchmark's, or a capacity search's."""
    if command == "capacity-search":
        assert path is not None
        return _validate(path)
    from veeksha.experiment.microbench.config import (
        BenchConfig,
        DecodeConfig,
        PrefillConfig,
        load_config,
        parse_flags,
    )
    from veeksha.experiment.microbench.stress_config import StressConfig

    kinds: dict[str, type[BenchConfig]] = {
        "prefill": PrefillConfig,
        "decode": DecodeConfig,
        "stress": StressConfig,
    }
    try:
        load_config(kinds[command], path, parse_flags(flags or []))
    except ScenarioError as exc:
        return str(exc).splitlines()
    return []


# ------------------------------------------------------------------------------------- shell


def shell_commands(block: Block) -> list[list[str]]:
    """The commands of a ```bash block as argument lists: continuation lines joined, comments
    dropped, ``a && b`` split."""
    out: list[list[str]] = []
    for line in block.text.replace("\\\n", " ").splitlines():
        command: list[str] = []
        for word in [*shlex.split(line, comments=True), "&&"]:
            if word in ("&&", ";", "||"):
                if command:
                    out.append(command)
                command = []
            else:
                command.append(word)
    return out


def veeksha_commands(blocks: list[Block]) -> Iterator[tuple[Block, list[str]]]:
    """``(block, argv after 'veeksha')`` of every veeksha command of the blocks."""
    for block in blocks:
        for argv in shell_commands(block):
            if argv[0] == "veeksha" and len(argv) > 1:
                yield block, argv[1:]


def _placeholder(exc: click.ClickException) -> bool:
    """A path argument of an example that does not exist here (``SWEEP_DIR``, a run folder)."""
    return isinstance(exc, click.BadParameter) and "does not exist" in exc.format_message()


def check_command(argv: list[str], folder: Path | None = None) -> list[str]:
    """``veeksha ARGV`` parsed by its command (the mistakes it would exit 2 for: an unknown
    command or option, a bad choice, a missing value) and, when it names a scenario or config
    file that exists (in ``folder``, where the page's named blocks are, or from the current
    folder), that file loaded with the overrides and flags given. Nothing runs."""
    root = click.Context(cli.main)
    name, args = argv[0], argv[1:]
    if any(arg.startswith(("[-", "[--")) or arg == "..." for arg in args):
        return [f"a synopsis, not a command ({' '.join(argv)}): write one a reader can paste"]
    command = cli.main.get_command(root, name)
    if command is None:
        return [f"no command {name!r}"]
    try:
        params = command.make_context(name, list(args), parent=root).params
    except click.ClickException as exc:
        return [] if _placeholder(exc) else [exc.format_message()]

    def existing(file: object) -> Path | None:
        if file is None:
            return None
        candidates = [folder / Path(str(file)).name] if folder else []
        return next((c for c in [*candidates, Path(str(file))] if c.is_file()), None)

    try:
        if name in ("run", "benchmark", "validate"):
            return _scenario_command(name, params, existing)
        if name == "capacity-search":
            found = existing(params["file"] or params["config_file"])
            skip = ("file", "config_file", "overrides", "no_plots", "quiet")
            flags = {k: v for k, v in params.items() if k not in skip}
            return _capacity_search(found, flags, params["overrides"]) if found else []
        if name in ("prefill", "decode", "stress"):
            found = existing(params["config_file"])
            if params["config_file"] is not None and found is None:
                return []  # a file of the user's: its flags were parsed above
            return check_config(name, found, list(params["args"]))
    except ScenarioError as exc:
        return str(exc).splitlines()
    return []


def _capacity_search(path: Path, flags: dict[str, Any], overrides: Sequence[str]) -> list[str]:
    from veeksha.experiment.capacity.config import load_capacity_config

    try:
        load_capacity_config(path, flags, overrides)
    except ScenarioError as exc:
        return str(exc).splitlines()
    return []


def _scenario_command(
    name: str, params: dict[str, Any], existing: Callable[[object], Path | None]
) -> list[str]:
    """``veeksha run|benchmark|validate``: each existing scenario file loaded with the command's
    overrides (``--set`` and ``--KEY.PATH VALUE``), warnings counted as problems."""
    from veeksha.scenario.loader import extra_args_to_overrides, load_points

    if name == "validate":
        files, overrides = [str(f) for f in params["files"]], list(params["overrides"])
    elif name == "benchmark":
        files, overrides = [str(params["config"])], extra_args_to_overrides(params["args"])
    else:
        files, extra = cli._split_run_args(params["args"])
        overrides = [*params["overrides"], *extra_args_to_overrides(extra)]
    problems: list[str] = []
    for file in files:
        found = existing(file)
        if found is None:
            continue
        if cli._is_capacity_search(found):
            problems += _capacity_search(found, {}, overrides)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                load_points(found, overrides)
            except ScenarioError as exc:
                problems += str(exc).splitlines()
        problems += [f"warning: {w.message}" for w in caught]
    return problems


def expand_globs(argv: list[str]) -> list[str]:
    """``scenarios/*.yaml`` as the shell expands it, from the current folder."""
    out: list[str] = []
    for arg in argv:
        matches = sorted(str(p) for p in Path().glob(arg)) if "*" in arg else []
        out += matches or [arg]
    return out


# ------------------------------------------------------------------------------------- python


def is_sketch(block: Block) -> bool:
    return bool(SKETCH.match(block.first_line))


def run_folder_names(blocks: list[Block]) -> set[str]:
    """Every ``benchmark_output/NAME`` a page's python blocks read."""
    return {
        name for block in blocks for name in re.findall(r"benchmark_output/([^/\"')]+)", block.text)
    }
