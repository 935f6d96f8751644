"""Trace replay end to end: `veeksha run` against the built-in simulator with trace files the
tests write; malformed traces exit 2 with file:line and leave no run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.conftest import StartSimulator
from tests.integration.robustness.helpers import run_as_the_command
from tests.integration.traces.bad_trace import assert_refused
from veeksha.scenario.loader import load_scenario_text
from veeksha.simulator.process import SimulatorProcess

SPEEDUP = 4.0


def _write_log(path: Path) -> list[tuple[str, float, int, int]]:
    """Six chats of 1-3 turns and single requests, one row unservable (output 0)."""
    rows = []
    for i in range(14):
        session = f"chat{i % 6}" if i < 12 else f"single{i}"
        rows.append((session, round(0.1 * i, 3), 5 + 3 * i, 2 + i % 5))
    rows.append(("broken", 1.45, 10, 0))
    path.write_text(
        "session_id,timestamp,input_length,output_length\n"
        + "".join(f"{s},{t},{i},{o}\n" for s, t, i, o in rows)
    )
    return rows


def _scenario(trace: Path, sim: SimulatorProcess, out: Path) -> str:
    return f"""
seed: 3
traffic_scheduler: {{type: trace, speedup: {SPEEDUP}}}
session_generator:
  type: trace
  trace_file: {trace}
  flavor: {{type: request_log}}
  wrap_mode: false
client: {{api_base: {sim.base_url}, model: veeksha-sim}}
runtime: {{max_sessions: 1000, benchmark_timeout: 60, num_workers: 1}}
output_dir: {out}
"""


def test_a_request_log_replays_its_chats_lengths_and_arrival_times(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    trace = tmp_path / "log.csv"
    rows = _write_log(trace)
    scenario = load_scenario_text(_scenario(trace, fast_simulator, tmp_path), "t.yaml")
    run_dir = tmp_path / "run"
    outcome = run_as_the_command(scenario, run_dir, quiet=True, plots=False)
    assert outcome.stop_reason == "completed"
    requests = pd.read_parquet(run_dir / "requests.parquet")
    sessions = pd.read_parquet(run_dir / "sessions.parquet")
    # 6 chats + 2 singles; the session with an output length of 0 is not replayed
    assert len(sessions) == 8
    assert len(requests) == 14
    assert (requests.status == "ok").all()
    # sessions in order of arrival; each chat's turns in file order, with history
    expected = {}
    for session, _, prompt, output in rows[:-1]:
        expected.setdefault(session, []).append((prompt, output))
    got = {}
    for sid, group in requests.sort_values(["session_id", "node_id"]).groupby("session_id"):
        got[sid] = list(zip(group.prompt_tokens_new, group.requested_output_tokens, strict=True))
        assert list(group.history_parent.iloc[1:]) == list(range(len(group) - 1))
    assert sorted(got.values()) == sorted(expected.values())
    assert (requests.prompt_tokens_new == requests.target_prompt_tokens).all()
    # arrivals: the first row of each session, relative to the first, / speedup
    starts = sorted({s: t for s, t, _, _ in reversed(rows[:-1])}.values())
    planned = sorted(sessions.started_at)
    assert planned == pytest.approx([(t - starts[0]) / SPEEDUP for t in starts], abs=1e-6)
    health = json.loads((run_dir / "health.json").read_text())
    checks = {c["name"]: c for c in health["checks"]}
    for name in ("prompt_length", "output_length"):
        assert checks[name]["status"] == "PASS", checks[name]
    # the arrival checks are judged against the trace (their verdicts depend on the machine's
    # load: only what does not is asserted)
    timeline = checks["arrival_distribution"]["statistics"]
    assert timeline["sessions"] == 8
    assert timeline["max_planned_deviation_s"] < 1e-6
    rate = checks["dispatch_rate"]["statistics"]
    expected_rate = 7 / ((starts[-1] - starts[0]) / SPEEDUP)
    assert rate["trace_rate"] == pytest.approx(expected_rate)
    # the unservable row is reported, not dropped silently
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["run"]["trace"]["unservable_rows"] == 1
    assert summary["run"]["trace"]["unservable_lines"] == [16]
    log = (run_dir / "run.log").read_text()
    assert "WARNING trace: 1 not replayed: zero_length (rows of 1 session(s)" in log
    assert log.count("first lines 16") == 1  # one account of them, the warning


@pytest.mark.parametrize(
    ("name", "text", "flavor", "needles"),
    [
        ("a.jsonl", '{"input_length": 1, "output_length": 2}\n{bad\n', "request_log", [":2:"]),
        ("a.csv", "input_length,output_length\n3,-1\n", "request_log", [":2:", "negative"]),
        ("a.csv", "input_length\n3\n", "request_log", [":1:", "no column 'output_length'"]),
        (
            "a.csv",  # (an empty cell is no session id: not a chat of every such row)
            "session_id,input_length,output_length\na,3,1\n,3,1\n",
            "request_log",
            [":3:", "this row has no session_id where line 2 has one"],
        ),
        ("a.csv", "", "request_log", ["a.csv: the trace file is empty"]),
        ("a.csv", "input_length,output_length\n3,1\n", "mooncake_v9", ["flavor", "request_log"]),
        (
            "a.csv",
            "input_length,output_length,client\n3,1,default\n3,1,big\n",
            "request_log",
            ["a.csv:3:", "client 'big' is not a client of the scenario"],
        ),
    ],
)
def test_a_bad_trace_exits_2_with_file_and_line_and_no_run_folder(
    tmp_path: Path, name: str, text: str, flavor: str, needles: list[str]
) -> None:
    assert_refused(tmp_path, name, text, flavor, needles)


def _lengths_run(
    tmp_path: Path, sim: SimulatorProcess, name: str, scheduler: str, runtime: str, wrap: bool
) -> pd.DataFrame:
    trace = tmp_path / "five.csv"
    trace.write_text("input_length,output_length\n" + "".join(f"{i},{i}\n" for i in range(3, 8)))
    text = f"""
