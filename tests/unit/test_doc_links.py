"""Every relative Markdown link in README.md and docs/*.md leads somewhere: the file exists, and
an ``#anchor`` (in the same file or another Markdown file) is the anchor of one of its headings,
by GitHub's rule (lower case, spaces to '-', punctuation dropped, a repeated heading suffixed
``-1``, ``-2``, ...). Links inside code (fenced blocks, inline backticks) are text, not links;
a code block left open (which turns the rest of a page into code, headings and links with it)
is found too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*(\S*)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
#: [text](target) or ![alt](target), target up to a space (a title may follow) or ')'
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks (CommonMark: a fence closes only on a line
    of the same character, at least as long, with no info string after it)."""
    out, fence = [], ""
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if fence:
            if match and match.group(1).startswith(fence) and not match.group(2):
                fence = ""
            continue
        if match:
            fence = match.group(1)
            continue
        out.append((number, line))
    return out


def fences_opened_inside_a_block(path: Path) -> list[int]:
    """Lines that open a fence with a language (```yaml) while a block is open: the block
    before them was not closed, and everything up to the next fence renders as code."""
    found, fence = [], ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FENCE.match(line)
        if not match:
            continue
        if not fence:
            fence = match.group(1)
        elif match.group(1).startswith(fence) and not match.group(2):
            fence = ""
        elif match.group(2):
            found.append(number)
    return found


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before de-duplication).

    >>> github_anchor("Ramping the rate: `ramp` (v2)")
    'ramping-the-rate-ramp-v2'
    """
    text = _INLINE_CODE.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text, not its target
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        base = github_anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every relative link of a Markdown file."""
    out = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        prose = _INLINE_CODE.sub("", line)
        for match in _LINK.finditer(prose):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto:: not a file of the repository
            out.append((number, target))
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for number, target in links(path):
        file_part, _, anchor = target.partition("#")
        where = f"{path.relative_to(root)}:{number}: {target}"
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{where}: no file {linked.relative_to(root)}")
            continue
        if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading of {linked.name} has the anchor #{anchor}")
    return problems


def test_github_anchor_rule() -> None:
    assert github_anchor("Ramping the rate") == "ramping-the-rate"
    assert github_anchor("`RateScheduler`") == "ratescheduler"
    assert github_anchor("What's new? (v1.2)") == "whats-new-v12"
    assert github_anchor("Results nobody waits for") == "results-nobody-waits-for"
    assert github_anchor("SLOs and goodput") == "slos-and-goodput"
    assert github_anchor("A → B") == "a--b"


def test_repeated_headings_get_numbered_anchors(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n```\n# not a heading\n```\n\n## Notes\n\n## Notes\n")
    assert anchors(page) == {"notes", "notes-1", "notes-2"}


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#real-heading) [gone](c.md) [bad](b.md#nowhere) [self](#top)\n"
        "`[code](nowhere.md)` [web](https://example.com/x.md)\n# Top\n"
    )
    assert broken_links(page, tmp_path) == [
        "a.md:1: c.md: no file c.md",
        "a.md:1: b.md#nowhere: no heading of b.md has the anchor #nowhere",
    ]


def test_an_unclosed_fence_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```yaml\na: 1\n## Heading\n\n```yaml\nb: 2\n```\n")
    assert fences_opened_inside_a_block(page) == [5]
    assert anchors(page) == set()  # the heading is code, as GitHub renders it


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_block_is_closed(path: Path) -> None:
    assert fences_opened_inside_a_block(path) == []
