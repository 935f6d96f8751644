"""Hostile servers for the robustness tests: real processes on loopback that misbehave on purpose.

``HostileServer("tests.integration.hostile.behaviours_x:name", key=value, ...)`` starts
``server.py`` with that behaviour in a forked process, and ``hostile_run`` runs ``veeksha run``
against it (3-turn linear chats with history, as a user's first try would be) and audits the run
folder: one row per node, readable Parquet, ``veeksha report`` works, no traceback, no orphan
process, the API key (planted for every run) in no output in any form. Behaviours live in modules
beside ``server.py``, one module per kind of misbehaviour.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.integration.robustness.helpers import (
    Audit,
    CliResult,
    audit_run,
    cli_env,
    run_in_process,
    start_run,
    write_scenario,
)
from veeksha.record.trace import read_trace

__all__ = [
    "HostileRun",
    "HostileServer",
    "assert_key_nowhere",
    "hostile_run",
    "hostile_scenario",
]

_ROOT = Path(__file__).resolve().parents[3]


class HostileServer:
    """``server.py`` in a process of its own with ``behaviour`` (``module:function``) and its
    options, forked from the test's process (an interpreter of its own would add ~0.1 CPU-s of
    start-up and imports to each of the ~150 hostile tests: the server needs nothing fresh).

    ``base_url`` is ``http://127.0.0.1:PORT/v1``; ``received()`` the requests it logged.
    """

    def __init__(self, behaviour: str, log_dir: Path, **options: Any) -> None:
        self.behaviour = behaviour
        self.log_file = log_dir / f"hostile-{os.getpid()}-{id(self)}.jsonl"
        self.options = {"log": str(self.log_file), **{k: str(v) for k, v in options.items()}}
        self._pid = 0
        self.port = 0

    def __enter__(self) -> HostileServer:
        from tests.integration.hostile.server import load_behaviour, main

        load_behaviour(self.behaviour)  # (imported here: an error is the test's, not a child's)
        args = [self.behaviour, *(f"{k}={v}" for k, v in self.options.items())]
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the server: it never returns into the test's code
            code = 1
            try:
                gc.freeze()  # (the test process's objects: never collected, so never copied)
                os.close(read_end)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                main(args, port_fd=write_end)
                code = 0
            except BaseException:  # noqa: BLE001 - said, then the child ends: never pytest
                traceback.print_exc()
            finally:
                os._exit(code)
        self._pid = pid
        os.close(write_end)
        with os.fdopen(read_end, "rb") as port_pipe:
            line = port_pipe.readline()
        if not line.strip():
            self._stop()
            raise RuntimeError(f"the hostile server {self.behaviour} did not start")
        self.port = int(line)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
            os.waitpid(self._pid, 0)
            self._pid = 0

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def received(self) -> list[dict[str, Any]]:
        """Every request the server logged: method, path, headers (lower-case), body."""
        if not self.log_file.exists():
            return []
        return [json.loads(line) for line in self.log_file.read_text().splitlines() if line]


def hostile_scenario(
    api_base: str,
    *,
    sessions: int = 4,
    turns: int = 3,
    rate: float = 8.0,
    request_timeout: float = 20.0,
    output_tokens: int = 6,
    extra: str = "",
    client_extra: str = "",
) -> str:
    """The scenario of a hostile-server test: ``sessions`` linear chats of ``turns`` turns with
    history at ``rate`` sessions/s (a fixed interval), one worker, no plots. ``request_timeout``
    is roomy (a correct answer never nears it, even on a loaded machine); a test about timeouts
    sets its own."""
    return f"""\
seed: 7
traffic_scheduler:
  type: rate
  interval_generator: {{type: fixed, interval: {1 / rate}}}
