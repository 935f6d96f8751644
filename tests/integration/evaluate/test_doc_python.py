"""The ```python blocks of README.md and docs/*.md run as a reader pastes them: a page's blocks
one after the other in one namespace, in a folder where every ``benchmark_output/NAME`` they read
is one small real run of the built-in simulator (made once for the module); a ``# sketch`` block
is only compiled (tests/unit/test_doc_examples.py). Conventions: tests/doc_examples.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.doc_examples import PAGES, ROOT, code_blocks, is_sketch, run_folder_names
from veeksha.experiment.point import run_point
from veeksha.scenario.loader import load_scenario

PAGES_WITH_PYTHON = [page for page in PAGES if code_blocks(page, "python")]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the quickstart: 6 sessions against the fast simulator (~1 s of
    traffic), with every file the examples read (trace.jsonl, server_metrics.parquet)."""
    scenario = load_scenario(
        ROOT / "scenarios" / "quickstart.yaml",
        [
            "runtime.max_sessions=6",
            "traffic_scheduler.interval_generator.arrival_rate=20",
            "simulator.preset=fast",
        ],
    )
    result = run_point(scenario, tmp_path_factory.mktemp("doc-run"), plots=False)
    assert result.exit_code == 0, result
    return result.run_dir


def run_page(page: Path, folder: Path, run: Path) -> int:
    """Run ``page``'s python blocks in ``folder`` (the current folder), each run folder they
    name a link to ``run``; returns how many blocks ran."""
    blocks = code_blocks(page, "python")
    for name in run_folder_names(blocks):
        (folder / "benchmark_output").mkdir(exist_ok=True)
        (folder / "benchmark_output" / name).symlink_to(run, target_is_directory=True)
    namespace: dict[str, Any] = {"__name__": "__doc_example__"}
    ran = 0
    for block in blocks:
        code = compile(block.text, block.where, "exec")
        if not is_sketch(block):
            exec(code, namespace)  # the docs' own examples
            ran += 1
    return ran


def test_the_pages_with_python_are_found() -> None:
    names = {page.name for page in PAGES_WITH_PYTHON}
    assert {"README.md", "output.md", "simulator.md"} <= names


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_python_examples_of_a_page_run(
    page: Path, run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_page(page, tmp_path, run_dir)


def test_a_broken_example_fails(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nimport pandas as pd\n"
        'requests = pd.read_parquet("benchmark_output/<run>/requests.parquet")\n```\n'
        "```python\n# sketch\nundefined_name()\n```\n"
        "```python\nprint(requests.ttfc.mean())\n```\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    assert run_page(page, tmp_path, run_dir) == 2
    page.write_text(
        "```python\nimport pandas as pd\n"
        'requests = pd.read_parquet("benchmark_output/<run>/requests.parquet")\n'
        "print(requests.time_to_first_chunk.mean())\n```\n",
        encoding="utf-8",
    )
    (tmp_path / "benchmark_output" / "<run>").unlink()
    with pytest.raises(AttributeError, match="time_to_first_chunk"):
        run_page(page, tmp_path, run_dir)