seed: 5
traffic_scheduler: {scheduler}
session_generator: {{type: trace, trace_file: {trace}, flavor: request_log, wrap_mode: {wrap}}}
client: {{api_base: {sim.base_url}, model: veeksha-sim}}
runtime: {runtime}
"""
    run_dir = tmp_path / name
    outcome = run_as_the_command(
        load_scenario_text(text, "t.yaml"), run_dir, quiet=True, plots=False
    )
    assert outcome.stop_reason == "completed"
    return pd.read_parquet(run_dir / "requests.parquet").sort_values("session_id")


def test_wrap_replays_the_trace_again_reshuffled_with_fresh_ids(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    requests = _lengths_run(
        tmp_path,
        fast_simulator,
        "wrap",
        "{type: rate, interval_generator: {type: fixed, interval: 0.002}}",
        "{max_sessions: 15, num_workers: 1}",
        wrap=True,
    )
    assert list(requests.session_id) == list(range(15))
    lengths = list(requests.target_prompt_tokens)
    assert lengths[:5] == [3, 4, 5, 6, 7]  # the first pass in file order
    for k in (5, 10):
        assert sorted(lengths[k : k + 5]) == [3, 4, 5, 6, 7]  # each pass: all the rows again
    assert lengths[5:10] != [3, 4, 5, 6, 7] or lengths[10:] != [3, 4, 5, 6, 7]


def test_without_wrap_the_run_ends_with_the_trace(
    tmp_path: Path, fast_simulator: SimulatorProcess
) -> None:
    requests = _lengths_run(
        tmp_path,
        fast_simulator,
        "nowrap",
        "{type: concurrent, target_concurrent_sessions: 2, rampup_seconds: 0}",
        "{max_sessions: 100, num_workers: 1}",
        wrap=False,
    )
    assert list(requests.target_prompt_tokens) == [3, 4, 5, 6, 7]
    assert (requests.status == "ok").all()


def test_requests_longer_than_max_model_len_are_skipped_and_reported_or_sent(
    tmp_path: Path, start_simulator: StartSimulator
) -> None:
    sim = start_simulator(max_model_len=40)
    trace = tmp_path / "long.csv"
    # a fitting single, an oversized single, a chat whose second turn overflows with its history
    trace.write_text("session_id,input_length,output_length\ns1,10,5\ns2,30,20\nc,20,10\nc,8,5\n")

    def run(oversized: str) -> tuple[pd.DataFrame, dict[str, object], str]:
        text = f"""