session_generator:
  type: synthetic
  session_graph:
    type: linear
    inherit_history: true
    num_request_generator: {{type: fixed, value: {turns}}}
    request_wait_generator: {{type: fixed, interval: 0.01}}
  channels: [{{type: text, body_length_generator: {{type: fixed, value: 8}}}}]
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: {output_tokens}}}}}}}
client:
  api_base: {api_base}
  model: m
  request_timeout: {request_timeout}
{client_extra}
runtime: {{max_sessions: {sessions}, benchmark_timeout: 60, num_workers: 1}}
trace_recorder: {{enabled: true, include_content: true}}
evaluators: [{{type: performance, stream_metrics: false}}]
server_metrics: {{enabled: false}}  # (the tests count every request the run sends)
{extra}
"""


@dataclass
class HostileRun:
    """What a run against a hostile server left: its exit, output and audited folder."""

    result: CliResult
    run_dir: Path | None
    audit: Audit | None

    @property
    def rows(self) -> list[dict[str, Any]]:
        assert self.audit is not None
        return self.audit.rows

    def history_answers(self) -> list[str]:
        """The assistant messages that later turns re-sent as history (from trace.jsonl with
        content): what veeksha took each answer to be."""
        assert self.run_dir is not None
        answers = []
        for entry in read_trace(self.run_dir / "trace.jsonl"):
            answers += [text for role, text in entry.messages or [] if role == "assistant"]
        return answers


def hostile_run(
    tmp_path: Path,
    scenario_text: str,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    expect_code: int | tuple[int, ...] = 0,
    audit: bool = True,
    in_process: bool = False,
) -> HostileRun:
    """``veeksha run`` the scenario for real; check exit code, no traceback, no orphan, the API
    key in no output; audit the folder.

    A unique API key is planted through ``OPENAI_API_KEY`` (unless ``env`` brings its own), so
    every hostile run also checks that the key reached no file of the run folder (raw bytes and
    decoded Parquet) and no output of the command, whole or as a fragment.

    ``in_process``: the command's code runs in this process (``run_in_process``: the workers
    that read the server are real processes all the same), for tests whose subject is what the
    workers make of the server's bytes, not the command's process; ``timeout`` is then pytest's.
    """
    env = dict(env or cli_env())
    key = env.setdefault("OPENAI_API_KEY", f"sk-hostile-{uuid.uuid4().hex}")
    scenario = write_scenario(tmp_path, scenario_text)
    output_dir = tmp_path / "out"
    if in_process:
        result = run_in_process(scenario, output_dir, env=env)
    else:
        run = start_run(scenario, output_dir, env=env)
        result = run.finish(timeout=timeout)
    codes = (expect_code,) if isinstance(expect_code, int) else expect_code
    assert result.code in codes, (result.code, result.output)
    assert "Traceback" not in result.output, result.output
    if in_process:
        folders = [p for p in output_dir.iterdir() if p.is_dir()]
        run_dir = folders[0] if len(folders) == 1 else None
    else:
        if run.descendants:
            run.assert_no_survivors()
        run_dir = run.run_dir_or_none()
    checked = audit_run(run_dir) if audit and run_dir is not None else None
    assert_key_nowhere(key, result.output, run_dir, checked)
    return HostileRun(result, run_dir, checked)


def assert_key_nowhere(
    key: str, output: str, run_dir: Path | None, audit: Audit | None = None
) -> None:
    """Neither ``key`` nor any 10-character piece of it is in the output or the run folder."""
    pieces = {key[i : i + 10] for i in range(len(key) - 9)} if len(key) >= 10 else {key}
    texts = {"the command's output": output}
    if run_dir is not None:
        for path in run_dir.rglob("*"):
            if path.is_file():
                texts[str(path)] = path.read_bytes().decode("latin-1")
    if audit is not None:  # decoded, in case compression hid it
        for name, table in (("requests", audit.requests), ("sessions", audit.sessions)):
            texts[f"decoded {name}.parquet"] = json.dumps(table.to_pylist(), default=str)
    leaks = [where for where, text in texts.items() if any(p in text for p in pieces)]
    assert not leaks, f"the API key (or a piece of it) is in {leaks}"
