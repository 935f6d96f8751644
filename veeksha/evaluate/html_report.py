"""report.html: a run's report as one self-contained page, to attach to a review or a ticket.

The page holds the terminal report as it prints (its tables, verdicts and colours, rendered by
rich at 100 columns), every plot of the run embedded as a PNG data: URL, and the resolved
scenario (config.yaml, its secrets already masked) folded under a ``<details>``: nothing it
shows is fetched from elsewhere, so it opens anywhere, offline. Written with the plots (a run
with ``--no-plots`` writes none) by the run's evaluation and by ``veeksha report``.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from veeksha.record.run_folder import CONFIG_FILE

if TYPE_CHECKING:
    from veeksha.evaluate.run import Evaluation

__all__ = ["REPORT_HTML", "write_html_report"]

REPORT_HTML = "report.html"
WIDTH = 100  # columns of the report's rendering

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<title>veeksha: {title}</title>
<style>
{{stylesheet}}
body {{{{ color: {{foreground}}; background-color: {{background}};
  font-family: system-ui, sans-serif; margin: 1.5em; }}}}
pre {{{{ font-family: Menlo, 'DejaVu Sans Mono', consolas, 'Courier New', monospace; }}}}
figure {{{{ display: inline-block; margin: 0 1em 1em 0; }}}}
img {{{{ max-width: 100%; border: 1px solid #ccc; }}}}
</style>
</head>
<body>
<h1>veeksha run {title}</h1>
<pre><code style="font-family:inherit">{{code}}</code></pre>
{plots}
{config}
</body>
</html>
"""


def _figures(plots: Sequence[Path]) -> str:
    if not plots:
        return ""
    figures = []
    for path in plots:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        name = html.escape(path.name)
        figures.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{name}">'
            f"<figcaption>{name}</figcaption></figure>"
        )
    return "<h2>Plots</h2>\n" + "\n".join(figures)


def _config(run_dir: Path) -> str:
    path = run_dir / CONFIG_FILE
    if not path.exists():
        return ""
    text = html.escape(path.read_text(encoding="utf-8"))
    return f"<details><summary>{CONFIG_FILE}</summary><pre>{text}</pre></details>"


def write_html_report(run_dir: Path, evaluation: Evaluation, plots: Sequence[Path]) -> Path:
    """Write ``run_dir``/report.html (see the module docstring); returns its path."""
    from rich.console import Console

    console = Console(record=True, width=WIDTH, file=io.StringIO(), color_system="truecolor")
    evaluation.render(console)
    # (the page is a template twice over: rich fills in the code and the colours after this)
    parts = {
        "title": html.escape(run_dir.name),
        "plots": _figures(plots),
        "config": _config(run_dir),
    }
    page = _PAGE.format(**{k: v.replace("{", "{{").replace("}", "}}") for k, v in parts.items()})
    path = run_dir / REPORT_HTML
    path.write_text(console.export_html(code_format=page, inline_styles=True), encoding="utf-8")
    return path