seed: 1
traffic_scheduler: {{type: concurrent, target_concurrent_sessions: 3, rampup_seconds: 0}}
session_generator: {{type: trace, trace_file: {trace}, wrap_mode: false, oversized: {oversized}}}
client: {{api_base: {sim.base_url}, model: veeksha-sim, max_model_len: 40}}
runtime: {{max_sessions: 10, num_workers: 1}}
"""
        run_dir = tmp_path / oversized
        run_as_the_command(load_scenario_text(text, "t.yaml"), run_dir, quiet=True, plots=False)
        summary = json.loads((run_dir / "summary.json").read_text())
        requests = pd.read_parquet(run_dir / "requests.parquet")
        return requests, summary["run"]["trace"], (run_dir / "run.log").read_text()

    requests, trace_info, log = run("skip")
    assert list(requests.target_prompt_tokens) == [10]
    assert (requests.status == "ok").all()
    assert trace_info["not_replayed"] == {"oversized": 3}
    assert (trace_info["oversized_sessions"], trace_info["oversized_lines"]) == (2, [3, 5])
    assert "WARNING trace: 3 not replayed: oversized" in log

    requests, trace_info, _ = run("send")  # the server refuses them, as vLLM does
    assert trace_info["not_replayed"] == {}
    by_length = dict(zip(requests.target_prompt_tokens, requests.http_status, strict=True))
    assert by_length[10] == 200
    assert by_length[30] == 400


def test_a_run_of_a_relative_trace_is_reported_again_from_any_folder(
    tmp_path: Path, fast_simulator: SimulatorProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from veeksha.cli import main

    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    _write_log(here / "log.csv")
    monkeypatch.chdir(here)  # the trace is named relative to the current folder, as documented
    text = _scenario(Path("log.csv"), fast_simulator, tmp_path)
    run_dir = tmp_path / "run"
    run_as_the_command(load_scenario_text(text, "t.yaml"), run_dir, quiet=True, plots=False)
    assert f"trace_file: {here / 'log.csv'}" in (run_dir / "config.yaml").read_text()
    monkeypatch.chdir(elsewhere)
    invoked = CliRunner().invoke(main, ["report", str(run_dir), "--no-plots", "--quiet"])
    assert invoked.exit_code in (0, 4), invoked.output
    checks = {c["name"]: c for c in json.loads((run_dir / "health.json").read_text())["checks"]}
    for name in ("dispatch_rate", "arrival_distribution"):
        assert "no longer be read" not in checks[name]["detail"], checks[name]
        assert checks[name]["statistics"], checks[name]


def test_the_built_in_simulator_takes_client_max_model_len_unless_its_own_is_set(
    tmp_path: Path,
) -> None:
    # no api_base: the simulator veeksha starts refused nothing below its default 131072, so
    # oversized: send showed a user testing their context-limit handling no refusal at all
    trace = tmp_path / "long.csv"
    trace.write_text("session_id,input_length,output_length\ns1,10,5\ns2,30,20\n")

    def run(name: str, simulator: str) -> tuple[dict[int, int], pd.DataFrame, str]:
        text = f"""
seed: 1
traffic_scheduler: {{type: concurrent, target_concurrent_sessions: 2, rampup_seconds: 0}}
session_generator: {{type: trace, trace_file: {trace}, wrap_mode: false, oversized: send}}
client: {{max_model_len: 40}}
runtime: {{max_sessions: 10, num_workers: 1}}
{simulator}
"""
        run_dir = tmp_path / name
        run_as_the_command(load_scenario_text(text, "t.yaml"), run_dir, quiet=True, plots=False)
        requests = pd.read_parquet(run_dir / "requests.parquet")
        by_length = dict(zip(requests.target_prompt_tokens, requests.http_status, strict=True))
        target = next(
            line for line in (run_dir / "run.log").read_text().splitlines() if "target: " in line
        )
        return by_length, requests, target

    by_length, requests, target = run("client", "")
    assert by_length == {10: 200, 30: 400}  # 30 + 20 > 40: the simulator's refusal, recorded
    refused = requests[requests.target_prompt_tokens == 30].iloc[0]
    assert refused.status != "ok"
    assert "context" in str(refused.error_message)
    assert "veeksha-sim: max_model_len 40 from client.max_model_len" in target
    assert '"max_model_len": 40' in target

    # both set, differently: the simulator's own is kept (a server larger than the client
    # believes), and the target line says so
    by_length, _, target = run("both", "simulator: {max_model_len: 1000}")
    assert by_length == {10: 200, 30: 200}
    assert (
        "veeksha-sim: max_model_len 1000 from simulator.max_model_len "
        "(client.max_model_len 40 differs)" in target
    )
