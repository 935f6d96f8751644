"""Agent workflows whose clients go to several servers (the built-in simulator serving two
models, and another simulator process): the server's view, per-client failures, and the
``dependencies`` check with re-prompts and capped clients, held against the rows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.integration.robustness.helpers import run_as_the_command
from veeksha.scenario.loader import load_scenario_text

# planner and flaky: two models of the built-in simulator (the first client's server);
# worker: another simulator process. Both servers' /metrics are scraped, in the same rounds.
SEVERAL_SERVERS = """
seed: 5
clients:
  - {name: planner, model: plan-big}
  - {name: flaky, model: w-flaky}
  - {name: worker, model: w-ext, api_base: API_BASE}
simulator:
  seed: 3
  models:
    plan-big: {ttft_ms: 5, itl_ms: 1}
    w-flaky: {ttft_ms: 2, itl_ms: 1, faults: {http_500_rate: 0.3}}
traffic_scheduler: {type: concurrent, target_concurrent_sessions: 3, rampup_seconds: 0}
session_generator:
  session_graph:
    type: agent_rounds
    rounds: 2
    agents:
      - {id: plan, client: planner}
      - {id: w1, client: flaky, speak_after_within_round: [plan]}
      - {id: w2, client: worker, speak_after_within_round: [plan]}
      - {id: judge, client: planner, speak_after_within_round: [w1, w2]}
  channels: [{body_length_generator: {type: fixed, value: 6}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 12, benchmark_timeout: 60, num_workers: 1}
"""


@pytest.fixture(scope="module")
def several(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    from veeksha.scenario.simulator import SimulatorConfig
    from veeksha.simulator.process import SimulatorProcess

    with SimulatorProcess(SimulatorConfig(model="w-ext", ttft_ms=3, itl_ms=1), fork=True) as other:
        text = SEVERAL_SERVERS.replace("API_BASE", other.base_url)
        run_dir = tmp_path_factory.mktemp("several") / "run"
        run_as_the_command(
            load_scenario_text(text, "several.yaml"), run_dir, quiet=True, plots=True
        )
    return run_dir, pd.read_parquet(run_dir / "requests.parquet")


def _check(run_dir: Path, name: str) -> dict[str, Any]:
    checks = json.loads((run_dir / "health.json").read_text())["checks"]
    check: dict[str, Any] = next(c for c in checks if c["name"] == name)
    return check


def test_both_servers_are_scraped_and_held_against_every_clients_rows(
    several: tuple[Path, pd.DataFrame],
) -> None:
    """The built-in simulator served planner and flaky, the other process worker: both are
    scraped in the same rounds, each sample labelled by its server, and their finished count
    together is held against every client's rows."""
    run_dir, rows = several
    sent = rows[rows.sent_at.notna() & (rows.kind != "tool")]
    agreement = _check(run_dir, "server_agreement")
    assert agreement["status"] == "PASS", agreement["detail"]
    assert "clients" not in agreement["statistics"]
    assert agreement["statistics"]["ours_at_most"] == len(sent)
    # (its count is the last scrape's: on a loaded machine a few answers may land after it)
    assert (sent.client == "worker").sum() < agreement["statistics"]["server_finished"]
    assert agreement["statistics"]["server_finished"] <= len(sent)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "clients" not in summary["server"]
    assert len(summary["server"]["servers"]) == 2
    accounts = summary["run"]["server_metrics"]["servers"]
    assert [a["status"] for a in accounts] == ["ok", "ok"]
    metrics = pd.read_parquet(run_dir / "server_metrics.parquet")
    running = metrics[metrics.metric == "vllm:num_requests_running"]
    servers = running.labels.map(lambda text: json.loads(text)["server"])
    assert set(servers) == {"0", "1"}
    # every round holds both servers' samples at one time (its last answer's)
    assert (running.groupby("t").labels.count() >= 2).all()
    finished = metrics[metrics.canonical == "finished"]
    by_server = finished.assign(server=finished.labels.map(lambda t: json.loads(t)["server"]))
    last = by_server[by_server.t == by_server.t.max()].groupby("server").value.sum()
    assert last["1"] >= len(rows[(rows.client == "worker") & (rows.status == "ok")])
    assert (run_dir / "plots" / "server_timeline.png").stat().st_size > 0
    # each server's own line: its counts add up to the sum, the other process served worker
    first, second = summary["server"]["per_server"]
    assert [first["server"], second["server"]] == ["0", "1"]
    assert [first["url"], second["url"]] == summary["server"]["servers"]
    assert first["finished"] + second["finished"] == summary["server"]["finished"]
    # (a counter's increase from the first scrape to the last: a loaded machine's first scrape
    # may come after the first answers, as server_agreement's lower bound allows)
    scraped = sent[
        (sent.status == "ok")
        & (sent.sent_at >= summary["server"]["first_t"])
        & (sent.completed_at <= summary["server"]["last_t"])
    ]
    assert (scraped.client == "worker").sum() > 0
    assert second["finished"] >= (scraped.client == "worker").sum()
    assert first["finished"] >= (scraped.client != "worker").sum()
    # and each one's latency from its own histograms: their counts add up to the sum's, and
    # the sum's mean is their count-weighted mean
    ttft = [entry["latency"]["ttft"] for entry in (first, second)]
    total = summary["server"]["latency"]["ttft"]
    assert ttft[0]["count"] + ttft[1]["count"] == total["count"]
    assert ttft[1]["count"] >= (scraped.client == "worker").sum()
    weighted = sum(t["mean"] * t["count"] for t in ttft) / total["count"]
    assert weighted == pytest.approx(total["mean"], rel=1e-9)


def test_compare_sets_each_servers_view_beside_the_same_servers(
    several: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    """``veeksha compare`` of the run and a copy of it: the servers' sums, then each server's
    own lines, its TTFT mean from its own histograms as summary.json has it."""
    import shutil

    from click.testing import CliRunner

    from veeksha.cli import main

    run_dir, _ = several
    copy = shutil.copytree(run_dir, tmp_path / "again")
    result = CliRunner().invoke(main, ["compare", str(run_dir), str(copy)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.output.splitlines()]
    assert "servers' views (their sums, then each server's; latency: histogram means)" in lines
    summary = json.loads((run_dir / "summary.json").read_text())
    for entry in summary["server"]["per_server"]:
        at = lines.index(f"server {entry['server']}")
        ttft = next(line for line in lines[at:] if line.startswith("  TTFT mean"))
        mean_ms = entry["latency"]["ttft"]["mean"] * 1000
        assert float(ttft.split()[2]) == pytest.approx(mean_ms, rel=5e-3)  # (4 digits shown)
        assert ttft.endswith("(+0.0%)")


def test_each_clients_failures_are_its_own(several: tuple[Path, pd.DataFrame]) -> None:
    """flaky's 500s are flaky's failures; the planner's turns cancelled because flaky failed
    are cancelled, not failures of the planner (requests − ok made the healthy planner look as
    bad as the failing client)."""
    run_dir, rows = several
    clients = json.loads((run_dir / "summary.json").read_text())["clients"]
    for name, section in clients.items():
        mine = rows[rows.client == name]
        assert section["failed"] == mine.status.isin(["error", "timeout"]).sum()
        assert section["cancelled"] == (mine.status == "cancelled").sum()
        assert section["ok"] + section["failed"] + section["cancelled"] == section["requests"]
    assert clients["flaky"]["failed"] > 0
    assert clients["planner"]["failed"] == clients["worker"]["failed"] == 0
    assert clients["planner"]["cancelled"] > 0  # (the judges and later plans of failed sessions)
    agents = json.loads((run_dir / "summary.json").read_text())["agents"]
    assert agents["w1"]["failed"] == clients["flaky"]["failed"]
    assert agents["judge"]["failed"] == 0


def test_the_report_says_whose_server_it_shows_and_who_failed(
    several: tuple[Path, pd.DataFrame],
) -> None:
    from click.testing import CliRunner

    from veeksha.cli import main

    run_dir, _ = several
    result = CliRunner().invoke(main, ["report", str(run_dir), "--no-plots"], env={"CI": "true"})
    text = result.output
    assert "2 servers' view (" in " ".join(text.split())
    assert "each server" in text
    assert "the other clients' servers were not scraped" not in text
    clients = json.loads((run_dir / "summary.json").read_text())["clients"]
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.strip()}
    # client, ok, failed, ...: whole, never cut ("plann…")
    assert lines["planner"][:3] == ["planner", str(clients["planner"]["ok"]), "0"]
    assert lines["flaky"][:3] == [
        "flaky",
        str(clients["flaky"]["ok"]),
        str(clients["flaky"]["failed"]),
    ]


# re-prompts on the planner (each answer ~0.2 s), and a slow client capped at 1 that four
# sessions wait for: neither is late, with a late threshold of 0.15 s
WAITS = """
seed: 2
clients:
  - {name: planner, model: plan-big}
  - {name: slow, model: w-slow, max_in_flight: 1}
simulator:
  seed: 1
  models:
    plan-big: {ttft_ms: 200, itl_ms: 1, faults: {invalid_answer_probability: 0.5}}
    w-slow: {ttft_ms: 200, itl_ms: 1}
traffic_scheduler: {type: concurrent, target_concurrent_sessions: 4, rampup_seconds: 0}
session_generator:
  session_graph:
    type: agent_rounds
    rounds: 1
    agents:
      - id: plan
        client: planner
        validation: {type: regex, pattern: '^(?!INVALID)'}
        max_reprompts: 3
      - {id: worker, client: slow, speak_after_within_round: [plan]}
      - {id: judge, client: planner, speak_after_within_round: [worker]}
  channels: [{body_length_generator: {type: fixed, value: 6}}]
  output_spec: {text: {output_length_generator: {type: fixed, value: 4}}}
runtime: {max_sessions: 4, benchmark_timeout: 60, num_workers: 1}
health_checks: {late_threshold_s: 0.15}
"""


def test_reprompts_and_slot_waits_are_not_lateness(tmp_path: Path) -> None:
    """A child is released when its parent's last attempt ended and a re-prompt when the
    attempt before it ended: measured from there, nothing is late. Measured from the parent's
    first attempt (the first row of the node) and with the wait for the capped client's slot
    counted, the check FAILed with requests 'later than 0.15 s'."""
    run_dir = tmp_path / "run"
    run_as_the_command(load_scenario_text(WAITS, "waits.yaml"), run_dir, quiet=True, plots=False)
    rows = pd.read_parquet(run_dir / "requests.parquet")
    assert (rows.status == "ok").all()
    assert (rows.attempt > 0).any()  # re-prompts happened
    assert rows[rows.client == "slow"].queue_wait.max() > 0.15  # the cap held requests
    dependencies = _check(run_dir, "dependencies")
    assert dependencies["status"] == "PASS", dependencies["detail"]
    # the rows agree: each release from its last dependency's end
    final = rows.sort_values("attempt").groupby(["session_id", "node_id"]).tail(1)
    done = final.set_index(["session_id", "node_id"]).completed_at
    for row in rows.itertuples():
        if row.attempt > 0:
            before = rows[
                (rows.session_id == row.session_id)
                & (rows.node_id == row.node_id)
                & (rows.attempt == row.attempt - 1)
            ]
            assert row.ready_at == pytest.approx(before.completed_at.iloc[0], abs=1e-6)
        elif len(row.parents):
            latest = max(done[(row.session_id, p)] for p in row.parents)
            assert row.ready_at == pytest.approx(latest + row.wait_after_ready, abs=1e-6)
