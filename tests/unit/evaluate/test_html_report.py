"""report.html holds what it is given as text, never as markup or as a template: braces in the
report or in config.yaml (YAML's flow mappings) and HTML in either come out as written."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, cast

from rich.console import Console

from veeksha.evaluate.html_report import REPORT_HTML, write_html_report


class _Evaluation:
    def render(self, console: Console) -> None:
        console.print("note {stylesheet} <b>not bold</b> {}", markup=False, highlight=False)


def test_braces_and_markup_come_out_as_written(tmp_path: Path) -> None:
    config = "client:\n  headers: {X-Team: '<script>alert(1)</script>'}\nextra: {{a}}\n"
    (tmp_path / "config.yaml").write_text(config)
    (tmp_path / "plots").mkdir()
    plot = tmp_path / "plots" / "a{b}.png"
    plot.write_bytes(b"\x89PNG{}")
    path = write_html_report(tmp_path, cast("Any", _Evaluation()), [plot])
    assert path == tmp_path / REPORT_HTML
    page = path.read_text()
    assert "note {stylesheet} &lt;b&gt;not bold&lt;/b&gt; {}" in page
    assert html.escape(config) in page
    assert "<script>" not in page
    assert 'alt="a{b}.png"' in page
