"""Bad input: every mistake gives a short reason naming the file or key and the fix, exit code 2
(3 for a disk that fills mid-run, with the results so far kept), and never a traceback.

Errors found before the run are checked through ``veeksha`` in-process (click's runner, stderr
apart); the disk that fills is a real tmpfs of 300 KiB under a real ``veeksha run`` process.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.integration.robustness.helpers import CliResult, audit_run, start_run, write_scenario
from veeksha.cli import main
from veeksha.simulator.process import SimulatorProcess


def _veeksha(*args: str) -> CliResult:
    result = CliRunner().invoke(main, list(args), env={"CI": "true", "OPENAI_API_BASE": None})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError("uncaught exception (a traceback)") from result.exception
    return CliResult(result.exit_code, result.stdout, result.stderr)


def _run(folder: Path, text: str, *extra: str) -> CliResult:
    path = write_scenario(folder, text)
    return _veeksha("run", str(path), "--output-dir", str(folder / "out"), "--no-plots", *extra)


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        pytest.param(
            "traffic_scheduler: {type: rate\nruntime: {max_sessions: 1}\n",
            ["scenario.yaml:2:", "YAML syntax error"],
            id="malformed-yaml",
        ),
        pytest.param(
            "runtime: {max_sessions: many}\n",
            ["scenario.yaml:1:", "runtime.max_sessions", "integer", "'many'"],
            id="wrong-type",
        ),
        pytest.param(
            "session_generator:\n  type: synthetic\n  session_graph:\n    type: linear\n"
            "    num_request_generator: {type: uniform, min: 5, max: 2}\n",
            ["scenario.yaml:5:", "num_request_generator.min", "must be <= max"],
            id="min-above-max",
        ),
        pytest.param(
            "runtime: {max_sessions: 1}\nrutnime: {}\n",
            ["scenario.yaml:2:", "rutnime"],
            id="unknown-key",
        ),
        pytest.param(
            "client: {tokenizer: {type: hf, path: /nonexistent/tokenizer.json}}\n"
            "runtime: {max_sessions: 1}\n",
            ["scenario.yaml:1:", "client.tokenizer.path: tokenizer file not found"],
            id="missing-hf-tokenizer",
        ),
        pytest.param(
            "session_generator: {type: trace, trace_file: /nonexistent/trace.jsonl}\n"
            "runtime: {max_sessions: 1}\n",
            [
                "scenario.yaml:1:",
                "session_generator.trace_file: /nonexistent/trace.jsonl: cannot read the trace",
            ],
            id="trace-file",
        ),
    ],
)
def test_invalid_scenarios_exit_2_with_one_clear_line(
    tmp_path: Path, text: str, needles: list[str]
) -> None:
    result = _run(tmp_path, text)
    message = result.assert_clean_error(2, *needles)
    assert len(message.splitlines()) <= 2, message
    assert not list((tmp_path / "out").glob("*/requests.parquet"))


def test_an_output_dir_below_a_regular_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = write_scenario(tmp_path, "runtime: {max_sessions: 1}\n")
    result = _veeksha("run", str(path), "--output-dir", str(blocker / "runs"), "--no-plots")
    result.assert_clean_error(2, str(blocker / "runs"), "Not a directory", "--output-dir")


def test_a_model_the_server_does_not_serve_is_refused_before_the_run(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    text = f"client: {{api_base: {fast_simulator.base_url}, model: no-such-model}}\n"
    result = _run(tmp_path, text + "runtime: {max_sessions: 1}\n")
    result.assert_clean_error(2, "client.model", "'no-such-model'", "'veeksha-sim'")


def test_fan_in_above_the_previous_layers_width_is_capped(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        """\
        session_generator:
          type: synthetic
          session_graph:
            type: branching
            num_layers_generator: {type: fixed, value: 3}
            layer_width_generator: {type: fixed, value: 2}
            fan_in_generator: {type: fixed, value: 5}
            request_wait_generator: {type: fixed, interval: 0}
        runtime: {max_sessions: 3, num_workers: 1}
        """,
        "--dry-run",
    )
    assert result.code == 0, result.output
    run_dir = next((tmp_path / "out").iterdir())
    audit = audit_run(run_dir, report=False)
    for row in audit.rows:
        if row["node_id"] > 0:
            assert 1 <= len(row["parents"]) <= 2  # capped at the previous layer's width


@contextlib.contextmanager
def _tiny_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_disk_that_fills_stops_the_run_with_exit_3_and_keeps_the_parts(tmp_path: Path) -> None:
    scenario = write_scenario(
        tmp_path,
        """\
        seed: 3
        traffic_scheduler: {type: rate, interval_generator: {type: fixed, interval: 0.02}}
        session_generator:
          type: synthetic
          session_graph: {type: single_request}
          channels: [{type: text, body_length_generator: {type: fixed, value: 600}}]
          output_spec: {text: {output_length_generator: {type: fixed, value: 10}}}
        trace_recorder: {enabled: true, include_content: true}
        runtime:
          {max_sessions: -1, benchmark_timeout: 20, post_timeout_grace_seconds: 1, num_workers: 1}
        evaluators: [{type: performance, stream_metrics: false}]
        """,
    )
    with _tiny_tmpfs(tmp_path / "disk", "300k") as disk:
        run = start_run(scenario, disk)
        result = run.finish(timeout=30)  # ~150 KB of trace per second: full within seconds
        message = result.assert_clean_error(3, "No space left on device", "kept")
        assert "cannot write results to" in message
        run.assert_no_survivors()
        subprocess.run(["mount", "-o", "remount,size=20m", str(disk)], check=True)
        # (the trace is not audited: its last write is the one the full disk cut short)
        audit = audit_run(run.run_dir, finalised=False, trace=False)
        assert audit.requests.num_rows >= 10  # the first second's rows
