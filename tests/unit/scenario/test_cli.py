"""The command line: exit codes, messages on stderr, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from veeksha import __version__, cli
from veeksha.scenario.schema import schema_text

from .helpers import REPO, SCENARIOS

BAD = "seed: -1\ntraffic_scheduler: {type: rate, interval_generator: {arival_rate: 2}}\n"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli.main, list(args), prog_name="veeksha")


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    good = tmp_path / "good.yaml"
    good.write_text("runtime: {max_sessions: 3}\nclient: {api_key: sk-secret}\n", encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD, encoding="utf-8")
    return {"good": good, "bad": bad, "out": tmp_path / "out"}


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine replaced by a stand-in that sends nothing and succeeds."""
    monkeypatch.setattr("veeksha.engine.run.run_benchmark", lambda *args, **kwargs: 0)


def test_version_and_help() -> None:
    assert invoke("--version").output.strip() == f"veeksha, version {__version__}"
    top = invoke("--help")
    assert top.exit_code == 0
    for command in ("validate", "schema", "run", "benchmark"):
        assert command in top.output
        sub = invoke(command, "--help")
        assert sub.exit_code == 0
        assert "Usage: veeksha" in sub.output


def test_every_commands_help_fits_80_columns() -> None:
    listed = cli.main.list_commands(click.Context(cli.main))
    commands = [name for name in listed if name != "benchmark"]
    assert {"run", "prefill", "decode", "stress", "capacity-search"} <= set(commands)
    for command in commands:
        shown = CliRunner().invoke(cli.main, [command, "--help"], terminal_width=80)
        assert shown.exit_code == 0, command
        too_long = [line for line in shown.output.splitlines() if len(line) > 80]
        assert not too_long, (command, too_long)


def test_validate_exit_codes(files: dict[str, Path]) -> None:
    ok = invoke("validate", *map(str, SCENARIOS))
    assert ok.exit_code == 0, ok.output
    assert ok.stderr == ""
    bad = invoke("validate", str(files["good"]), str(files["bad"]), str(files["good"].parent / "x"))
    assert bad.exit_code == 2
    assert f"{files['good']}: ok" in bad.stdout
    assert f"{files['bad']}:1:1: seed: must be greater than or equal to 0 (got -1)" in bad.stderr
    assert "did you mean 'arrival_rate'?" in bad.stderr
    assert "cannot read the file" in bad.stderr
    assert "Traceback" not in bad.output


def test_validate_with_overrides_and_warnings(files: dict[str, Path]) -> None:
    result = invoke("validate", str(files["good"]), "--set", "runtime.num_dispatcher_threads=2")
    assert result.exit_code == 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1
    assert "runtime.num_dispatcher_threads is ignored" in lines[0]


def test_schema_command(tmp_path: Path) -> None:
    target = tmp_path / "s.json"
    result = invoke("schema", "--output", str(target))
    assert result.exit_code == 0
    assert target.read_text(encoding="utf-8") == schema_text()
    assert invoke("schema", "-o", "-").stdout == schema_text()


