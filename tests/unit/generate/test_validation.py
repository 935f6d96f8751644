"""Answer checks: regex, JSON, choices; the notes a re-prompt carries."""

from __future__ import annotations

from veeksha.generate.validation import AnswerCheck
from veeksha.scenario.models import ChoicesValidation, JsonValidation, RegexValidation


def test_regex_json_and_choices() -> None:
    regex = AnswerCheck.of(RegexValidation(pattern=r"^(?!INVALID)"))
    assert regex("fine words") is None
    assert "must match ^(?!INVALID)" in (regex("INVALID words") or "")
    as_json = AnswerCheck.of(JsonValidation())
    assert as_json('{"a": [1, 2]}') is None
    assert "not valid JSON" in (as_json("{a: 1") or "")
    choice = AnswerCheck.of(ChoicesValidation(choices=["yes", "no"]))
    assert choice(" yes\n") is None
    assert choice("maybe") == "Your answer must be exactly one of: yes, no. Answer again."
