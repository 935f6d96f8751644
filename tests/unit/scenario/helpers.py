"""Shared helpers of the scenario tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from veeksha.errors import ScenarioError, ScenarioIssue
from veeksha.scenario.loader import load_scenario_text
from veeksha.scenario.models import Scenario

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).resolve().parent / "data"
UPSTREAM_SAMPLES = sorted(DATA.glob("upstream_*.yaml"))
#: Files in scenarios/ that are not scenarios but experiments holding one (veeksha capacity-search).
EXPERIMENT_FILES = ("capacity_search.yaml",)
_ALL = sorted(p for p in (REPO / "scenarios").glob("*.yaml") if p.name not in EXPERIMENT_FILES)
#: The single-run scenarios of scenarios/; SWEEPS: those with !expand tags (docs/experiments.md).
SCENARIOS = [p for p in _ALL if "!expand" not in p.read_text(encoding="utf-8")]
SWEEPS = [p for p in _ALL if p not in SCENARIOS]


def load(text: str, overrides: tuple[str, ...] = ()) -> Scenario:
    return load_scenario_text(text, "s.yaml", overrides)


def issues_of(text: str, overrides: tuple[str, ...] = ()) -> list[ScenarioIssue]:
    with pytest.raises(ScenarioError) as caught:
        load(text, overrides)
    return caught.value.issues


def only_issue(text: str, overrides: tuple[str, ...] = ()) -> ScenarioIssue:
    issues = issues_of(text, overrides)
    assert len(issues) == 1, [str(i) for i in issues]
    return issues[0]