def test_run_without_engine_writes_config(files: dict[str, Path], no_engine: None) -> None:
    result = invoke(
        "run",
        str(files["good"]),
        "--output-dir",
        str(files["out"]),
        "--set",
        "seed=5",
        "--traffic_scheduler.interval_generator.arrival_rate",
        "9",
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = files["out"].iterdir()
    config = (run_dir / "config.yaml").read_text(encoding="utf-8")
    assert "sk-secret" not in config
    assert "seed: 5" in config
    assert "arrival_rate: 9.0" in config
    assert f"output_dir: {files['out']}" in config


def test_run_calls_the_engine_when_built(
    files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_run_benchmark(scenario: Any, run_dir: Path, *, quiet: bool, **_: Any) -> int:
        calls.append((scenario.seed, run_dir, quiet))
        return 3

    monkeypatch.setattr("veeksha.engine.run.run_benchmark", fake_run_benchmark)
    result = invoke(
        "benchmark",
        "--config",
        str(files["good"]),
        "--output-dir",
        str(files["out"]),
        "--seed",
        "8",
        "--quiet",
    )
    assert result.exit_code == 3
    assert result.stdout == ""
    ((seed, run_dir, quiet),) = calls
    assert (seed, quiet) == (8, True)
    assert (run_dir / "config.yaml").is_file()


@pytest.mark.parametrize(
    "args",
    [
        ["run", "BAD"],
        ["run", "GOOD", "--seed"],
        ["run", "GOOD", "--set", "seed"],
        ["benchmark", "--config", "BAD", "--runtime.max_sessions", "0"],
        ["run", "GOOD", "--set", "runtime.max_sessions=zero"],
    ],
)
def test_bad_input_exits_2_without_traceback(
    files: dict[str, Path], no_engine: None, args: list[str]
) -> None:
    args = [
        str(files["bad"]) if a == "BAD" else str(files["good"]) if a == "GOOD" else a for a in args
    ]
    result = invoke(*args, "--output-dir", str(files["out"]))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip()
    assert "Traceback" not in result.output
    assert not files["out"].exists()  # nothing is created for an invalid scenario


def test_unwritable_output_dir_is_a_configuration_error(
    files: dict[str, Path], no_engine: None
) -> None:
    blocker = files["out"]
    blocker.write_text("x", encoding="utf-8")
    result = invoke("run", str(files["good"]), "--output-dir", str(blocker / "sub"))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot create a run folder")


def test_run_needs_exactly_one_file(files: dict[str, Path]) -> None:
    result = invoke("run", str(files["good"]), str(files["good"]))
    assert result.exit_code == 2
    assert "expected one scenario FILE" in result.stderr
    assert "--set takes" not in result.stderr
    # --set KEY VALUE (a space for the =): the stray value is named with the fix
    spaced = invoke(
        "run", str(files["good"]), "--set", "seed=3", "--set", "runtime.max_sessions", "5"
    )
    assert spaced.exit_code == 2
    assert "(--set takes KEY.PATH=VALUE: --set runtime.max_sessions=5)" in spaced.stderr


def test_lazy_group_loads_commands_on_use() -> None:
    group = cli.LazyGroup(name="g", lazy_commands={"check": "veeksha.cli:validate"})
    assert "check" not in group.commands
    ctx = click.Context(group)
    assert group.list_commands(ctx) == ["check"]
    assert group.get_command(ctx, "check") is cli.validate
    broken = cli.LazyGroup(name="g", lazy_commands={"x": "veeksha.cli:LAZY_COMMANDS"})
    with pytest.raises(TypeError, match="not a click command"):
        broken.get_command(click.Context(broken), "x")


def test_registered_lazy_commands_import() -> None:
    ctx = click.Context(cli.main)
    for name in cli.LAZY_COMMANDS:
        assert isinstance(cli.main.get_command(ctx, name), click.Command)


def test_real_subprocess(files: dict[str, Path]) -> None:
    command = [sys.executable, "-m", "veeksha.cli"]
    bad = subprocess.run(
        [*command, "validate", str(files["bad"])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "seed: must be greater than or equal to 0" in bad.stderr
    good = subprocess.run(
        [*command, "validate", *map(str, SCENARIOS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert good.returncode == 0, good.stderr


_POOL_PROBE = (
    "from veeksha import cli\n"
    "cli.main(['--version'], standalone_mode=False)\n"
    "import pyarrow as pa\n"
    "print(pa.default_memory_pool().backend_name)\n"
)


@pytest.mark.parametrize(("env", "backend"), [(None, "system"), ("mimalloc", "mimalloc")])
def test_commands_allocate_arrow_memory_with_malloc_unless_told(
    env: str | None, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a fresh interpreter: Arrow picks its pool once, and this one's has long been picked
    if env is None:
        monkeypatch.delenv(cli.ARROW_POOL_ENV, raising=False)
    else:
        monkeypatch.setenv(cli.ARROW_POOL_ENV, env)
    done = subprocess.run(
        [sys.executable, "-c", _POOL_PROBE], capture_output=True, text=True, check=True
    )
    assert done.stdout.split()[-1] == backend


_DEFAULTS_PROBE = (
    "import os, sys\n"
    "from veeksha import cli\n"
    "cli.main(['--version'], standalone_mode=False)\n"
    "print(os.environ[sys.argv[1]])\n"
)


@pytest.mark.parametrize("name", sorted(cli.LIBRARY_DEFAULTS))
def test_commands_set_the_library_defaults_unless_the_environment_does(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(name, raising=False)
    probe = [sys.executable, "-c", _DEFAULTS_PROBE, name]
    unset = subprocess.run(probe, capture_output=True, text=True, check=True)
    assert unset.stdout.split()[-1] == cli.LIBRARY_DEFAULTS[name]
    monkeypatch.setenv(name, "users-choice")
    told = subprocess.run(probe, capture_output=True, text=True, check=True)
    assert told.stdout.split()[-1] == "users-choice"


def test_a_file_the_scenario_names_is_reported_at_its_key(
    tmp_path: Path, files: dict[str, Path], no_engine: None
) -> None:
    """A trace or tokenizer file that cannot be read is named at the scenario's line and key
    (with several files validated, which scenario names it): it was ``error: nowhere.csv:
    cannot read the trace ...``, and a missing tokenizer passed ``validate``."""
    trace = tmp_path / "trace.yaml"
    trace.write_text(
        "seed: 1\nsession_generator:\n  type: trace\n  trace_file: nowhere.csv\n", encoding="utf-8"
    )
    folder = tmp_path / "folder.yaml"
    folder.write_text(f"session_generator: {{type: trace, trace_file: {tmp_path}}}\n")
    tokenizer = tmp_path / "tok.yaml"
    tokenizer.write_text("client:\n  tokenizer: {type: hf, path: /nonexistent/tok.json}\n")
    result = invoke("validate", str(files["good"]), str(trace), str(folder), str(tokenizer))
    assert result.exit_code == 2, result.output
    assert f"{files['good']}: ok" in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(
        f"{trace}:4:3: session_generator.trace_file: nowhere.csv: cannot read the trace: No such"
    )
    assert lines[1] == (
        f"{folder}:1:34: session_generator.trace_file: {tmp_path}: cannot read the trace: is a"
        " folder, not a trace file; check trace_file"
    )
    assert lines[2].startswith(
        f"{tokenizer}:2:25: client.tokenizer.path: tokenizer file not found: /nonexistent/tok.json."
    )
    # a run says the same, before any folder; an override that gave the path is named instead
    run = invoke("run", str(tokenizer), "--output-dir", str(files["out"]))
    assert run.exit_code == 2
    assert run.stderr.startswith(f"{tokenizer}:2:25: client.tokenizer.path: tokenizer file not")
    given = invoke(
        "run",
        str(trace),
        "--set",
        "session_generator.trace_file=/nonexistent/t.csv",
        "--output-dir",
        str(files["out"]),
    )
    assert given.exit_code == 2
    assert given.stderr.startswith(
        "--set session_generator.trace_file=/nonexistent/t.csv: session_generator.trace_file: "
        "/nonexistent/t.csv: cannot read the trace"
    )
    assert not files["out"].exists()
