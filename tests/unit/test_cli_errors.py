"""How ``veeksha`` prints an error: a scenario's issues a line each; another error after
``error: ``, the lines it quotes (a managed server's last lines) indented under it, so that
they do not read as errors of their own."""

from __future__ import annotations

import pytest

from veeksha.cli import _report
from veeksha.errors import ScenarioError, ScenarioIssue, TargetError


def test_a_quoted_line_is_indented_under_its_error(capsys: pytest.CaptureFixture[str]) -> None:
    _report(TargetError("the server exited; last lines:\nline1\nboom"))
    assert capsys.readouterr().err == "error: the server exited; last lines:\n  line1\n  boom\n"


def test_a_scenarios_issues_are_a_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    issues = [ScenarioIssue("s.yaml", 1, 1, "seed", "bad"), ScenarioIssue("s.yaml", 2, 1, "x", "y")]
    _report(ScenarioError(issues))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    assert all(line.startswith("s.yaml:") for line in lines)
