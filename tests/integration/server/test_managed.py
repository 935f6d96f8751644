"""Managed servers: started, used, logged and stopped by veeksha, and never left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest

from veeksha.engine.run import run_scenario
from veeksha.errors import ConfigurationError, TargetError
from veeksha.experiment.point import run_point
from veeksha.scenario.loader import load_scenario_text
from veeksha.scenario.server import CommandServer
from veeksha.server.managed import SERVER_LOG, ManagedServer, server_identity

TINY = str(Path(__file__).with_name("tiny_server.py"))
VEEKSHA = str(Path(sys.executable).parent / "veeksha")

QUICK = """
server: {{type: veeksha_sim}}
traffic_scheduler:
  type: rate
  interval_generator: {{type: poisson, arrival_rate: 50}}
session_generator:
  type: synthetic
  session_graph: {{type: single_request}}
  output_spec: {{text: {{output_length_generator: {{type: fixed, value: 4}}}}}}
runtime: {{max_sessions: {sessions}, benchmark_timeout: {timeout}, num_workers: 1}}
trace_recorder: {{enabled: false}}
evaluators: [{{type: performance, stream_metrics: false}}]
"""


def _gone(pid: int, within_s: float = 20.0) -> bool:
    """Whether process ``pid`` is gone (or a zombie) within a generous "it did not hang" limit."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _group_gone(pgid: int) -> bool:
    return all(_gone(p.pid) for p in psutil.process_iter() if _pgid(p.pid) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _server_pid(log: Path) -> int:
    found = re.search(r"server pid (\d+)", log.read_text())
    assert found, log.read_text()
    return int(found.group(1))


def test_managed_sim_scenario_runs_logs_its_server_reports_its_view_and_stops_it(
    tmp_path: Path,
) -> None:
    scenario = Path(__file__).parents[3] / "scenarios" / "managed_sim.yaml"
    quick = ["runtime.max_sessions=10", "simulator.decode_step_ms=2", "server_metrics.interval=0.2"]
    proc = subprocess.run(
        [VEEKSHA, "run", str(scenario), "--output-dir", str(tmp_path / "o")]
        + [arg for setting in quick for arg in ("--set", setting)],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert proc.returncode in (0, 4), proc.stderr  # (4: a health check failed on a busy host)
    assert "server's view" in proc.stderr
    (run_dir,) = (tmp_path / "o").iterdir()
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert len(requests) == 10
    assert (requests.status == "ok").all()
    assert (run_dir / "plots" / "server_timeline.png").exists()
    log = (run_dir / SERVER_LOG).read_text()
    assert "veeksha sim-server listening on" in log
    assert "[veeksha] stopped" in log
    assert _gone(_server_pid(run_dir / SERVER_LOG))
    target = json.loads(json.loads((run_dir / "summary.json").read_text())["run"]["target"])
    assert target["kind"] == "managed"
    assert target["server"]["type"] == "veeksha_sim"


def test_runs_given_a_running_server_share_it_and_leave_it_running(tmp_path: Path) -> None:
    scenario = load_scenario_text(QUICK.format(sessions=4, timeout=30), "s.yaml")
    with ManagedServer.for_scenario(scenario, tmp_path / SERVER_LOG) as server:
        pid = server.pid
        assert pid is not None
        outcome = run_scenario(scenario, tmp_path / "a", quiet=True, plots=False, server=server)
        assert outcome.requests == 4
        point = run_point(scenario, tmp_path / "b", plots=False, server=server)  # the sweep seam
        assert point.exit_code == 0
        assert point.summary["requests"]["total"] == 4
        for run_dir in (tmp_path / "a", *(tmp_path / "b").iterdir()):
            assert not (run_dir / SERVER_LOG).exists()
        assert server.running
        assert server.pid == pid
    assert _gone(pid)
    assert server_identity(scenario) == server_identity(scenario.model_copy())
    other = scenario.model_copy(update={"server": CommandServer(command=["x"], model="m")})
    assert server_identity(other) != server_identity(scenario)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_sigkill_or_ctrl_c_of_veeksha_mid_run_leaves_no_server(
    tmp_path: Path, sig: signal.Signals
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(QUICK.format(sessions=100000, timeout=300))
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [VEEKSHA, "run", str(scenario), "-q", "--no-plots", "--output-dir", str(out)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        log = None
        while time.monotonic() < deadline:  # until requests flow (the run's t0 is past)
            logs = list(out.glob(f"*/{SERVER_LOG}"))
            runlog = list(out.glob("*/run.log"))
            t0 = re.search(r"t0 = (\S+)", runlog[0].read_text()) if logs and runlog else None
            if t0 is not None:
                log = logs[0]
                # (the line comes up to 50 ms before t0, and the watch's first scrape at t0)
                time.sleep(max(0.0, datetime.fromisoformat(t0[1]).timestamp() - time.time()) + 0.2)
                break
            time.sleep(0.05)
        assert log is not None, "the run never started"
        pid = _server_pid(log)
        assert psutil.pid_exists(pid)
        (watch,) = [  # the server watch's process (scraping is on by default)
            child
            for child in psutil.Process(proc.pid).children()
            if child.name() == "veeksha-watch"  # (forked: veeksha.forked)
            or "veeksha.server.watch_process" in child.cmdline()
        ]
        proc.send_signal(sig)
        code = proc.wait(60)
        assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 3)  # 3: interrupted
        assert _gone(pid)
        assert _group_gone(pid)
        assert _gone(watch.pid)
        # it saw veeksha go and finalised the file (its last scrape may find the server gone)
        meta = pq.read_schema(log.parent / "server_metrics.parquet").metadata
        assert meta[b"server_metrics_status"] in (b"ok", b"partial")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_waiting_for_ready_stops_at_once_and_leaves_no_server(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # a server that never gets ready (its /health is 404) within a long ready_timeout: the
    # signal was held until the timeout, as the wait blocks the run's event loop
    command = [sys.executable, TINY, "{port}", "--no-health", "--child"]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        QUICK.format(sessions=10, timeout=30).replace(
            "server: {type: veeksha_sim}",
            f"server: {{type: command, command: {json.dumps(command)}, model: tiny, "
            "ready_path: /health, ready_timeout: 120}",
        )
    )
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [VEEKSHA, "run", str(scenario), "-q", "--no-plots", "--output-dir", str(out)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the server runs (and a child of its own)
            logs = list(out.glob(f"*/{SERVER_LOG}"))
            if logs and "child pid" in logs[0].read_text():
                break
            time.sleep(0.05)
        (log,) = logs
        pid = _server_pid(log)
        child = int(re.search(r"child pid (\d+)", log.read_text()).group(1))  # type: ignore[union-attr]
        time.sleep(0.3)  # (a few readiness probes in)
        sent = time.monotonic()
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 3, stderr  # interrupted
        assert time.monotonic() - sent < 15  # (not at the 120-s ready_timeout)
        assert "interrupted" in stderr
        assert "not ready within" not in stderr
        assert "[veeksha] interrupted while waiting for it to be ready" in log.read_text()
        assert "interrupted (Ctrl-C, SIGTERM or SIGHUP)" in (log.parent / "run.log").read_text()
        assert _gone(pid)
        assert _gone(child)
        assert _group_gone(pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _server(tmp_path: Path, *command: str, **settings: object) -> ManagedServer:
    config = CommandServer(command=list(command), model="tiny", **settings)  # type: ignore[arg-type]
    return ManagedServer(config, tmp_path / SERVER_LOG, "tiny", api_key="sk-secret-key-123")


def test_a_program_that_does_not_exist_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"'no-such-server-xyz' was not found.*command"):
        _server(tmp_path, "no-such-server-xyz", "--port", "{port}").start()


def test_a_port_another_server_holds_is_refused_before_anything_starts(tmp_path: Path) -> None:
    # Another server answers on the port: the one started there would fail to bind it, and
    # its readiness probe would have taken the other's /health for its own (the run measured it).
    other = ManagedServer(
        CommandServer(command=[sys.executable, TINY, "{port}"]), tmp_path / "o.log", "tiny"
    )
    with other:
        server = _server(tmp_path, sys.executable, TINY, "{port}", port=other.port)
        with pytest.raises(
            ConfigurationError,
            match=rf"^server.port: 127.0.0.1:{other.port} is already in use by another process "
            r"\(another server\?\): stop it, or choose another server.port \(0 picks a free one\)$",
        ):
            server.start()
        assert server.pid is None  # (nothing started)
        assert not (tmp_path / SERVER_LOG).exists()


def test_a_server_that_exits_at_once_fails_with_its_last_lines(tmp_path: Path) -> None:
    script = "import sys; print('loading sk-secret-key-123'); print('boom: no GPU'); sys.exit(3)"
    server = _server(tmp_path, sys.executable, "-c", script)
    with pytest.raises(TargetError, match=r"exited with code 3 before it was ready") as caught:
        server.start()
    assert str(caught.value).endswith("; last lines:\nloading ***\nboom: no GPU")
    assert "veeksha-supervisor" not in str(
        caught.value
    )  # (its pid line is the log's, not the server's)
    assert "sk-secret-key-123" not in str(caught.value)
    assert "sk-secret-key-123" not in (tmp_path / SERVER_LOG).read_text()
    assert "loading ***" in (tmp_path / SERVER_LOG).read_text()


def test_the_servers_output_is_logged_by_its_supervisor_with_no_thread_here(
    tmp_path: Path,
) -> None:
    """The supervisor writes the server's output to server.log, masked: veeksha's process keeps
    one thread (a sweep forks each point's helpers from it), and a last line without its
    newline is written at the end."""
    import threading

    script = (
        "import sys, time, http.server\n"
        "print('loading sk-secret-key-123', flush=True)\n"
        "sys.stderr.write('a warning on stderr\\n'); sys.stderr.flush()\n"
        "srv = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])),"
        " http.server.SimpleHTTPRequestHandler)\n"
        "srv.timeout = 0.05\n"
        "while True: srv.handle_request()\n"
    )
    before = threading.active_count()
    server = _server(tmp_path, sys.executable, "-c", script, "{port}", ready_path="/")
    server.start()
    try:
        assert threading.active_count() == before
        deadline = time.monotonic() + 10  # (the supervisor writes as the server prints)
        while "a warning" not in (tmp_path / SERVER_LOG).read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        server.stop()
    log = (tmp_path / SERVER_LOG).read_text()
    assert "loading ***" in log
    assert "a warning on stderr" in log
    assert "sk-secret-key-123" not in log
    assert f"server pid {server.pid}" in log
    assert log.splitlines()[-1].startswith("[veeksha] stopped (exit code")
    # a last line without its newline: written when the server ends
    tail = "import sys; print('first'); sys.stdout.write('no newline sk-secret-key-123')"
    unfinished = _server(tmp_path / "b", sys.executable, "-c", tail)
    with pytest.raises(TargetError, match=r"no newline \*\*\*"):
        unfinished.start()


def test_secrets_of_the_servers_environment_never_reach_its_log_or_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a wrapper that prints its environment's secrets (set -x, a launcher echoing its settings),
    # from veeksha's environment and from the server's env: section
    monkeypatch.setenv("HF_TOKEN", "hf_TopSecretToken42")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # (not a secret: kept)
    script = 'echo "hf=$HF_TOKEN db=$DB_PASSWORD tp=$TOKENIZERS_PARALLELISM"; exit 3'
    server = _server(tmp_path, "sh", "-c", script, env={"DB_PASSWORD": "pw-Hunter2-xyz"})
    with pytest.raises(TargetError, match=r"exited with code 3") as caught:
        server.start()
    log = (tmp_path / SERVER_LOG).read_text()
    assert "hf=*** db=*** tp=false" in log
    for text in (log, str(caught.value)):
        assert "TopSecretToken42" not in text
        assert "Hunter2" not in text


def test_a_server_never_ready_is_stopped_with_its_children(tmp_path: Path) -> None:
    # /health is 404 and /v1/models would do, but ready_path insists on /health
    server = _server(
        tmp_path,
        sys.executable,
        TINY,
        "{port}",
        "--no-health",
        "--child",
        "--ignore-term",
        ready_path="/health",
        ready_timeout=1.0,
        stop_timeout=0.2,
    )
    with pytest.raises(TargetError, match=r"not ready within 1 s \(GET /health: HTTP 404\)"):
        server.start()
    log = (tmp_path / SERVER_LOG).read_text()
    child = int(re.search(r"child pid (\d+)", log).group(1))  # type: ignore[union-attr]
    assert _gone(_server_pid(tmp_path / SERVER_LOG))
    assert _gone(child)


PLACED = """\
seed: 1
session_generator:
  type: synthetic
  session_graph: {{type: single_request}}
server:
  type: command
  model: tiny
  command: {command}
  ready_timeout: 1
{more}"""  # (command: line 8, ready_timeout: line 9, more: from line 10)


@pytest.mark.parametrize(
    ("command", "more", "where"),
    [
        # exits before it is ready: its command line is the suspect
        (
            f"[{sys.executable}, -c, 'exit(3)']",
            "",
            r"^s.yaml:8:3: server.command: the managed server \(.*\) exited with code 3 before "
            r"it was ready \(its log says why: fix server.command\); its log: ",
        ),
        # nothing listens within ready_timeout
        (
            f"[{sys.executable}, -c, 'import time; time.sleep(30)']",
            "",
            r"^s.yaml:9:3: server.ready_timeout: the managed server \(.*\) was not ready within "
            r"1 s \(GET http://.*/health: .*\); raise server.ready_timeout if it needs longer, "
            r"or fix server.ready_path; its log: ",
        ),
        # it answers, but not 2xx, on the ready_path given: that path is the suspect
        (
            f"[{sys.executable}, {TINY}, '{{port}}', --no-health]",
            "  ready_path: /health\n",
            r"^s.yaml:10:3: server.ready_path: the managed server \(.*\) was not ready within "
            r"1 s \(GET /health: HTTP 404\)",
        ),
    ],
    ids=["exits", "never_listens", "ready_path_404"],
)
def test_a_server_that_fails_to_become_ready_is_named_at_the_key_to_fix(
    tmp_path: Path, command: str, more: str, where: str
) -> None:
    # was: `the managed server (...) ...` with no file, line or key
    scenario = load_scenario_text(PLACED.format(command=command, more=more), "s.yaml")
    with pytest.raises(TargetError, match=where):
        ManagedServer.for_scenario(scenario, tmp_path / SERVER_LOG).start()


def test_veeksha_run_names_a_bad_server_key_on_one_line_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(PLACED.format(command="[no-such-server-xyz]", more=""))
    proc = subprocess.run(
        [VEEKSHA, "run", str(path), "--output-dir", str(tmp_path / "out"), "-q"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {path}:8:13: server.command[0]: the program 'no-such-server-xyz' was not found "
        "(PATH or the path given): install it or fix server.command[0]"
    )


def test_ready_falls_back_to_models_and_stop_kills_the_process_group(tmp_path: Path) -> None:
    server = _server(tmp_path, sys.executable, TINY, "{port}", "--no-health", "--child")
    with server:
        assert server.api_base.endswith(f":{server.port}/v1")
        pid = server.pid
        assert pid is not None
        log = (tmp_path / SERVER_LOG).read_text()
        child = int(re.search(r"child pid (\d+)", log).group(1))  # type: ignore[union-attr]
        assert psutil.pid_exists(child)
        assert os.getpgid(child) == pid
    assert _gone(pid)
    assert _gone(child)


def test_a_server_that_dies_mid_run_stops_the_run_and_says_so(tmp_path: Path) -> None:
    # the command serves for 2 s from when its port opens (on a loaded machine the server's
    # start takes a good part of a second), then its server is killed and it exits 9
    ready = "until (exec 3<>/dev/tcp/{host}/{port}) 2>/dev/null; do sleep 0.05; done"
    serve = (
        f"{VEEKSHA} sim-server --host {{host}} --port {{port}} & P=$!; {ready}; sleep 2; "
        "kill -9 $P; exit 9"
    )
    text = QUICK.format(sessions=100_000, timeout=30).replace(
        "server: {type: veeksha_sim}",
        f"server: {{type: command, command: [bash, -c, {json.dumps(serve)}], model: veeksha-sim}}",
    )
    scenario = load_scenario_text(text, "dies.yaml")
    run_dir = tmp_path / "run"
    outcome = run_scenario(scenario, run_dir, quiet=True, plots=False)
    assert outcome.interrupted  # (at the death, not at the 30-s timeout)
    assert outcome.stop_reason == "server_exited"
    error = outcome.extra["error"]
    assert re.fullmatch(
        rf"the managed server exited \(code 9\) \d+\.\d{{3}} s after t0: the run stops; its log: "
        rf"{re.escape(str(run_dir / SERVER_LOG))}",
        error,
    ), error
    assert error in (run_dir / "run.log").read_text()
    assert (
        (run_dir / SERVER_LOG).read_text().rstrip().endswith("[veeksha] had exited (exit code 9)")
    )
    rows = pq.read_table(run_dir / "requests.parquet").to_pylist()
    assert sum(r["status"] == "ok" for r in rows) > 20  # (~2 s at 50 sessions/s)
    summary = json.loads((run_dir / "summary.json").read_text())["run"]
    assert (summary["interrupted"], summary["stop_reason"]) == (True, "server_exited")
