"""The check every malformed-trace test makes: ``veeksha run`` and ``veeksha validate`` refuse
the file with exit 2 and the given file:line pieces, without a traceback or a run folder."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from veeksha.cli import main


def assert_refused(tmp_path: Path, name: str, text: str, flavor: str, needles: list[str]) -> None:
    trace = tmp_path / name
    trace.write_text(text)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"session_generator: {{type: trace, trace_file: {trace}, flavor: {flavor}}}\n"
        "runtime: {max_sessions: 1}\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["run", str(scenario), "--output-dir", str(out)], env={"CI": "true"}
    )
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert not out.exists() or not any(out.iterdir())
    checked = CliRunner().invoke(main, ["validate", str(scenario)], env={"CI": "true"})
    assert checked.exit_code == 2, checked.output
    for needle in needles:
        assert needle in checked.stderr, checked.stderr
