"""docs/evaluation_outputs.md and docs/output.md name what the code writes: every health check in
its order, every plot file, every Parquet metadata key."""

from __future__ import annotations

import re
from pathlib import Path

from veeksha.evaluate.checks import HEALTH_CHECKS
from veeksha.evaluate.plots import CDF_METRICS
from veeksha.record.parquet import METADATA_KEYS

DOCS = Path(__file__).resolve().parents[3] / "docs"
EVALUATION = (DOCS / "evaluation_outputs.md").read_text(encoding="utf-8")
SOURCES = Path(__file__).resolve().parents[3] / "veeksha" / "evaluate"


def test_health_json_lists_every_check_in_order() -> None:
    sentence = EVALUATION.split("Checks in order", 1)[1].split(";", 1)[0]
    assert re.findall(r"`(\w+)`", sentence) == [check.name for check in HEALTH_CHECKS]


def test_every_plot_file_is_described() -> None:
    section = EVALUATION.split("## plots/", 1)[1].split("\n## ", 1)[0]
    names = {f"{metric}_cdf.png" for metric in CDF_METRICS}
    for source in ("plots.py", "pool_plot.py", "server_plot.py"):
        text = (SOURCES / source).read_text(encoding="utf-8")
        names |= set(re.findall(r'"(\w+\.png)"', text))
    assert "latency_over_time.png" in names  # (the search finds the plots it must)
    missing = sorted(name for name in names if f"`{name}`" not in section)
    assert not missing, f"docs/evaluation_outputs.md, plots/: not described: {missing}"


def test_every_metadata_key_is_documented() -> None:
    text = (DOCS / "output.md").read_text(encoding="utf-8")
    paragraph = text.split("The files' key-value metadata", 1)[1].split("\n\n", 1)[0]
    missing = sorted(key for key in [*METADATA_KEYS, "partial"] if f"`{key}`" not in paragraph)
    assert not missing, f"docs/output.md, key-value metadata: not named: {missing}"
